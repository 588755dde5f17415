package pluginhost

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// AutoMTLS is always on: the plugin serves gRPC over TLS and requires the
// host's one-time client certificate, so another process that finds the
// plugin's socket can neither talk cleartext to it nor connect without
// that certificate. The host itself talks to it (Info works).
func TestAutoMTLSAlwaysOn(t *testing.T) {
	h := start(t, Config{})
	g, err := h.current()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Info(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if g.client.NegotiatedVersion() == 0 {
		t.Fatal("no protocol negotiated")
	}
	rc := g.client.ReattachConfig()
	if rc == nil || rc.Addr == nil {
		t.Fatal("no plugin address")
	}
	target := rc.Addr.Network() + ":" + rc.Addr.String()
	if rc.Addr.Network() == "tcp" {
		target = rc.Addr.String()
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"cleartext":                 insecure.NewCredentials(),
		"TLS without a client cert": credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}), //nolint:gosec // the point: even skipping verification, no cert means no entry
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if resp, err := backendv1.NewBackendServiceClient(conn).Info(ctx, &backendv1.InfoRequest{}); err == nil {
				t.Fatalf("the plugin answered a %s client: %v", name, resp)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}
