// Command holdfast-backend-fakefair serves fakebackend's fair fake as a
// plugin process: an in-memory backend.FairBackend, on which the conformance
// suite checks the fair queue and runs the engine's fair path end to end
// without etcd. Each process is its own store, so it declares shared=false
// (and fair=true: one server's waiters in the store's order). It is a test
// backend, not one to ship.
package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/backend/backendserver"
	"github.com/holdfast/holdfast/core/internal/fakebackend"
)

func main() { backendserver.Serve(open) }

func open(_ context.Context, opts map[string]string) (backend.Backend, error) {
	if len(opts) > 0 {
		return nil, fmt.Errorf("%w: fakefair: takes no options, got %v", backend.ErrInvalidArgument, slices.Sorted(maps.Keys(opts)))
	}
	return plugin{fakebackend.NewFair()}, nil
}

// plugin is the fair fake, one store per process.
type plugin struct{ *fakebackend.Fair }

// Info implements backend.Backend: not shared, since every server that
// starts this plugin has a store of its own.
func (p plugin) Info(ctx context.Context) (backend.Info, error) {
	info, err := p.Fair.Info(ctx)
	info.Name, info.Shared = "fakefair", false
	return info, err
}
