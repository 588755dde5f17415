package conformance

import (
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Promise 6 at the API: HLC stamps.
var _ = describeService("stamps", Label("stamps"), func(sc *ServiceContext) {
	It("stamps every acquisition after the client's stamp and after the previous holder's", func(ctx SpecContext) {
		key := sc.Key("stamps")
		info, err := sc.RPC.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
		Expect(err).NotTo(HaveOccurred())
		server := hlc.FromProto(info.GetServerStamp())
		Expect(server.IsZero()).To(BeFalse(), "GetServerInfo must carry server_stamp")

		// A client slightly ahead of the server (within the max offset).
		client := hlc.Timestamp{WallTime: time.Now().Add(sc.MaxClockOffset() / 5).UnixNano(), Logical: 7}
		res, err := sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(sc.LongTTL()), ClientStamp: client.ToProto()})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeTrue())
		s1 := hlc.FromProto(res.GetLease().GetStamp())
		Expect(s1.After(client)).To(BeTrue(), "lease stamp %s is not after the client stamp %s", s1, client)
		Expect(hlc.FromProto(res.GetServerStamp()).Compare(s1)).To(BeNumerically(">=", 0), "server_stamp behind the lease stamp")

		rel, err := sc.RPC.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: res.GetLease().GetOwnerToken()})
		Expect(err).NotTo(HaveOccurred())
		Expect(rel.GetReleased()).To(BeTrue())
		Expect(hlc.FromProto(rel.GetServerStamp()).After(s1)).To(BeTrue(), "release server_stamp not after the acquisition")

		// The next holder sends no stamp at all; its stamp still follows.
		l2 := sc.MustAcquire(ctx, key, sc.TTL())
		s2 := hlc.FromProto(l2.GetStamp())
		Expect(s2.After(s1)).To(BeTrue(), "second holder's stamp %s not after the first's %s", s2, s1)

		// And through expiry and takeover.
		l3, _, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		s3 := hlc.FromProto(l3.GetStamp())
		Expect(s3.After(s2)).To(BeTrue(), "third holder's stamp %s not after the second's %s", s3, s2)
	}, SpecTimeout(30*time.Second))

	It("refuses a client stamp far ahead of the server's clock with invalid_argument, and changes nothing", Label("bad-input"), func(ctx SpecContext) {
		key := sc.Key("far-ahead")
		far := hlc.Timestamp{WallTime: time.Now().Add(sc.MaxClockOffset() + 10*time.Second).UnixNano()}
		_, err := sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(sc.LongTTL()), ClientStamp: far.ToProto()})
		Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument), "Acquire with a client stamp %s ahead: %v", sc.MaxClockOffset()+10*time.Second, err)
		Expect(strings.ToLower(err.Error())).To(ContainSubstring("stamp"), "the message must name the field")
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeFalse(), "a refused Acquire took the lock")
		// The server's clock did not jump to the refused stamp.
		Expect(hlc.FromProto(ins.GetServerStamp()).Before(far)).To(BeTrue(), "the server merged a refused stamp")
	}, SpecTimeout(30*time.Second))

	It("orders stamps along a key's holders across two servers sharing the backend", Label("sharing"), func(ctx SpecContext) {
		if !sc.Backend().GetShared() {
			Skip("the backend declares shared=false: two servers do not share a key's chain of holders")
		}
		second, err := sc.SecondURL(ctx)
		Expect(err).NotTo(HaveOccurred())
		if second == "" {
			Skip("no second server (Config.SecondAddr / --second-addr, or Config.Serve)")
		}
		key := sc.Key("stamps-shared")
		l1 := sc.MustAcquire(ctx, key, sc.LongTTL())
		Expect(sc.Release(ctx, key, l1.GetOwnerToken())).To(BeTrue())
		res, err := sc.Acquire(ctx, sc.RPCFor(second), key, sc.LongTTL(), 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeTrue())
		Expect(hlc.FromProto(res.GetLease().GetStamp()).After(hlc.FromProto(l1.GetStamp()))).To(BeTrue())
		Expect(res.GetLease().GetFencingToken()).To(BeNumerically(">", l1.GetFencingToken()))
	}, SpecTimeout(30*time.Second))

	It("orders stamps along a key's holders across a restart of the server when the store outlives it", Label("disruptive"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it cannot restart it (use Config.Serve)")
		}
		if b := sc.Backend(); !b.GetDurable() && !b.GetShared() {
			Skip("the backend declares shared=false and durable=false: a key's stamps live and die with the server")
		}
		// The first server accepts a client stamp a minute ahead, so the
		// key's stamp is far past the clock of the server that starts after
		// it: only the stamp the store kept can order the next holder after
		// it (the new server learns it from the answer, too late to propose
		// a later one).
		const ahead = time.Minute
		s1, err := sc.StartServerWith(ctx, "--max-clock-offset", (2 * ahead).String())
		Expect(err).NotTo(HaveOccurred())
		rpc1 := sc.RPCFor(s1.URL)
		key := sc.Key("stamps-restart")
		client := hlc.Timestamp{WallTime: time.Now().Add(ahead).UnixNano()}
		res, err := rpc1.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(sc.LongTTL()), ClientStamp: client.ToProto()})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeTrue())
		first := hlc.FromProto(res.GetLease().GetStamp())
		Expect(first.After(client)).To(BeTrue(), "lease stamp %s is not after the client stamp %s", first, client)
		rel, err := rpc1.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: res.GetLease().GetOwnerToken()})
		Expect(err).NotTo(HaveOccurred())
		Expect(rel.GetReleased()).To(BeTrue())
		Expect(s1.Stop(0)).To(Succeed(), "graceful stop")

		s2, err := sc.StartServer(ctx)
		Expect(err).NotTo(HaveOccurred())
		l2, err := sc.Acquire(ctx, sc.RPCFor(s2.URL), key, sc.LongTTL(), 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(l2.GetAcquired()).To(BeTrue())
		second := hlc.FromProto(l2.GetLease().GetStamp())
		Expect(second.After(first)).To(BeTrue(),
			"after the server restart the next holder's stamp %s is not after the previous holder's %s (the store must keep a key's last stamp)", second, first)
		Expect(s2.Stop(0)).To(Succeed())
	}, SpecTimeout(time.Minute))
})
