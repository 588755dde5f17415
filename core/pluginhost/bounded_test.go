package pluginhost

import (
	"context"
	"testing"
	"time"
)

// Every call ends by CallTimeout from its start, whatever the caller's
// deadline; an earlier one of the caller's stays.
func TestBoundedByCallTimeout(t *testing.T) {
	h := &Host{cfg: Config{CallTimeout: time.Minute}}
	for _, c := range []struct {
		name   string
		caller time.Duration // 0: no deadline
		want   time.Duration // from now, about
	}{
		{"no deadline", 0, time.Minute},
		{"a later deadline", time.Hour, time.Minute},
		{"an earlier deadline", time.Second, time.Second},
	} {
		ctx := context.Background()
		if c.caller > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.caller)
			defer cancel()
		}
		start := time.Now()
		cctx, cancel := h.bounded(ctx)
		end := time.Now()
		d, ok := cctx.Deadline()
		if !ok {
			t.Fatalf("%s: no deadline", c.name)
		}
		if d.After(end.Add(c.want)) || d.Before(start.Add(c.want-time.Second/2)) {
			t.Errorf("%s: the call ends %s from now, want about %s", c.name, d.Sub(start), c.want)
		}
		cancel()
		if cctx.Err() == nil {
			t.Errorf("%s: cancel did not end the call's context", c.name)
		}
	}
}
