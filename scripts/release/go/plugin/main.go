// Command holdfast-backend-mine is a plugin author's backend in a module of
// their own. scripts/release/test-go.sh builds it in a fresh module outside
// the repository: go.mod made by `go mod init` and
// `go get github.com/holdfast/holdfast/core@vX.Y.Z`, the backend package
// copied from the released plugins/example (the guide's starting point),
// and this main. Nothing may be printed to stdout here: stdout carries the
// plugin handshake.
package main

import (
	"github.com/holdfast/holdfast/core/backend/backendserver"

	"example.com/holdfast-backend-mine/store"
)

func main() { backendserver.Serve(store.Open) }
