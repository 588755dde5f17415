package etcd

import (
	"context"

	"google.golang.org/grpc"

	"github.com/holdfast/holdfast/proto/hlc"
)

// BatchRefused is how many batch transactions etcd refused as too large
// (their items then went their single paths).
func (b *Backend) BatchRefused() int64 { return b.batchRefused.Load() }

// EncodeStamp is a stamp as its key's stamp key stores it.
func EncodeStamp(t hlc.Timestamp) string { return encodeStamp(t) }

// NewWithDialOptions is New with extra gRPC dial options, such as an
// interceptor that counts round trips.
func NewWithDialOptions(ctx context.Context, opts map[string]string, dial ...grpc.DialOption) (*Backend, error) {
	return newBackend(ctx, opts, dial)
}
