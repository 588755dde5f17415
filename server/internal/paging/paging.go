// Package paging serves LockService.List over a caller's view with page
// tokens the caller can neither read nor forge.
//
// A backend's page token is its own (the memory backend's is the last key
// listed, base64url-encoded): handed out as it is, it would tell a caller
// the next key whoever owns it, and a forged one would start a page
// anywhere. So a page token leaving the server is sealed: AES-256-GCM over
// the backend's token and the position in the view, with the request it
// answers (the caller, the prefix as asked, the view's prefixes) as
// associated data. A token that was not sealed by this key, was altered,
// or is presented by another caller or for another prefix or view fails to
// open and answers invalid_argument; nothing of it reaches the backend.
//
// A view is the list of key ranges a caller may see under the prefix it
// asked for: the prefix itself, or, for a token whose namespaces lie under
// a wider prefix, each of those namespaces in key order. Pages are filled
// from one namespace after the other, so the server never reads keys
// outside the caller's namespaces and no page is empty while another
// follows: empty pages cannot count another tenant's keys.
//
// The sealing key is random per process unless a key file is given
// (`holdfast serve --page-token-key-file`); servers behind one load
// balancer share a file so that a List can page across them.
package paging

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"connectrpc.com/connect"

	"github.com/holdfast/holdfast/core/engine"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// MaxTokenBytes bounds a page token as sent by a client.
const MaxTokenBytes = 4096

// MinKeyFileBytes is the least secret a key file must hold.
const MinKeyFileBytes = 32

// version is the first byte of every sealed token.
const version = 1

// View is what one List may show.
type View struct {
	// Caller names whose view this is (a bearer token's name; empty without
	// authentication). A token issued to one caller does not open for
	// another.
	Caller string
	// Prefixes are the key ranges to list, in key order, none inside
	// another (so their keys are disjoint and ordered range by range).
	Prefixes []string
}

type viewKey struct{}

// WithView makes List serve view instead of the request's own prefix.
func WithView(ctx context.Context, v View) context.Context {
	return context.WithValue(ctx, viewKey{}, v)
}

// ViewFrom returns the view set by WithView, if any.
func ViewFrom(ctx context.Context) (View, bool) {
	v, ok := ctx.Value(viewKey{}).(View)
	return v, ok
}

// Sealer seals and opens page tokens with one key. It is safe for
// concurrent use.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer derives the sealing key from secret (at least MinKeyFileBytes
// bytes; HKDF-SHA256).
func NewSealer(secret []byte) (*Sealer, error) {
	if len(secret) < MinKeyFileBytes {
		return nil, fmt.Errorf("page token key: %d bytes is too short (at least %d)", len(secret), MinKeyFileBytes)
	}
	key, err := hkdf.Key(sha256.New, secret, nil, "holdfast page tokens v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// RandomSealer seals with a key of this process only.
func RandomSealer() *Sealer {
	s, err := NewSealer([]byte(rand.Text() + rand.Text()))
	if err != nil {
		panic(err) // a fixed-length random secret cannot be refused
	}
	return s
}

// LoadSealer reads a key file (its bytes, surrounding white space
// removed, are the secret).
func LoadSealer(path string) (*Sealer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("page token key: %w", err)
	}
	s, err := NewSealer([]byte(strings.TrimSpace(string(raw))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ErrBadToken is wrapped by the invalid_argument error of a page token
// that does not open.
var ErrBadToken = errors.New("page_token: not a token this server issued for this List (same caller, same prefix); list again without one")

// position is where a page starts: the index of a view prefix and the
// backend's own token within it.
type position struct {
	index   int
	backend string
}

// aad binds a token to the request it continues.
func aad(v View, asked string) []byte {
	b := []byte("holdfast list\x00")
	b = binary.AppendUvarint(b, uint64(len(v.Caller)))
	b = append(b, v.Caller...)
	b = binary.AppendUvarint(b, uint64(len(asked)))
	b = append(b, asked...)
	for _, p := range v.Prefixes {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

func (s *Sealer) seal(v View, asked string, pos position) string {
	plain := binary.AppendUvarint(nil, uint64(pos.index))
	plain = append(plain, pos.backend...)
	out := make([]byte, 1, 1+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	out[0] = version
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails (it crashes instead)
	out = append(out, nonce...)
	out = s.aead.Seal(out, nonce, plain, aad(v, asked))
	return base64.RawURLEncoding.EncodeToString(out)
}

func (s *Sealer) open(v View, asked, tok string) (position, error) {
	if len(tok) > MaxTokenBytes {
		return position{}, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("page_token: %d bytes exceeds the maximum %d bytes", len(tok), MaxTokenBytes))
	}
	bad := connect.NewError(connect.CodeInvalidArgument, ErrBadToken)
	// Strict: one token, one spelling (no unused trailing bits).
	raw, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	ns := s.aead.NonceSize()
	if err != nil || len(raw) < 1+ns+s.aead.Overhead() || raw[0] != version {
		return position{}, bad
	}
	plain, err := s.aead.Open(nil, raw[1:1+ns], raw[1+ns:], aad(v, asked))
	if err != nil {
		return position{}, bad
	}
	idx, n := binary.Uvarint(plain)
	if n <= 0 || idx >= uint64(len(v.Prefixes)) {
		return position{}, bad
	}
	return position{index: int(idx), backend: string(plain[n:])}, nil
}

// ListFunc lists one page of one prefix, with the backend's own page
// tokens (engine.Engine.List).
type ListFunc func(context.Context, *lockv1.ListRequest) (*lockv1.ListResponse, error)

// List serves req over view: one page of at most req's page size (the
// engine's default and cap apply), and a sealed token for the next page.
func (s *Sealer) List(ctx context.Context, v View, req *lockv1.ListRequest, list ListFunc) (*lockv1.ListResponse, error) {
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = engine.DefaultPageSize
	case size > engine.MaxPageSize:
		size = engine.MaxPageSize
	}
	pos := position{}
	if tok := req.GetPageToken(); tok != "" {
		p, err := s.open(v, req.GetPrefix(), tok)
		if err != nil {
			return nil, err
		}
		pos = p
	}
	out := &lockv1.ListResponse{}
	// Each round either fills the page, moves to the next prefix, or
	// follows a backend token; a backend that keeps answering empty pages
	// with a next token gets a bounded number of rounds per page.
	for rounds := 0; pos.index < len(v.Prefixes); rounds++ {
		if len(out.Locks) >= size || rounds > len(v.Prefixes)+8 {
			out.NextPageToken = s.seal(v, req.GetPrefix(), pos)
			return out, nil
		}
		page, err := list(ctx, &lockv1.ListRequest{
			Prefix:    v.Prefixes[pos.index],
			PageSize:  uint32(size - len(out.Locks)),
			PageToken: pos.backend,
		})
		if err != nil {
			return nil, err
		}
		if out.Locks == nil { // the usual page: one backend page, taken as it is
			out.Locks = page.GetLocks()
		} else {
			out.Locks = append(out.Locks, page.GetLocks()...)
		}
		out.ServerStamp = page.GetServerStamp()
		if page.GetNextPageToken() != "" {
			pos.backend = page.GetNextPageToken()
			continue
		}
		pos = position{index: pos.index + 1}
	}
	return out, nil
}
