package engine

import (
	"encoding/base64"
	"testing"
)

// Owner tokens go through shells (`holdfast release KEY TOKEN`): one that
// started with '-' would be read as a flag. One draw in 64 would, so 5,000
// draws catch a minting that forgets it with near certainty.
func TestOwnerTokensNeverStartWithADash(t *testing.T) {
	seen := map[string]bool{}
	for range 5000 {
		tok := newOwnerToken()
		if tok[0] == '-' {
			t.Fatalf("owner token %q starts with '-'", tok)
		}
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(raw) != 32 {
			t.Fatalf("owner token %q: want 256 bits in base64url, got %d bytes, %v", tok, len(raw), err)
		}
		if seen[tok] {
			t.Fatalf("owner token %q minted twice", tok)
		}
		seen[tok] = true
	}
}
