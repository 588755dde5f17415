package handshake

import "google.golang.org/grpc"

// The plugin connection's HTTP/2 flow-control windows, the same fixed size
// on both ends (ServerOptions in the plugin, DialOptions in the host).
//
// Why fixed: with grpc-go's default (dynamic) windows, each end runs a
// bandwidth-delay estimator that, whenever a data frame arrives and no
// estimate is under way, sends a window update and a PING and waits for the
// ack. On this connection, which carries one call at a time at low load,
// that is nearly every request and every response: each call makes the
// other process wake up twice more to answer a PING it has no use for,
// while the call itself is under way, on the same cores. A connection over
// a local socket needs no estimate of its bandwidth-delay product.
//
// Why these sizes: a window only bounds how much a side may send before
// the other reads it (it allocates nothing); 1 MiB per stream is sixteen
// times gRPC's initial 64 KiB, far above any lock call, and lets a Watch
// stream or a List page run ahead of its reader as far as before; the
// connection's window is shared by all calls at once (several hundred under
// load), so it is larger.
const (
	StreamWindow = 1 << 20
	ConnWindow   = 16 << 20
)

// ServerOptions are the plugin gRPC server's flow-control options.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(StreamWindow), grpc.StaticConnWindowSize(ConnWindow)}
}

// DialOptions are the host's flow-control options for its connection to
// the plugin.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow)}
}
