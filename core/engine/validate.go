package engine

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
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

// checkDuration converts a wire duration; nil is zero. A duration beyond
// time.Duration's ±292 years comes back saturated, and sent is how a
// message must spell it: as it was sent, not as the saturated value.
func checkDuration(field string, d *durationpb.Duration) (dur time.Duration, sent string, err error) {
	if d == nil {
		return 0, "0s", nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, "", invalidf("%s: not a valid duration: %v", field, err)
	}
	dur = d.AsDuration()
	if back := durationpb.New(dur); back.GetSeconds() != d.GetSeconds() || back.GetNanos() != d.GetNanos() { // saturated
		return dur, wireDuration(d), nil
	}
	return dur, fmtDur(dur), nil
}

// wireDuration spells d as its JSON form does: seconds, with up to nine
// decimals ("9999999999s", "-1.5s").
func wireDuration(d *durationpb.Duration) string {
	secs, nanos := d.GetSeconds(), d.GetNanos()
	sign := ""
	if secs < 0 || nanos < 0 {
		sign, secs, nanos = "-", -secs, -nanos
	}
	if nanos == 0 {
		return fmt.Sprintf("%s%ds", sign, secs)
	}
	return sign + strings.TrimRight(fmt.Sprintf("%d.%09d", secs, nanos), "0") + "s"
}

// checkTTL validates a lease length against [lo, hi].
func checkTTL(d *durationpb.Duration, lo, hi time.Duration) (time.Duration, error) {
	ttl, sent, err := checkDuration("ttl", d)
	if err != nil {
		return 0, err
	}
	switch {
	case d == nil:
		return 0, invalidf("ttl: required, between %s and %s", fmtDur(lo), fmtDur(hi))
	case ttl < lo:
		return 0, invalidf("ttl: %s is below the minimum %s", sent, fmtDur(lo))
	case ttl > hi:
		return 0, invalidf("ttl: %s exceeds the maximum %s", sent, fmtDur(hi))
	}
	return ttl, nil
}

// checkWait validates a wait against [0, hi].
func checkWait(d *durationpb.Duration, hi time.Duration) (time.Duration, error) {
	wait, sent, err := checkDuration("wait", d)
	if err != nil {
		return 0, err
	}
	switch {
	case wait < 0:
		return 0, invalidf("wait: %s is negative; the minimum is 0s (try once)", sent)
	case wait > hi:
		return 0, invalidf("wait: %s exceeds the maximum %s", sent, fmtDur(hi))
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

// checkLockDelay validates a lock_delay against the backend's and the
// server's maximum.
func (e *Engine) checkLockDelay(d *durationpb.Duration) (time.Duration, error) {
	delay, sent, err := checkDuration("lock_delay", d)
	if err != nil || delay == 0 {
		return 0, err
	}
	hi := e.maxLockDelay()
	switch {
	case delay < 0:
		return 0, invalidf("lock_delay: %s is negative; the minimum is 0s (none)", sent)
	case e.cfg.MaxLockDelay < 0:
		return 0, newErr(ErrUnimplemented, "lock_delay: this server has lock-delay switched off")
	case hi == 0:
		return 0, newErr(ErrUnimplemented, "lock_delay: the backend %q keeps no lock-delay (it lacks capability %s)",
			e.Info().Name, lockv1.Capability_CAPABILITY_LOCK_DELAY)
	case delay > hi:
		return 0, invalidf("lock_delay: %s exceeds the maximum %s", sent, fmtDur(hi))
	}
	return delay, nil
}
