// Command holdfast-backend-broken serves the deliberately broken backend it
// is named after (a link to it called releasewithoutcompare serves that
// one), for the conformance suite's own tests; see package brokenbackends.
package main

import (
	"os"
	"path/filepath"

	"github.com/holdfast/holdfast/conformance/internal/brokenbackends"
)

func main() { brokenbackends.Main(filepath.Base(os.Args[0])) }
