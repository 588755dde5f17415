// Package e2e holds the end-to-end tests of the holdfast binary: they build
// it (or take it from $HOLDFAST_BIN_DIR), run `holdfast serve` as a real
// process with its memory plugin as a real child process, and talk to it
// over Connect JSON, gRPC and gRPC health, as users and SDKs do.
package e2e
