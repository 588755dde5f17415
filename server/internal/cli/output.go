package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// The JSON shapes of --output json. Field names follow the API's JSON
// (lowerCamelCase); fencing tokens are decimal strings, as in the API's
// JSON (64-bit integers do not survive JavaScript or jq's doubles);
// durations are strings like "29.5s", times RFC 3339.

type stampJSON struct {
	WallTimeNs int64  `json:"wallTimeNs"`
	Logical    uint32 `json:"logical"`
}

func stampOf(t hlc.Timestamp) stampJSON { return stampJSON{WallTimeNs: t.WallTime, Logical: t.Logical} }

type stateJSON struct {
	Key          string     `json:"key"`
	FencingToken uint64     `json:"fencingToken,string"`
	Holder       string     `json:"holder"`
	ExpiresAt    *time.Time `json:"expiresAt,omitempty"`
	ExpiresIn    string     `json:"expiresIn,omitempty"`
	Waiters      uint32     `json:"waiters"`
	Stamp        stampJSON  `json:"stamp"`
	LockDelay    string     `json:"lockDelay,omitempty"`
	// Set for a semaphore or an rwlock only (a mutex's JSON is what it
	// was): the key's kind and limit, and every holder.
	Kind         string      `json:"kind,omitempty"`
	Limit        int         `json:"limit,omitempty"`
	PermitsInUse int         `json:"permitsInUse,omitempty"`
	Holders      []grantJSON `json:"holders,omitempty"`
}

// grantJSON is one holder of a semaphore or an rwlock, or an election's leader.
type grantJSON struct {
	FencingToken uint64     `json:"fencingToken,string"`
	Holder       string     `json:"holder"`
	Permits      int        `json:"permits"`
	Mode         string     `json:"mode,omitempty"`  // rwlock: shared or exclusive
	Value        *string    `json:"value,omitempty"` // election: the leader's value ("" included)
	ExpiresAt    *time.Time `json:"expiresAt,omitempty"`
	ExpiresIn    string     `json:"expiresIn,omitempty"`
	Stamp        stampJSON  `json:"stamp"`
}

func stateOf(s holdfast.LockState) stateJSON {
	j := stateJSON{Key: s.Key, FencingToken: s.FencingToken, Holder: s.Holder, Waiters: s.Waiters, Stamp: stampOf(s.Stamp)}
	if s.LockDelay > 0 {
		j.LockDelay = s.LockDelay.String()
	}
	if s.Kind != holdfast.KindMutex {
		j.Kind, j.Limit, j.PermitsInUse = s.Kind.String(), s.Limit, s.PermitsInUse
		for _, h := range s.Holders {
			g := grantJSON{FencingToken: h.FencingToken, Holder: h.Holder, Permits: h.Permits, Stamp: stampOf(h.Stamp)}
			switch s.Kind {
			case holdfast.KindRWLock:
				g.Mode = h.Mode.String()
			case holdfast.KindElection:
				v := h.Value
				g.Value = &v
			}
			if !h.ExpiresAt.IsZero() {
				t := h.ExpiresAt.UTC()
				g.ExpiresAt, g.ExpiresIn = &t, left(h.ExpiresAt)
			}
			j.Holders = append(j.Holders, g)
		}
	}
	if !s.ExpiresAt.IsZero() {
		t := s.ExpiresAt.UTC()
		j.ExpiresAt = &t
		j.ExpiresIn = left(s.ExpiresAt)
	}
	return j
}

func stateOfProto(p *lockv1.LockState) *stateJSON {
	if p == nil {
		return nil
	}
	s := holdfast.LockState{
		Key: p.GetKey(), FencingToken: p.GetFencingToken(), Holder: p.GetHolder(),
		Stamp: hlc.FromProto(p.GetStamp()), Waiters: p.GetWaiters(), LockDelay: p.GetLockDelay().AsDuration(),
	}
	if p.GetExpiresAt() != nil {
		s.ExpiresAt = p.GetExpiresAt().AsTime()
	}
	j := stateOf(s)
	return &j
}

type leaseJSON struct {
	Key          string          `json:"key,omitempty"`
	OwnerToken   string          `json:"ownerToken"`
	FencingToken uint64          `json:"fencingToken,string,omitempty"`
	Keys         []leasedKeyJSON `json:"keys,omitempty"`
	TTL          string          `json:"ttl"`
	ExpiresAt    *time.Time      `json:"expiresAt,omitempty"`
	Stamp        stampJSON       `json:"stamp"`
	LockDelay    string          `json:"lockDelay,omitempty"`
}

type leasedKeyJSON struct {
	Key          string `json:"key"`
	FencingToken uint64 `json:"fencingToken,string"`
}

type delayJSON struct {
	Key       string    `json:"key"`
	Until     time.Time `json:"until"`
	Remaining string    `json:"remaining"`
}

func delayOf(d *holdfast.KeyDelay) *delayJSON {
	if d == nil {
		return nil
	}
	return &delayJSON{Key: d.Key, Until: d.Until.UTC(), Remaining: d.Remaining.Round(time.Millisecond).String()}
}

func delayOfProto(p *lockv1.KeyDelay) *delayJSON {
	if p == nil {
		return nil
	}
	return delayOf(&holdfast.KeyDelay{Key: p.GetKey(), Until: p.GetUntil().AsTime(), Remaining: p.GetRemaining().AsDuration()})
}

func leaseOf(l *lockv1.Lease) *leaseJSON {
	if l == nil {
		return nil
	}
	j := &leaseJSON{
		Key: l.GetKey(), OwnerToken: l.GetOwnerToken(), FencingToken: l.GetFencingToken(),
		TTL: l.GetTtl().AsDuration().String(), Stamp: stampOf(hlc.FromProto(l.GetStamp())),
	}
	for _, k := range l.GetKeys() {
		j.Keys = append(j.Keys, leasedKeyJSON{Key: k.GetKey(), FencingToken: k.GetFencingToken()})
	}
	if d := l.GetLockDelay().AsDuration(); d > 0 {
		j.LockDelay = d.String()
	}
	if l.GetExpiresAt() != nil {
		t := l.GetExpiresAt().AsTime().UTC()
		j.ExpiresAt = &t
	}
	return j
}

// left is the time until t, rounded for people ("29.5s"; "expired" when
// past).
func left(t time.Time) string {
	d := time.Until(t)
	if d <= 0 {
		return "expired"
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// kv prints aligned "name  value" lines; values pass through printable.
func kv(w io.Writer, pairs ...any) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(tw, "%v\t%s\n", pairs[i], printable(fmt.Sprint(pairs[i+1])))
	}
	return tw.Flush()
}

// table prints a header and rows, aligned; cells pass through printable.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = printable(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// printable is s as a terminal may show it: unchanged when it is valid
// UTF-8 and every character is printable, else Go-quoted
// ("evil\x1b[2J\r\n"). Keys and holders are anyone's text, read from the
// server: printed raw, an escape sequence, a carriage return or a newline
// in one would repaint the terminal or forge lines of output. (JSON output
// escapes control characters itself.)
func printable(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// escapeControls escapes, in place, the characters of a one-line message
// (an error, which quotes the keys it names itself) that a terminal would
// act on instead of showing.
func escapeControls(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
