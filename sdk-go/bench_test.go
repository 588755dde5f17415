package holdfast

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkTryLockUnlock measures one uncontended TryLock + Unlock round
// through the real server (memory backend), per protocol:
//
//	go test -run '^$' -bench TryLockUnlock .
func BenchmarkTryLockUnlock(b *testing.B) {
	for _, p := range []Protocol{ProtocolConnect, ProtocolGRPC} {
		b.Run(p.String(), func(b *testing.B) {
			s := startServer(b, "127.0.0.1:0")
			c, err := Dial(s.URL, WithProtocol(p))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := b.Context()
			i := 0
			for b.Loop() {
				i++
				g, err := c.Lock(fmt.Sprintf("bench/%d", i%64)).TTL(10 * time.Second).TryLock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := g.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
