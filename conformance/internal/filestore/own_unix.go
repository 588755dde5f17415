//go:build unix

package filestore

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/holdfast/holdfast/core/backend"
)

// own opens path and takes an exclusive lock on it, without waiting: the
// process that holds it owns the store. The kernel releases the lock when the
// process exits, however it ends, so a killed plugin's successor can own the
// store at once.
func own(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: filestore: %w", backend.ErrUnavailable, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %w: %s", backend.ErrUnavailable, ErrInUse, path)
		}
		return nil, fmt.Errorf("%w: filestore: lock %s: %w", backend.ErrUnavailable, path, err)
	}
	return f, nil
}
