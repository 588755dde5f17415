// Command holdfast-backend-filestore is the single-owner, durable test
// backend of package filestore as a plugin process, for the conformance
// suite's own tests.
package main

import (
	"github.com/holdfast/holdfast/conformance/internal/filestore"
	"github.com/holdfast/holdfast/core/backend/backendserver"
)

func main() { backendserver.Serve(filestore.Open) }
