package engine

import (
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"
)

// Limits on request fields that do not depend on configuration.
const (
	MaxKeyBytes        = 512
	MaxHolderBytes     = 256
	MaxOwnerTokenBytes = 256
	DefaultPageSize    = 100
	MaxPageSize        = 1000
	// MinTTL is the engine's floor under any backend's MinTTL.
	MinTTL = time.Millisecond
)

// checkKey validates a key: 1..512 bytes of UTF-8 without NUL.
func checkKey(field, key string) error {
	if key == "" {
		return invalidf("%s: must not be empty (1 to %d bytes)", field, MaxKeyBytes)
	}
	return checkText(field, key, MaxKeyBytes)
}

// checkText validates free text: at most limit bytes of UTF-8 without NUL.
func checkText(field, s string, limit int) error {
	if len(s) > limit {
		return invalidf("%s: %d bytes exceeds the maximum %d bytes", field, len(s), limit)
	}
	if !utf8.ValidString(s) {
		return invalidf("%s: must be valid UTF-8", field)
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return invalidf("%s: must not contain NUL (found at byte %d)", field, i)
	}
	return nil
}

// checkDuration converts a wire duration; nil is zero.
func checkDuration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalidf("%s: not a valid duration: %v", field, err)
	}
	return d.AsDuration(), nil
}

// checkTTL validates a lease length against [lo, hi].
func checkTTL(d *durationpb.Duration, lo, hi time.Duration) (time.Duration, error) {
	ttl, err := checkDuration("ttl", d)
	if err != nil {
		return 0, err
	}
	switch {
	case d == nil:
		return 0, invalidf("ttl: required, between %s and %s", fmtDur(lo), fmtDur(hi))
	case ttl < lo:
		return 0, invalidf("ttl: %s is below the minimum %s", fmtDur(ttl), fmtDur(lo))
	case ttl > hi:
		return 0, invalidf("ttl: %s exceeds the maximum %s", fmtDur(ttl), fmtDur(hi))
	}
	return ttl, nil
}

// checkWait validates a wait against [0, hi].
func checkWait(d *durationpb.Duration, hi time.Duration) (time.Duration, error) {
	wait, err := checkDuration("wait", d)
	if err != nil {
		return 0, err
	}
	switch {
	case wait < 0:
		return 0, invalidf("wait: %s is negative; the minimum is 0s (try once)", fmtDur(wait))
	case wait > hi:
		return 0, invalidf("wait: %s exceeds the maximum %s", fmtDur(wait), fmtDur(hi))
	}
	return wait, nil
}

// fmtDur prints a duration without trailing zero units: 30h, 1m30s, 1.5s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
