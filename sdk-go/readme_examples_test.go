package holdfast_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast/holdfast/harness"
	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// The functions here are what README.md's snippets quote (readme_test.go
// checks that every line of them is here), and the tests below run them
// against a real `holdfast serve`.

func quickStart(ctx context.Context, addr string, writeReport func(context.Context, uint64) error) error {
	client, err := holdfast.Dial(addr) // "http://127.0.0.1:7410", or "127.0.0.1:7410"
	if err != nil {
		return err
	}
	defer client.Close()

	g, err := client.Lock("jobs/nightly").TTL(30 * time.Second).Wait(time.Minute).Lock(ctx)
	if errors.Is(err, holdfast.ErrNotAcquired) {
		return nil // someone else runs it
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := g.Unlock(context.Background()); errors.Is(err, holdfast.ErrLeaseLost) {
			log.Print("the lease was lost before the report was written") // never a silent OK
		}
	}()

	token, err := g.FencingToken() // errors once the lease is lost
	if err != nil {
		return err
	}
	return writeReport(g.Context(), token) // g.Context() is cancelled if the lease is lost
}

func connectWithTLSAndToken(addr string, caPEM []byte, certFile, keyFile, token string) (*holdfast.Client, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)                      // the CA that signed the server's certificate
	cert, err := tls.LoadX509KeyPair(certFile, keyFile) // a client certificate, for --tls-client-ca
	if err != nil {
		return nil, err
	}
	client, err := holdfast.Dial(addr, // "https://locks.internal:7410"
		holdfast.WithTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}),
		holdfast.WithBearerToken(token), // Authorization: Bearer, for --auth-tokens
		holdfast.WithHeader("X-Request-Source", "billing-worker"),
	)
	return client, err
}

