package engine

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// Request ids (retry-safe requests).
//
// A client that sets request_id on Acquire, Release or Extend may send the
// request again (its answer was lost) and be answered as the first attempt
// was, on any server sharing the backend. The backend keeps the request's
// identity with the lock it changed (backend.Request: an ID and a
// Fingerprint), so the memory of a request lasts as long as its lease and
// costs one identity per key: nothing grows with the number of requests.
//
// What the backend keeps is derived here, never the id itself:
//
//   - ID: a digest of the client's request id. Nobody who reads the store
//     learns an id they could repeat.
//   - Fingerprint: a digest of the arguments a repeat must share (for an
//     Acquire: the keys, ttl, holder and lock_delay; wait and client_stamp
//     may differ, since a retry sends what is left of its wait). A repeat
//     with another fingerprint is refused with invalid_argument.
//   - Replay (Acquire only): the lease's owner token, sealed (AES-256-GCM)
//     under a key derived from the request id. A replay hands the sealed
//     token back and the engine opens it with the repeat's id, so the owner
//     token is recovered only by whoever presents the id, and a store that
//     keeps only a digest of owner tokens (PostgreSQL) still does.
//
// Whoever repeats an id gets the lease: ids must be as unguessable as owner
// tokens (the SDKs draw 128 random bits per acquisition), so a minimum
// length is enforced.

// Bounds on request_id.
const (
	MinRequestIDBytes = 16
	MaxRequestIDBytes = 128
)

// requestID is a client's request id, or none.
type requestID struct {
	raw string // as sent; empty: none
}

func (r requestID) set() bool { return r.raw != "" }

// checkRequestID validates a request_id: empty, or 16 to 128 printable
// ASCII characters.
func checkRequestID(id string) (requestID, error) {
	if id == "" {
		return requestID{}, nil
	}
	if len(id) < MinRequestIDBytes || len(id) > MaxRequestIDBytes {
		return requestID{}, invalidf("request_id: %d bytes is outside %d to %d bytes (draw at least 128 random bits, e.g. a UUID)",
			len(id), MinRequestIDBytes, MaxRequestIDBytes)
	}
	for i := range len(id) {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return requestID{}, invalidf("request_id: byte %d is not printable ASCII (0x21 to 0x7e)", i)
		}
	}
	return requestID{raw: id}, nil
}

// derive is a domain-separated digest of the request id.
func (r requestID) derive(purpose string) [32]byte {
	return sha256.Sum256(r.appendDerivationInput(nil, purpose))
}

// appendDerivationInput appends what derive digests for purpose.
func (r requestID) appendDerivationInput(b []byte, purpose string) []byte {
	b = append(b, "holdfast/"...)
	b = append(b, purpose...)
	b = append(b, 0)
	return append(b, r.raw...)
}

// identity is what the backend keeps for this request with arguments fp
// (the zero Request when there is no id).
func (r requestID) identity(fp fingerprint) backend.Request {
	if !r.set() {
		return backend.Request{}
	}
	var t identityText
	at := t.add(r, fp)
	return t.request(string(t.text), at)
}

// digestTextLen is the length of a digest in an identity: SHA-256, base64
// without padding.
const digestTextLen = 43

// identityText derives the identities of many requests into one buffer,
// to become one string that every identity is a part of: an ExtendBatch
// from a watchdog carries hundreds of request ids, and each identity's own
// digest inputs, base64 buffers and strings were most of the garbage the
// engine made per renewal.
type identityText struct {
	scratch []byte // a digest's input, reused
	text    []byte // the identities added: each ID then its Fingerprint
}

// add appends the identity of the request r (which has an id) with
// arguments fp, and answers where it starts in the text.
func (t *identityText) add(r requestID, fp fingerprint) int {
	at := len(t.text)
	t.scratch = r.appendDerivationInput(t.scratch[:0], "request-id")
	id := sha256.Sum256(t.scratch)
	t.text = base64.RawURLEncoding.AppendEncode(t.text, id[:])
	t.text = fp.appendDigest(t.text)
	return at
}

// request is the identity added at at, in s: the text as a string.
func (t *identityText) request(s string, at int) backend.Request {
	return backend.Request{ID: s[at : at+digestTextLen], Fingerprint: s[at+digestTextLen : at+2*digestTextLen]}
}

// seal encrypts an owner token for the backend to keep (empty without an
// id).
func (r requestID) seal(token string) string {
	if !r.set() {
		return ""
	}
	aead := r.aead()
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(token)+aead.Overhead())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(token), nil))
}

// sealFor is seal when ident is kept by the backend (else nothing to keep).
func (r requestID) sealFor(ident backend.Request, token string) string {
	if ident.ID == "" {
		return ""
	}
	return r.seal(token)
}

// open recovers the owner token sealed for this id.
func (r requestID) open(sealed string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(sealed)
	aead := r.aead()
	if err != nil || len(raw) < aead.NonceSize() {
		return "", newErr(ErrUnavailable, "acquire: the backend answered a replay the engine cannot read")
	}
	token, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], nil)
	if err != nil {
		return "", newErr(ErrUnavailable, "acquire: the backend answered a replay the engine cannot read")
	}
	return string(token), nil
}

func (r requestID) aead() cipher.AEAD {
	key := r.derive("replay-key")
	block, _ := aes.NewCipher(key[:]) // a 32-byte key is always accepted
	aead, _ := cipher.NewGCM(block)   // so is AES's block size
	return aead
}

// fingerprint accumulates the arguments a repeat must share.
type fingerprint struct{ b []byte }

func newFingerprint(op string) *fingerprint {
	f := &fingerprint{}
	return f.str(op)
}

// str adds a length-prefixed string, so that no two argument lists collide.
func (f *fingerprint) str(s string) *fingerprint {
	f.b = binary.AppendUvarint(f.b, uint64(len(s)))
	f.b = append(f.b, s...)
	return f
}

func (f *fingerprint) strs(ss []string) *fingerprint {
	f.b = binary.AppendUvarint(f.b, uint64(len(ss)))
	for _, s := range ss {
		f.str(s)
	}
	return f
}

func (f *fingerprint) dur(d time.Duration) *fingerprint {
	f.b = binary.AppendVarint(f.b, int64(d))
	return f
}

func (f *fingerprint) num(n int64) *fingerprint {
	f.b = binary.AppendVarint(f.b, n)
	return f
}

func (f *fingerprint) flag(b bool) *fingerprint {
	if b {
		f.b = append(f.b, 1)
	} else {
		f.b = append(f.b, 0)
	}
	return f
}

// appendDigest appends the fingerprint's digest (SHA-256, base64).
func (f fingerprint) appendDigest(b []byte) []byte {
	sum := sha256.Sum256(f.b)
	return base64.RawURLEncoding.AppendEncode(b, sum[:])
}

// conflictErr is the client's error for a request id repeated with other
// arguments (backend.ErrRequestConflict).
func conflictErr(op string, args ...string) error {
	return invalidf("request_id: already used for another %s (a repeat must send the same %s)", op, strings.Join(args, ", "))
}
