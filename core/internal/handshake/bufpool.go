package handshake

import (
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// bufferPoolTiers are the buffer sizes (powers of two) of the process's
// gRPC buffer pool: grpc-go's default tiers (256 B, 4, 16, 32 KiB, 1 MiB)
// with every power of two from 64 to 512 KiB between the last two.
//
// Why: the pool zeroes a buffer's whole capacity on every Get, and gRPC
// takes one to gather each received message into (and one to encode each
// message over 1 KiB). With the default tiers every message over 32 KiB
// takes, and zeroes, a 1 MiB buffer. An ExtendBatch of 500 leases with
// request ids (as the SDK watchdogs send) crosses the plugin hop as more
// than 32 KiB, so each renewal call zeroed 1 MiB buffers on both
// sides of the hop: 6.5% of the server's and 9.7% of the memory plugin's
// CPU under watchdog renewal of 100,000 held locks (docs/capacity.md,
// "Renewals"). The finer tiers zero what a message needs, rounded up to a
// power of two.
var bufferPoolTiers = []uint8{8, 12, 14, 15, 16, 17, 18, 19, 20}

// init sets the pool for the whole process, the host's (the server, which
// imports this package through pluginhost) and every plugin's
// (backendserver): grpc-go allows it only at initialization, and it is the
// only way to reach the pool its proto codec uses.
func init() {
	pool, err := mem.NewBinaryTieredBufferPool(bufferPoolTiers...)
	if err != nil {
		panic("handshake: gRPC buffer pool: " + err.Error()) // the tiers above are constant
	}
	experimental.SetDefaultBufferPool(pool)
}
