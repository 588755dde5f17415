package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/httpserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	base    string
	h2c     *http.Client // cleartext HTTP/2, as gRPC needs
	http1   *http.Client
	clients map[string]lockv1connect.LockServiceClient
}

func start(t *testing.T, cfgs ...engine.Config) *fixture {
	t.Helper()
	b := memory.New()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg := engine.Config{Version: "test", MaxWait: time.Minute}
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	e, err := engine.New(ctx, b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpserver.Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	h2t := &http.Transport{Protocols: h2}
	h1t := &http.Transport{}
	f := &fixture{
		base:  "http://" + srv.Addr().String(),
		h2c:   &http.Client{Transport: h2t},
		http1: &http.Client{Transport: h1t},
	}
	f.clients = map[string]lockv1connect.LockServiceClient{
		"connect-proto":      lockv1connect.NewLockServiceClient(f.h2c, f.base),
		"connect-json-http1": lockv1connect.NewLockServiceClient(f.http1, f.base, connect.WithProtoJSON()),
		"grpc":               lockv1connect.NewLockServiceClient(f.h2c, f.base, connect.WithGRPC()),
		"grpc-web":           lockv1connect.NewLockServiceClient(f.http1, f.base, connect.WithGRPCWeb()),
	}
	t.Cleanup(func() {
		e.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		h2t.CloseIdleConnections()
		h1t.CloseIdleConnections()
		b.Close()
	})
	return f
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func TestEveryRPCOverEveryProtocol(t *testing.T) {
	f := start(t)
	for name, c := range f.clients {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			key := "proto/" + name

			// Watch first, so it sees what follows.
			stream, err := c.Watch(ctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Key{Key: key}})
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			if !stream.Receive() || stream.Msg().GetType() != lockv1.EventType_EVENT_TYPE_SYNCED {
				t.Fatalf("first watch message: %v %v", stream.Msg(), stream.Err())
			}

			acq, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: dur(time.Minute), Holder: "h1"})
			if err != nil || !acq.GetAcquired() || acq.GetLease().GetOwnerToken() == "" || acq.GetServerStamp() == nil {
				t.Fatalf("acquire: %v %v", acq, err)
			}
			lease := acq.GetLease()
			if !stream.Receive() || stream.Msg().GetType() != lockv1.EventType_EVENT_TYPE_ACQUIRED ||
				stream.Msg().GetState().GetFencingToken() != lease.GetFencingToken() {
				t.Fatalf("watch after acquire: %v %v", stream.Msg(), stream.Err())
			}

			busy, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: dur(time.Minute), Wait: dur(20 * time.Millisecond)})
			if err != nil || busy.GetAcquired() || busy.GetCurrent().GetHolder() != "h1" {
				t.Fatalf("contended acquire: %v %v", busy, err)
			}

			ext, err := c.Extend(ctx, &lockv1.ExtendRequest{Key: key, OwnerToken: lease.GetOwnerToken(), Ttl: dur(2 * time.Minute)})
			if err != nil || !ext.GetExtended() || ext.GetLease().GetTtl().AsDuration() != 2*time.Minute {
				t.Fatalf("extend: %v %v", ext, err)
			}
			ins, err := c.Inspect(ctx, &lockv1.InspectRequest{Key: key})
			if err != nil || !ins.GetHeld() || ins.GetState().GetHolder() != "h1" {
				t.Fatalf("inspect: %v %v", ins, err)
			}
			list, err := c.List(ctx, &lockv1.ListRequest{Prefix: key})
			if err != nil || len(list.GetLocks()) != 1 || list.GetLocks()[0].GetKey() != key {
				t.Fatalf("list: %v %v", list, err)
			}
			info, err := c.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
			if err != nil || info.GetVersion() != "test" || info.GetBackend().GetName() != "memory" {
				t.Fatalf("server info: %v %v", info, err)
			}

			stale, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: "not-the-owner"})
			if err != nil || stale.GetReleased() {
				t.Fatalf("release with an unknown token: %v %v", stale, err)
			}
			staleExt, err := c.Extend(ctx, &lockv1.ExtendRequest{Key: key, OwnerToken: "not-the-owner", Ttl: dur(time.Minute)})
			if err != nil || staleExt.GetExtended() {
				t.Fatalf("extend with an unknown token: %v %v", staleExt, err)
			}
			rel, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: lease.GetOwnerToken()})
			if err != nil || !rel.GetReleased() {
				t.Fatalf("release: %v %v", rel, err)
			}
			if !stream.Receive() || stream.Msg().GetType() != lockv1.EventType_EVENT_TYPE_RELEASED {
				t.Fatalf("watch after release: %v %v", stream.Msg(), stream.Err())
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	f := start(t)
	c := f.clients["connect-json-http1"]
	g := f.clients["grpc"]
	ctx := context.Background()
	far := hlc.Timestamp{WallTime: time.Now().Add(time.Hour).UnixNano()}.ToProto()
	acquire := func(r *lockv1.AcquireRequest) func(lockv1connect.LockServiceClient) error {
		return func(c lockv1connect.LockServiceClient) error { _, err := c.Acquire(ctx, r); return err }
	}
	cases := []struct {
		name string
		call func(lockv1connect.LockServiceClient) error
		code connect.Code
		msg  string
	}{
		{"empty key", acquire(&lockv1.AcquireRequest{Ttl: dur(time.Second)}), connect.CodeInvalidArgument, "key: must not be empty (1 to 512 bytes)"},
		{"key over 512 bytes", acquire(&lockv1.AcquireRequest{Key: strings.Repeat("k", 513), Ttl: dur(time.Second)}), connect.CodeInvalidArgument, "key: 513 bytes exceeds the maximum 512 bytes"},
		{"key with NUL", acquire(&lockv1.AcquireRequest{Key: "a\x00b", Ttl: dur(time.Second)}), connect.CodeInvalidArgument, "key: must not contain NUL (found at byte 1)"},
		{"ttl zero", acquire(&lockv1.AcquireRequest{Key: "k", Ttl: dur(0)}), connect.CodeInvalidArgument, "ttl: 0s is below the minimum 1ms"},
		{"ttl unset", acquire(&lockv1.AcquireRequest{Key: "k"}), connect.CodeInvalidArgument, "ttl: required, between 1ms and 24h"},
		{"ttl negative", acquire(&lockv1.AcquireRequest{Key: "k", Ttl: dur(-time.Second)}), connect.CodeInvalidArgument, "ttl: -1s is below the minimum 1ms"},
		{"ttl above the maximum", acquire(&lockv1.AcquireRequest{Key: "k", Ttl: dur(30 * time.Hour)}), connect.CodeInvalidArgument, "ttl: 30h exceeds the maximum 24h"},
		{"wait negative", acquire(&lockv1.AcquireRequest{Key: "k", Ttl: dur(time.Second), Wait: dur(-time.Second)}), connect.CodeInvalidArgument, "wait: -1s is negative; the minimum is 0s (try once)"},
		{"wait above the maximum", acquire(&lockv1.AcquireRequest{Key: "k", Ttl: dur(time.Second), Wait: dur(time.Hour)}), connect.CodeInvalidArgument, "wait: 1h exceeds the maximum 1m"},
		{"holder too long", acquire(&lockv1.AcquireRequest{Key: "k", Ttl: dur(time.Second), Holder: strings.Repeat("h", 300)}), connect.CodeInvalidArgument, "holder: 300 bytes exceeds the maximum 256 bytes"},
		{"client stamp far ahead", acquire(&lockv1.AcquireRequest{Key: "k", Ttl: dur(time.Second), ClientStamp: far}), connect.CodeInvalidArgument, "client_stamp:"},
		{"release without token", func(c lockv1connect.LockServiceClient) error {
			_, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: "k"})
			return err
		}, connect.CodeInvalidArgument, "owner_token: must not be empty"},
		{"extend ttl too long", func(c lockv1connect.LockServiceClient) error {
			_, err := c.Extend(ctx, &lockv1.ExtendRequest{Key: "k", OwnerToken: "t", Ttl: dur(25 * time.Hour)})
			return err
		}, connect.CodeInvalidArgument, "ttl: 25h exceeds the maximum 24h"},
		{"list bad page token", func(c lockv1connect.LockServiceClient) error {
			_, err := c.List(ctx, &lockv1.ListRequest{PageToken: "garbage"})
			return err
		}, connect.CodeInvalidArgument, "page_token"},
	}
	for _, tc := range cases {
		for pname, client := range map[string]lockv1connect.LockServiceClient{"connect-json": c, "grpc": g} {
			t.Run(tc.name+"/"+pname, func(t *testing.T) {
				err := tc.call(client)
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != tc.code {
					t.Fatalf("err = %v, want code %s", err, tc.code)
				}
				if !strings.HasPrefix(ce.Message(), tc.msg) {
					t.Fatalf("message %q, want it to start with %q", ce.Message(), tc.msg)
				}
			})
		}
	}
	// Nothing was locked by any of it.
	list, err := c.List(ctx, &lockv1.ListRequest{})
	if err != nil || len(list.GetLocks()) != 0 {
		t.Fatalf("bad input changed locks: %v %v", list, err)
	}
}

