package handshake

import (
	"testing"

	"google.golang.org/grpc/mem"
)

// A message a little over grpc-go's largest default tier below 1 MiB (an
// ExtendBatch of 500 with request ids on the plugin hop) must take a
// buffer sized to it, not a zeroed 1 MiB one.
func TestBufferPoolHasTiersBetween32KiBAnd1MiB(t *testing.T) {
	for _, tc := range []struct{ size, wantCap int }{
		{40 << 10, 64 << 10},
		{100 << 10, 128 << 10},
		{300 << 10, 512 << 10},
		{1 << 20, 1 << 20},
	} {
		buf := mem.DefaultBufferPool().Get(tc.size)
		got := cap(*buf)
		mem.DefaultBufferPool().Put(buf)
		if got != tc.wantCap {
			t.Errorf("a %d KiB message took a %d KiB buffer, want %d KiB", tc.size>>10, got>>10, tc.wantCap>>10)
		}
	}
}
