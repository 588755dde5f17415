package conformance

import (
	"strings"
	"time"

	"connectrpc.com/connect"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

var _ = describeService("bad input", Label("bad-input"), func(sc *ServiceContext) {
	It("answers invalid_argument naming the field for a bad key or wait", func(ctx SpecContext) {
		ttl := durationpb.New(sc.LongTTL())
		cases := []struct {
			name, field string
			req         *lockv1.AcquireRequest
		}{
			{"empty key", "key", &lockv1.AcquireRequest{Key: "", Ttl: ttl}},
			{"key over 512 bytes", "key", &lockv1.AcquireRequest{Key: strings.Repeat("k", 513), Ttl: ttl}},
			{"key with NUL", "key", &lockv1.AcquireRequest{Key: sc.Key("nul\x00"), Ttl: ttl}},
			{"negative wait", "wait", &lockv1.AcquireRequest{Key: sc.Key("neg-wait"), Ttl: ttl, Wait: durationpb.New(-time.Second)}},
		}
		for _, c := range cases {
			_, err := sc.RPC.Acquire(ctx, c.req)
			Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument), "%s: %v", c.name, err)
			Expect(strings.ToLower(err.Error())).To(ContainSubstring(c.field), "%s: the message must name the field", c.name)
		}
		// A key of exactly 512 bytes is fine.
		key := sc.Key("")
		key += strings.Repeat("k", 512-len(key))
		l := sc.MustAcquire(ctx, key, sc.LongTTL())
		Expect(sc.Release(ctx, key, l.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))
})
