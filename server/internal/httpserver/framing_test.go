package httpserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

func frame(flags byte, msg string) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// Every way a request body can break its envelopes, read in pieces of
// every size: the read ends in invalid_argument saying what broke, and a
// well-formed body reads through unchanged.
func TestFramedBody(t *testing.T) {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, tc := range map[string]struct {
		body       []byte
		compressed bool
		want       string // "" for a body that reads through
	}{
		"two messages":                  {cat(frame(0, "hello"), frame(0, "world")), false, ""},
		"an empty message":              {frame(0, ""), false, ""},
		"compressed, with an encoding":  {frame(1, "zz"), true, ""},
		"no body at all":                {nil, false, ""},
		"3 bytes of prefix":             {[]byte{0, 0, 0}, false, "ended 3 bytes into a message's 5-byte envelope prefix"},
		"short message":                 {frame(0, "hello")[:7], false, "a message promised 5 bytes; the request ended after 2"},
		"short second message":          {cat(frame(0, "a"), frame(0, "hello")[:6]), false, "promised 5 bytes; the request ended after 1"},
		"end-of-stream flag":            {frame(2, "{}"), false, "envelope flags 0x02: a request message may set only 0x01"},
		"gRPC-Web trailers flag":        {frame(0x80, "x"), false, "envelope flags 0x80"},
		"bad flags in a second message": {cat(frame(0, "a"), frame(4, "b")), false, "envelope flags 0x04"},
		"compressed, no encoding":       {frame(1, "zz"), false, "flagged compressed, but the request names no Grpc-Encoding"},
	} {
		for _, chunk := range []int{1, 2, 3, 7, 64} {
			b := &framedBody{ReadCloser: io.NopCloser(&chunked{r: bytes.NewReader(tc.body), n: chunk}), compression: tc.compressed, encodingHeader: "Grpc-Encoding"}
			got, err := io.ReadAll(b)
			switch {
			case tc.want == "" && (err != nil || !bytes.Equal(got, tc.body)):
				t.Errorf("%s (reads of %d): %q %v, want it read through", name, chunk, got, err)
			case tc.want != "":
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s (reads of %d): %v, want invalid_argument saying %q", name, chunk, err, tc.want)
				}
			}
		}
	}
}

// chunked reads at most n bytes at a time.
type chunked struct {
	r io.Reader
	n int
}

func (c *chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

func TestEnvelopedContentTypes(t *testing.T) {
	for ct, want := range map[string]string{
		"application/grpc":                "Grpc-Encoding",
		"application/grpc+proto":          "Grpc-Encoding",
		"Application/GRPC-Web+proto; a=b": "Grpc-Encoding",
		"application/connect+json":        "Connect-Content-Encoding",
		"application/json":                "",
		"application/proto":               "",
		"application/grpc-web-text":       "",
		"application/grpc-web-text+proto": "",
		"":                                "",
	} {
		got, ok := enveloped(ct)
		if got != want || ok != (want != "") {
			t.Errorf("enveloped(%q) = %q %t, want %q", ct, got, ok, want)
		}
	}
}
