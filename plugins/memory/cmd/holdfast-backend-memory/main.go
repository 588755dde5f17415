// Command holdfast-backend-memory is the in-memory lock backend as a holdfast
// plugin process. The holdfast server launches it; it is not run by hand.
package main

import (
	"github.com/holdfast/holdfast/core/backend/backendserver"
	"github.com/holdfast/holdfast/plugins/memory"
)

func main() { backendserver.Serve(memory.Open) }
