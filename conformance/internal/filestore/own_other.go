//go:build !unix

package filestore

import (
	"errors"
	"os"
)

// own needs flock, which this system does not have.
func own(string) (*os.File, error) {
	return nil, errors.New("filestore: needs flock (a Unix system)")
}
