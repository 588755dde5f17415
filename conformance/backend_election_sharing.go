package conformance

import (
	"context"
	"strings"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// An election across plugin instances sharing a store: the leader, its value
// and every Proclaim reach the other instance's Get, List and Watch through
// the store's change feed, whatever bytes the value and the holder label hold
// (a store that frames its events by line, or spells them as JSON inside a
// size limit, must still carry them whole).
var _ = describeBackend("election sharing", Label("election", "sharing", "watch"), func(sc *BackendContext) {
	It("shows a leader, its value and every proclaim to another plugin instance, whatever bytes the value holds", func(ctx SpecContext) {
		if !sc.Info.Keeps(backend.KindElection) {
			Skip("the backend does not list KindElection in Info.Kinds")
		}
		if sc.Config.SingleInstance || !sc.Info.Shared {
			Skip("the backend is not shared by several plugin instances")
		}
		other, err := sc.StartPlugin(ctx)
		Expect(err).NotTo(HaveOccurred(), "starting a second plugin instance")
		DeferCleanup(other.Close) // after the watch on it ends: cleanups run last in, first out
		elect, ok := other.(backend.ElectionBackend)
		Expect(ok).To(BeTrue(), "the plugin host serves Proclaim")

		prefix := sc.Key("shared-election/")
		key := prefix + "e"
		events := watchEvents(ctx, other, prefix)

		// Values at the limit: lines and JSON's escapes (each control
		// character takes six bytes as JSON), then multi-byte UTF-8.
		escapes := strings.Repeat("\x01\n\"\\é", backend.MaxValueBytes/6)
		escapes += strings.Repeat("x", backend.MaxValueBytes-len(escapes))
		multiByte := strings.Repeat("世", backend.MaxValueBytes/3) + "x"
		leader := sc.Grant(key, backend.KindElection, 1, 1, sc.LongTTL())
		leader.Holder, leader.Value = "host a\npid 7", escapes
		acquired := sc.MustGrant(ctx, leader)

		seen := func(b backend.Backend, value string) {
			GinkgoHelper()
			rec, held, err := b.Get(ctx, key)
			Expect(err).NotTo(HaveOccurred())
			Expect(held).To(BeTrue(), "the leader is not seen")
			Expect(rec.FencingToken).To(Equal(acquired.FencingToken), "another term is seen")
			Expect(rec.Holder).To(Equal(leader.Holder))
			Expect(rec.Value).To(Equal(value), "Get's value")
			page, err := b.List(ctx, backend.ListRequest{Prefix: prefix, PageSize: 10})
			Expect(err).NotTo(HaveOccurred())
			Expect(page.Records).To(HaveLen(1))
			Expect(page.Records[0].Value).To(Equal(value), "List's value")
		}
		seen(other, escapes)
		events.expect(backend.EventAcquired, key, acquired.FencingToken, leader.Holder, escapes)

		// The owner token is the store's: a proclaim through the other
		// instance replaces the value the first one took.
		for _, v := range []string{multiByte, "", escapes} {
			res, err := elect.Proclaim(ctx, backend.ProclaimRequest{Key: key, OwnerToken: leader.OwnerToken, Value: v, Stamp: sc.Stamp()})
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Proclaimed).To(BeTrue(), "the leader's proclaim through another plugin instance answered false")
			Expect(res.Record.FencingToken).To(Equal(acquired.FencingToken), "Proclaim changed the term")
			Expect(res.Record.Value).To(Equal(v))
			seen(sc.Backend, v)
			events.expect(backend.EventProclaimed, key, acquired.FencingToken, leader.Holder, v)
		}

		// A renewal is no proclaim: the next event is the resignation.
		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: leader.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeTrue())
		Expect(ext.Record.Value).To(Equal(escapes), "Extend's record")
		sc.MustRelease(ctx, key, leader.OwnerToken)
		events.expect(backend.EventReleased, key, acquired.FencingToken, leader.Holder, "")
	}, SpecTimeout(time.Minute))
})

// eventLog collects a watch's events (after its EventSynced) for a spec.
type eventLog struct {
	events chan backend.Event
}

// watchEvents watches prefix on b, once the watch is synced, until the
// spec ends.
func watchEvents(ctx context.Context, b backend.Backend, prefix string) *eventLog {
	GinkgoHelper()
	l := &eventLog{events: make(chan backend.Event, 256)}
	ctx, cancel := context.WithCancel(ctx)
	synced, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		_ = b.Watch(ctx, prefix, func(ev backend.Event) error {
			if ev.Type == backend.EventSynced {
				close(synced)
				return nil
			}
			select {
			case l.events <- ev:
			default:
				Fail("more than 256 events unread")
			}
			return nil
		})
	}()
	DeferCleanup(func() {
		cancel()
		<-done
	})
	Eventually(ctx, synced).WithTimeout(10 * time.Second).Should(BeClosed())
	return l
}

// expect takes the next event and checks it is typ about key's grant of
// fencing token fence (with holder and value, unless the event is the end
// of a lease, whose value need not travel).
func (l *eventLog) expect(typ backend.EventType, key string, fence uint64, holder, value string) {
	GinkgoHelper()
	var ev backend.Event
	Eventually(l.events).WithTimeout(5*time.Second).Should(Receive(&ev), "no %s event", typ)
	Expect(ev.Type).To(Equal(typ), "event %+v", ev.Record)
	Expect(ev.Record.Key).To(Equal(key))
	Expect(ev.Record.FencingToken).To(Equal(fence), "the %s event is about another grant", typ)
	if typ == backend.EventAcquired || typ == backend.EventProclaimed {
		Expect(ev.Record.Holder).To(Equal(holder), "the %s event's holder", typ)
		Expect(ev.Record.Value).To(Equal(value), "the %s event's value", typ)
	}
}
