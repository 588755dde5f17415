// Package lockservice is the holdfast.lock.v1.LockService handler that the
// holdfast server mounts, for programs that run the engine in their own
// process: holdfasttest, the Go SDK's in-process test server. It serves
// the API exactly as the server does (the same engine calls and the same
// Connect error codes), without what the server adds around it (TLS,
// tokens, limits, metrics, traces).
package lockservice

import (
	"net/http"

	"connectrpc.com/connect"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/api"
)

// NewHandler returns the path to mount and the handler serving LockService
// on e (Connect, gRPC and gRPC-Web).
func NewHandler(e *engine.Engine, opts ...connect.HandlerOption) (string, http.Handler) {
	return lockv1connect.NewLockServiceHandler(api.New(e), opts...)
}