func connectWithEvents(addr string, lost *atomic.Int64) (*holdfast.Client, error) {
	client, err := holdfast.Dial(addr,
		// Renewed and released at debug, renewal failed and lost at warn.
		holdfast.WithLogger(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		holdfast.WithLeaseEvents(func(ev holdfast.LeaseEvent) {
			if ev.Type == holdfast.LeaseLost {
				lost.Add(1) // a metric, say; ev.Reason says why, ev.Err has the cause
			}
		}),
	)
	return client, err
}

func skipIfHeld(ctx context.Context, client *holdfast.Client, refreshCache func(context.Context) error) error {
	ran, err := holdfast.TryWithLock(ctx, client.Lock("caches/refresh").TTL(time.Minute), func(ctx context.Context) error {
		return refreshCache(ctx) // runs only if nobody holds the lock; ctx ends if it is lost
	})
	if err != nil {
		return err // holdfast.ErrorCode(err) names it: "unavailable", "lease_lost", ...
	}
	if !ran {
		log.Print("another process is refreshing the cache")
	}
	return nil
}

func scheduledJob(ctx context.Context, client *holdfast.Client, writeReport func(context.Context, uint64) error) (bool, error) {
	ran, err := client.RunScheduled(ctx, holdfast.ScheduledJob{
		Key:        "jobs/nightly-report",
		MaxRuntime: 10 * time.Minute, // the run's deadline; the lease is longer (TTL, default 1.5 × MaxRuntime)
		Run: func(ctx context.Context, fencingToken uint64) error {
			return writeReport(ctx, fencingToken) // ctx ends at MaxRuntime or when the lease is lost
		},
	})
	switch {
	case err != nil:
		log.Printf("nightly report: %v", err) // includes a lease lost during the run (errors.Is(err, holdfast.ErrLeaseLost))
	case !ran:
		log.Printf("nightly report: another server runs it")
	}
	return ran, err
}

func encodeWithSemaphore(ctx context.Context, client *holdfast.Client, encode func(context.Context, uint64) error) error {
	// At most 3 encoders at once across every process; a big job takes 2 of the 3 slots.
	encoders := client.Semaphore("encoders", 3).Permits(2).TTL(time.Minute)
	return holdfast.WithLock(ctx, encoders, func(ctx context.Context) error {
		g, _ := holdfast.GuardFromContext(ctx)
		token, err := g.FencingToken() // every grant has its own, increasing over all grants of the key
		if err != nil {
			return err
		}
		return encode(ctx, token)
	}) // a limit other than the key's: holdfast.ErrorCode(err) == "failed_precondition"
}

func readThenWrite(ctx context.Context, client *holdfast.Client) error {
	routes := client.RWLock("config/routes")
	r, err := routes.Read().TTL(30 * time.Second).Lock(ctx) // with other readers, never with a writer
	if err != nil {
		return err
	}
	if err := r.Unlock(ctx); err != nil {
		return err
	}
	w, err := routes.Write().Wait(10 * time.Second).Lock(ctx) // alone; waits behind earlier waiters
	if err != nil {
		return err
	}
	return w.Unlock(ctx)
}

func TestREADMESemaphoreAndRWLock(t *testing.T) {
	addr, _ := holdfast.StartTestServer(t)
	client, err := holdfast.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var token uint64
	err = encodeWithSemaphore(t.Context(), client, func(ctx context.Context, tok uint64) error {
		g, ok := holdfast.GuardFromContext(ctx)
		if !ok || g.Kind() != holdfast.KindSemaphore || g.Permits() != 2 {
			t.Errorf("the work's guard: %v %v", g, ok)
		}
		token = tok
		return nil
	})
	if err != nil || token == 0 {
		t.Fatalf("semaphore: %v (token %d)", err, token)
	}
	if err := readThenWrite(t.Context(), client); err != nil {
		t.Fatal(err)
	}
}

func TestREADMEQuickStart(t *testing.T) {
	addr, _ := holdfast.StartTestServer(t)
	var token uint64
	err := quickStart(t.Context(), "http://"+addr, func(ctx context.Context, tok uint64) error {
		token = tok
		return ctx.Err()
	})
	if err != nil || token == 0 {
		t.Fatalf("quick start: %v (token %d)", err, token)
	}
	// The bare host:port form the comment mentions.
	if err := quickStart(t.Context(), addr, func(context.Context, uint64) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestREADMEAuth(t *testing.T) {
	dir := t.TempDir()
	pki := harness.WriteMutualTLS(t, dir)
	caPEM, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := pki.ClientCertFile, pki.ClientKeyFile
	const token = "readme-example-token-0123456789"
	sum := sha256.Sum256([]byte(token))
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, fmt.Appendf(nil, "- name: readme\n  sha256: %s\n  prefixes: [\"billing/\"]\n", hex.EncodeToString(sum[:])), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := holdfast.StartTestServer(t, "--tls-cert", pki.ServerCertFile, "--tls-key", pki.ServerKeyFile, "--tls-client-ca", pki.CAFile, "--auth-tokens", tokens)
	client, err := connectWithTLSAndToken("https://"+addr, caPEM, certFile, keyFile, token)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	g, err := client.Lock("billing/nightly").TryLock(t.Context())
	if err != nil {
		t.Fatalf("TLS, client certificate and token: %v", err)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err = client.Lock("other/nightly").TryLock(t.Context())
	if !errors.Is(err, holdfast.ErrPermissionDenied) || holdfast.ErrorCode(err) != "permission_denied" {
		t.Fatalf("a key outside the token's prefixes: %v", err)
	}
	anon, err := connectWithTLSAndToken("https://"+addr, caPEM, certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Lock("billing/nightly").TryLock(t.Context()); !errors.Is(err, holdfast.ErrUnauthenticated) {
		t.Fatalf("no token: %v", err)
	}
}

func TestREADMEEvents(t *testing.T) {
	addr, stop := holdfast.StartTestServer(t)
	var lost atomic.Int64
	client, err := connectWithEvents("http://"+addr, &lost)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	g, err := client.Lock("events/released").TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Lost: the server goes away while a short lease is held.
	g, err = client.Lock("events/lost").TTL(300 * time.Millisecond).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stop()
	<-g.Done()
	for lost.Load() == 0 {
		time.Sleep(time.Millisecond) // the event follows the loss at once
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("%d lost events, want 1 (the released guard is not lost)", n)
	}
}

func TestREADMESkipIfHeldAndScheduledJob(t *testing.T) {
	addr, _ := holdfast.StartTestServer(t)
	client, err := holdfast.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	refreshed := 0
	refresh := func(ctx context.Context) error { refreshed++; return ctx.Err() }
	if err := skipIfHeld(t.Context(), client, refresh); err != nil || refreshed != 1 {
		t.Fatalf("free: %v, refreshed %d times", err, refreshed)
	}
	g, err := client.Lock("caches/refresh").TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := skipIfHeld(t.Context(), client, refresh); err != nil || refreshed != 1 {
		t.Fatalf("held: %v, refreshed %d times", err, refreshed)
	}
	_ = g.Unlock(t.Context())

	var tokens []uint64
	write := func(ctx context.Context, tok uint64) error { tokens = append(tokens, tok); return nil }
	for range 2 {
		if ran, err := scheduledJob(t.Context(), client, write); !ran || err != nil {
			t.Fatalf("ran=%v err=%v", ran, err)
		}
	}
	if len(tokens) != 2 || tokens[1] <= tokens[0] {
		t.Fatalf("fencing tokens of two runs: %v, want increasing", tokens)
	}
	h, err := client.Lock("jobs/nightly-report").TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ran, err := scheduledJob(t.Context(), client, write); ran || err != nil {
		t.Fatalf("held: ran=%v err=%v", ran, err)
	}
	_ = h.Unlock(t.Context())
}
