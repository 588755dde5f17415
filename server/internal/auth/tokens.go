// Package auth authenticates holdfast API calls by bearer tokens read from a
// file and authorises them by key prefix (namespaces).
//
// # Tokens file
//
// YAML or JSON (JSON is YAML), a list of entries:
//
//   - name: billing            # for logs; unique
//     sha256: 9f86d081884c...  # hex SHA-256 of the token (preferred: the file holds no secret)
//     prefixes: ["billing/", "shared/billing/"]
//     max_locks: 500           # optional quotas of this token (package limits);
//     max_waiters: 50          # omitted: the server's --max-...-per-client
//     max_watch_streams: 10
//   - name: dashboard
//     token: s3cr3t-plain      # or the token itself (discouraged)
//     prefixes: [""]           # "" is every key
//     read_only: true          # Inspect, List, Watch and GetServerInfo only
//
// Exactly one of token and sha256 per entry; at least one prefix; a quota,
// when given, at least 1. A token is compared by its SHA-256 in constant
// time against every entry.
//
// The file is read at start (an unreadable or invalid file refuses to
// start) and again when it changes on disk (checked by size, modification
// time and inode at most once per ReloadInterval, on a request's path): a
// valid new file replaces the tokens for the next request; an invalid one is
// logged and the previous tokens stay.
//
// # Namespaces
//
// A prefix is a plain string prefix of keys: "billing/" covers
// "billing/nightly" but not "billing2"; end prefixes with a separator. A
// token may Acquire, Release, Extend and Inspect only keys under one of its
// prefixes; other keys answer permission_denied naming the key and the
// caller's own prefixes (never anyone else's).
package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// ReloadInterval is how often, at most, the tokens file is checked for a
// change.
const ReloadInterval = time.Second

// Principal is an authenticated caller.
type Principal struct {
	// Name is the entry's name in the tokens file.
	Name string
	// Prefixes are the key prefixes the caller may act on.
	Prefixes []string
	// ReadOnly callers may not Acquire, Release or Extend.
	ReadOnly bool
	// Quota replaces the server's per-client bounds for this caller.
	Quota Quota
}

// Quota is a token's own bounds (package limits); a zero field leaves the
// server's per-client default.
type Quota struct {
	// MaxLocks bounds the locks it holds through this server, with its
	// Acquires in progress.
	MaxLocks int
	// MaxWaiters bounds its Acquires waiting (wait > 0) at once.
	MaxWaiters int
	// MaxWatchStreams bounds its open Watch streams.
	MaxWatchStreams int
}

// Allows reports whether key lies under one of p's prefixes.
func (p *Principal) Allows(key string) bool {
	for _, pre := range p.Prefixes {
		if strings.HasPrefix(key, pre) {
			return true
		}
	}
	return false
}

// entry is one line of the tokens file, as parsed.
type entry struct {
	Name     string   `yaml:"name"`
	Token    string   `yaml:"token"`
	SHA256   string   `yaml:"sha256"`
	Prefixes []string `yaml:"prefixes"`
	ReadOnly bool     `yaml:"read_only"`

	MaxLocks        *int `yaml:"max_locks"`
	MaxWaiters      *int `yaml:"max_waiters"`
	MaxWatchStreams *int `yaml:"max_watch_streams"`
}

type token struct {
	sum   [sha256.Size]byte
	p     *Principal
	plain bool // given as the token itself, not its hash
}

