// Command holdfast-backend-example is the example backend as a holdfast
// plugin: `holdfast serve --backend ./holdfast-backend-example` starts it.
// Nothing may be printed to stdout here: stdout carries the plugin handshake.
package main

import (
	"github.com/holdfast/holdfast/core/backend/backendserver"
	"github.com/holdfast/holdfast/plugins/example"
)

func main() { backendserver.Serve(example.Open) }