// post sends one raw request, like curl.
func post(t *testing.T, c *http.Client, url, contentType string, body []byte) (int, map[string]any) {
	t.Helper()
	resp, err := c.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("response %d %q is not JSON: %v", resp.StatusCode, raw, err)
	}
	return resp.StatusCode, m
}

func TestRawHTTP(t *testing.T) {
	f := start(t)
	url := f.base + "/holdfast.lock.v1.LockService/Acquire"
	for _, tc := range []struct {
		name, contentType, body, msg string
	}{
		{"truncated JSON", "application/json", `{"key":`, ""},
		{"not JSON", "application/json", `key=k`, ""},
		{"wrong JSON type", "application/json", `{"key": 5, "ttl": "10s"}`, ""},
		{"bad duration", "application/json", `{"key": "k", "ttl": "ten seconds"}`, ""},
		{"malformed protobuf", "application/proto", "\xff\xff\xff\xff", ""},
		{"bad UTF-8 key in protobuf", "application/proto", "\x0a\x02\xff\xfe", "key"},
		{"bad UTF-8 key in JSON", "application/json", "{\"key\": \"\xff\xfe\", \"ttl\": \"1s\"}", "key"},
		{"valid JSON, bad ttl", "application/json", `{"key": "k", "ttl": "108000s"}`, "ttl: 30h exceeds the maximum 24h"},
		{"unknown JSON field", "application/json", `{"key": "k", "ttl": "1s", "wiat": "5s"}`, `"wiat": unknown field; AcquireRequest has key, ttl, wait, holder, clientStamp`},
		{"unknown proto field name in JSON", "application/json", `{"key": "k", "ttl": "1s", "client_stamp": {}, "owner_token": "x"}`, `"owner_token": unknown field`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, m := post(t, f.http1, url, tc.contentType, []byte(tc.body))
			if status != http.StatusBadRequest || m["code"] != "invalid_argument" {
				t.Fatalf("status %d body %v, want 400 invalid_argument", status, m)
			}
			if msg, _ := m["message"].(string); !strings.Contains(msg, tc.msg) {
				t.Fatalf("message %q does not name %q", msg, tc.msg)
			}
		})
	}

	// The README's curl example.
	status, m := post(t, f.http1, url, "application/json", []byte(`{"key": "jobs/nightly", "ttl": "30s", "holder": "curl"}`))
	if status != http.StatusOK || m["acquired"] != true {
		t.Fatalf("acquire over raw JSON: %d %v", status, m)
	}
	lease, _ := m["lease"].(map[string]any)
	if tok, _ := lease["ownerToken"].(string); len(tok) < 22 {
		t.Fatalf("lease without an owner token: %v", m)
	}
	status, m = post(t, f.http1, f.base+"/holdfast.lock.v1.LockService/Release", "application/json",
		[]byte(`{"key": "jobs/nightly", "ownerToken": "`+lease["ownerToken"].(string)+`"}`))
	if status != http.StatusOK || m["released"] != true {
		t.Fatalf("release over raw JSON: %d %v", status, m)
	}
}

