package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestToStatus(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("%w: ttl too long", ErrInvalidArgument), codes.InvalidArgument},
		{fmt.Errorf("%w: store down", ErrUnavailable), codes.Unavailable},
		{errors.New("anything else"), codes.Unavailable},
		{fmt.Errorf("wrapped: %w", context.Canceled), codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
	}
	for _, c := range cases {
		st, _ := status.FromError(toStatus(c.err))
		if st.Code() != c.code || st.Message() != c.err.Error() {
			t.Errorf("toStatus(%v) = %v %q, want %v", c.err, st.Code(), st.Message(), c.code)
		}
	}
}

func TestParseOptions(t *testing.T) {
	opts, err := parseOptions(`{"endpoints":"a,b","prefix":"/x"}`)
	if err != nil || opts["endpoints"] != "a,b" || len(opts) != 2 {
		t.Fatalf("parseOptions = %v, %v", opts, err)
	}
	if opts, err := parseOptions(""); err != nil || len(opts) != 0 {
		t.Fatalf("empty: %v, %v", opts, err)
	}
	if _, err := parseOptions(`{"n":1}`); err == nil {
		t.Fatal("a non-string value was accepted")
	}
}

func TestHCLogHandlerFormat(t *testing.T) {
	var buf bytes.Buffer
	slog.New(newHCLogHandler(&buf, slog.LevelDebug)).Warn("disk slow", "ms", 12)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line["@level"] != "warn" || line["@message"] != "disk slow" || line["ms"] != float64(12) {
		t.Fatalf("line = %s", buf.String())
	}
	if _, ok := line["@timestamp"].(string); !ok {
		t.Fatalf("no @timestamp: %s", buf.String())
	}
}
