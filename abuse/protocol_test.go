package abuse

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// rawCall posts body to a procedure with headers and returns the Connect
// code of the answer ("ok" when it succeeded) and its message, whatever
// the protocol (gRPC codes come in trailers, Connect's in a JSON body or
// an end-of-stream message).
func rawCall(ctx context.Context, t *testing.T, hc *http.Client, s *harness.Server, procedure string, hdr map[string]string, body []byte) (string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/holdfast.lock.v1.LockService/"+procedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", procedure, err)
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/grpc"):
		st := resp.Trailer.Get("Grpc-Status")
		if st == "" {
			st = resp.Header.Get("Grpc-Status")
		}
		msg := resp.Trailer.Get("Grpc-Message")
		if msg == "" {
			msg = resp.Header.Get("Grpc-Message")
		}
		return grpcCodes[st], msg
	case strings.HasPrefix(ct, "application/connect+"):
		// The last envelope is the end of the stream: {"error": {...}}.
		for len(raw) >= 5 {
			n := int(raw[1])<<24 | int(raw[2])<<16 | int(raw[3])<<8 | int(raw[4])
			if 5+n > len(raw) {
				break
			}
			msg := raw[5 : 5+n]
			if raw[0]&2 != 0 {
				var end struct {
					Error *struct{ Code, Message string } `json:"error"`
				}
				_ = json.Unmarshal(msg, &end)
				if end.Error == nil {
					return "ok", ""
				}
				return end.Error.Code, end.Error.Message
			}
			raw = raw[5+n:]
		}
		return "no end of stream", string(raw)
	}
	if resp.StatusCode == http.StatusOK {
		return "ok", ""
	}
	var e struct{ Code, Message string }
	_ = json.Unmarshal(raw, &e)
	return e.Code, e.Message
}

var grpcCodes = map[string]string{"0": "ok", "3": "invalid_argument", "4": "deadline_exceeded", "8": "resource_exhausted", "12": "unimplemented", "13": "internal", "2": "unknown"}

// Issue 13, item 8: malformed frames answer invalid_argument, an unknown
// JSON field is refused by name, a huge duration is reported as sent, and
// messages name a limit once; a client sending garbage in a loop does not
// slow a normal one.
func TestProtocolErrors(t *testing.T) {
	s := serve(t)
	ctx := t.Context()
	h2 := &http.Client{Transport: transport(t, clientOpts{})}
	h1 := &http.Client{Transport: transport(t, clientOpts{http1: true})}
	acquire, _ := proto.Marshal(&lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute)})
	watch, _ := proto.Marshal(&lockv1.WatchRequest{})
	grpc := map[string]string{"Content-Type": "application/grpc", "Te": "trailers"}
	connectStream := map[string]string{"Content-Type": "application/connect+proto"}
	grpcWeb := map[string]string{"Content-Type": "application/grpc-web+proto"}
	frames := []struct {
		name      string
		hc        *http.Client
		procedure string
		hdr       map[string]string
		body      []byte
	}{
		{"gRPC, a 3-byte envelope", h2, "Acquire", grpc, []byte{0, 0, 0}},
		{"gRPC, fewer bytes than promised", h2, "Acquire", grpc, envelope(0, acquire)[:8]},
		{"gRPC, flags 0x04", h2, "Acquire", grpc, envelope(4, acquire)},
		{"gRPC, compressed without grpc-encoding", h2, "Acquire", grpc, envelope(1, acquire)},
		{"gRPC-Web, a trailers frame from the client", h1, "Acquire", grpcWeb, envelope(0x80, acquire)},
		{"Connect stream, a 2-byte envelope", h1, "Watch", connectStream, []byte{0, 0}},
		{"Connect stream, end-of-stream flag from the client", h1, "Watch", connectStream, envelope(2, watch)},
		{"Connect stream, flags 0x10", h2, "Watch", connectStream, envelope(0x10, watch)},
	}
	for _, f := range frames {
		got, msg := rawCall(ctx, t, f.hc, s, f.procedure, f.hdr, f.body)
		expect(t, got == "invalid_argument", "%s: %s %q, want invalid_argument", f.name, got, msg)
	}
	// A well-formed message still works on each protocol.
	if got, msg := rawCall(ctx, t, h2, s, "Acquire", grpc, envelope(0, acquire)); got != "ok" {
		t.Fatalf("a well-formed gRPC Acquire: %s %q", got, msg)
	}

	jsonCases := []struct {
		name, body, code, want string
	}{
		{"misspelled wait", `{"key": "j", "ttl": "30s", "wiat": "5s"}`, "invalid_argument", `wiat`},
		{"saturated ttl", `{"key": "j", "ttl": "9999999999s"}`, "invalid_argument", "ttl: 9999999999s exceeds the maximum 24h"},
		{"saturated wait", `{"key": "j", "ttl": "1s", "wait": "-9999999999.5s"}`, "invalid_argument", "wait: -9999999999.5s is negative"},
	}
	for _, c := range jsonCases {
		got, msg := rawCall(ctx, t, h1, s, "Acquire", map[string]string{"Content-Type": "application/json"}, []byte(c.body))
		expect(t, got == c.code && strings.Contains(msg, c.want), "%s: %s %q, want %s saying %q", c.name, got, msg, c.code, c.want)
	}

	// Garbage in a loop beside a normal client.
	p := newProbe(t, s, clientOpts{}, "probe/")
	idle := p.p50(t)
	stop := during(t, func(ctx context.Context) {
		loop(ctx, 4, func(ctx context.Context, w int) {
			f := frames[w%len(frames)]
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/holdfast.lock.v1.LockService/"+f.procedure, bytes.NewReader(f.body))
			for k, v := range f.hdr {
				req.Header.Set(k, v)
			}
			if resp, err := f.hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	})
	attacked := p.p50(t)
	stop()
	unaffected(t, "8 malformed frames", idle, attacked, 10)
}