// parse reads a tokens file's content.
func parse(raw []byte) ([]token, error) {
	var entries []entry
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true) // a typo ("prefix:") must not silently widen or narrow access
	if err := dec.Decode(&entries); err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, errors.New("no tokens")
	}
	names := map[string]bool{}
	sums := map[[sha256.Size]byte]string{}
	out := make([]token, 0, len(entries))
	for i, e := range entries {
		where := fmt.Sprintf("entry %d", i+1)
		if e.Name != "" {
			where = fmt.Sprintf("entry %d (%s)", i+1, e.Name)
		}
		if e.Name == "" {
			return nil, fmt.Errorf("%s: name: required", where)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("%s: name: %q is used twice", where, e.Name)
		}
		names[e.Name] = true
		var t token
		switch {
		case e.Token != "" && e.SHA256 != "":
			return nil, fmt.Errorf("%s: give token or sha256, not both", where)
		case e.Token != "":
			if len(e.Token) < 16 {
				return nil, fmt.Errorf("%s: token: %d characters is too short to be a secret (at least 16)", where, len(e.Token))
			}
			t.sum, t.plain = sha256.Sum256([]byte(e.Token)), true
		case e.SHA256 != "":
			b, err := hex.DecodeString(e.SHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("%s: sha256: want %d hex digits", where, 2*sha256.Size)
			}
			copy(t.sum[:], b)
		default:
			return nil, fmt.Errorf("%s: token or sha256: required", where)
		}
		if other, dup := sums[t.sum]; dup {
			return nil, fmt.Errorf("%s: the same token as %s", where, other)
		}
		sums[t.sum] = e.Name
		if len(e.Prefixes) == 0 {
			return nil, fmt.Errorf(`%s: prefixes: at least one ("" is every key)`, where)
		}
		var q Quota
		for _, f := range []struct {
			name string
			in   *int
			out  *int
		}{{"max_locks", e.MaxLocks, &q.MaxLocks}, {"max_waiters", e.MaxWaiters, &q.MaxWaiters}, {"max_watch_streams", e.MaxWatchStreams, &q.MaxWatchStreams}} {
			if f.in == nil {
				continue
			}
			if *f.in < 1 {
				return nil, fmt.Errorf("%s: %s: %d, want at least 1 (leave it out for the server's default)", where, f.name, *f.in)
			}
			*f.out = *f.in
		}
		t.p = &Principal{Name: e.Name, Prefixes: append([]string(nil), e.Prefixes...), ReadOnly: e.ReadOnly, Quota: q}
		out = append(out, t)
	}
	return out, nil
}

// Store holds the tokens of one file and reloads them when it changes.
type Store struct {
	path string
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	tokens  []token
	stat    os.FileInfo
	checked time.Time
}

// Load reads the tokens file at path.
func Load(path string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{path: path, log: log, now: time.Now}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("auth tokens: %w", err)
	}
	toks, err := s.read()
	if err != nil {
		return nil, err
	}
	s.tokens, s.stat, s.checked = toks, st, s.now()
	s.warnPlain(toks)
	return s, nil
}

func (s *Store) read() ([]token, error) {
	raw, err := os.ReadFile(s.path)
	if err != nil {
		return nil, fmt.Errorf("auth tokens: %w", err)
	}
	toks, err := parse(raw)
	if err != nil {
		return nil, fmt.Errorf("auth tokens %s: %w", s.path, err)
	}
	return toks, nil
}

// Len is the number of tokens in force.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tokens)
}

// current returns the tokens in force, reloading the file first when it
// changed (checked at most once per ReloadInterval).
func (s *Store) current() []token {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.checked) < ReloadInterval && !now.Before(s.checked) {
		return s.tokens
	}
	s.checked = now
	st, err := os.Stat(s.path)
	if err != nil {
		s.log.Warn("auth tokens file unreadable; keeping the tokens in force", "path", s.path, "err", err)
		return s.tokens
	}
	if sameFile(st, s.stat) {
		return s.tokens
	}
	s.stat = st // report a bad file once per change, not per request
	toks, err := s.read()
	if err != nil {
		s.log.Error("auth tokens file changed but is invalid; keeping the tokens in force", "err", err)
		return s.tokens
	}
	s.tokens = toks
	s.log.Info("auth tokens reloaded", "path", s.path, "tokens", len(toks))
	s.warnPlain(toks)
	return s.tokens
}

// sameFile reports whether a and b are the same file with the same content
// as far as size, modification time and inode tell.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// Authenticate returns the principal of a bearer token, or nil. The
// token's SHA-256 is compared with every entry in constant time.
func (s *Store) Authenticate(bearer string) *Principal {
	sum := sha256.Sum256([]byte(bearer))
	var found *Principal
	for _, t := range s.current() {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			found = t.p // no early exit: the time does not depend on the position
		}
	}
	return found
}

// warnPlain says which entries hold a token rather than its hash.
func (s *Store) warnPlain(toks []token) {
	var names []string
	for _, t := range toks {
		if t.plain {
			names = append(names, t.p.Name)
		}
	}
	if len(names) > 0 {
		s.log.Warn("auth tokens file holds tokens in the clear; store their sha256 instead", "path", s.path, "entries", strings.Join(names, ","))
	}
}