func TestGRPCHealthAndReflection(t *testing.T) {
	f := start(t)
	conn, err := grpc.NewClient(strings.TrimPrefix(f.base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, svc := range []string{"", lockv1connect.LockServiceName} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, resp, err)
		}
	}

	// Reflection, as grpcurl and buf curl use it.
	rs, err := reflectpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectpb.ServerReflectionRequest{
		MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, lockv1connect.LockServiceName) {
		t.Fatalf("reflection lists %v, without %s", names, lockv1connect.LockServiceName)
	}
	if err := rs.Send(&reflectpb.ServerReflectionRequest{
		MessageRequest: &reflectpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: lockv1connect.LockServiceName},
	}); err != nil {
		t.Fatal(err)
	}
	if resp, err := rs.Recv(); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("reflection of %s: %v %v", lockv1connect.LockServiceName, resp, err)
	}
	_ = rs.CloseSend()
}

// The engine's wait bounds (per key; per client is package limits') answer
// resource_exhausted through the handler.
func TestWaitLimitsAreResourceExhausted(t *testing.T) {
	f := start(t, engine.Config{MaxWaitersPerKey: 1})
	c := f.clients["grpc"]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "a", Ttl: dur(time.Minute)}); err != nil || !r.GetAcquired() {
		t.Fatal(r, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "a", Ttl: dur(time.Minute), Wait: dur(time.Minute)})
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		a, _ := c.Inspect(ctx, &lockv1.InspectRequest{Key: "a"})
		if a.GetState().GetWaiters() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
	}
	_, err := f.clients["connect-json-http1"].Acquire(ctx, &lockv1.AcquireRequest{Key: "a", Ttl: dur(time.Minute), Wait: dur(time.Minute)})
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "per key") {
		t.Fatalf("second waiter on a key: %v, want resource_exhausted", err)
	}
	cancel()
	if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
		t.Errorf("a waiter whose caller canceled: %v, want canceled", err)
	}
}
