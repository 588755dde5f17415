package example_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/example"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, conformance.LeakOptions()...) }

// pluginBinary builds the example backend with `go build`, the way an author
// outside this repository builds theirs, so the suite never runs a stale
// binary.
func pluginBinary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "holdfast-backend-example")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", p, "./cmd/holdfast-backend-example").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return p
}

// The backend-level suite, through the same plugin host the server uses: a
// real plugin subprocess over go-plugin's gRPC.
func TestBackendConformance(t *testing.T) {
	var cfg conformance.Config
	// RunBackend re-executes this test binary and runs the suite there, so
	// build only in the process that uses the binary.
	if conformance.SuiteProcess(t) {
		cfg.Plugin = pluginBinary(t)
		// This store lives in the plugin process, so restarting the store
		// means killing that process (the plugin host starts a new one).
		// A backend over a database would restart the database here.
		cfg.RestartStore = conformance.KillPlugin
	}
	conformance.RunBackend(t, cfg)
}

// The service-level suite: the suite starts `holdfast serve --backend
// <example binary>` servers itself (it restarts them, kills their plugin).
func TestServiceConformance(t *testing.T) {
	var cfg conformance.Config
	if conformance.SuiteProcess(t) {
		cfg.Serve = &harness.Options{Backend: pluginBinary(t)}
	}
	conformance.RunService(t, cfg)
}

// Open refuses what it does not understand, with ErrInvalidArgument and the
// option's name, so `holdfast serve` fails at start-up with a clear reason.
func TestOpenOptions(t *testing.T) {
	for _, c := range []struct {
		opts    map[string]string
		wantErr string
		maxTTL  time.Duration
	}{
		{opts: nil, maxTTL: example.DefaultMaxTTL},
		{opts: map[string]string{"max_ttl": "10m"}, maxTTL: 10 * time.Minute},
		{opts: map[string]string{"max_ttl": "soon"}, wantErr: `option max_ttl="soon"`},
		{opts: map[string]string{"max_ttl": "1ms"}, wantErr: "at least 10ms"},
		{opts: map[string]string{"dsn": "x"}, wantErr: `unknown option "dsn"`},
	} {
		b, err := example.Open(context.Background(), c.opts)
		if c.wantErr != "" {
			if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Open(%v) = %v, want ErrInvalidArgument naming %q", c.opts, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Open(%v): %v", c.opts, err)
		}
		info, err := b.Info(context.Background())
		if err != nil || info.MaxTTL != c.maxTTL || info.Shared || info.Durable {
			t.Errorf("Open(%v).Info() = %+v, %v; want max_ttl %s, not shared, not durable", c.opts, info, err, c.maxTTL)
		}
		_ = b.(*example.Store).Close()
	}
}

// A timer that fires after the lock was extended must not expire it: the
// store checks rather than assumes.
func TestExtendOutlivesTheFirstTimer(t *testing.T) {
	s := example.New(time.Minute)
	defer s.Close()
	ctx := context.Background()
	res, err := s.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t1", TTL: 50 * time.Millisecond})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	ext, err := s.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: "t1", TTL: time.Minute})
	if err != nil || !ext.Extended {
		t.Fatalf("Extend: %+v, %v", ext, err)
	}
	// Watch until well past the first TTL: no expiry may be reported.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = s.Watch(wctx, "k", func(ev backend.Event) error {
		if ev.Type == backend.EventExpired {
			return errors.New("expired although extended")
		}
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Watch: %v", err)
	}
	if _, held, _ := s.Get(ctx, "k"); !held {
		t.Fatal("the extended lock is gone")
	}
}
