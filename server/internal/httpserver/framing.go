package httpserver

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// checkFraming answers malformed request framing with invalid_argument.
//
// gRPC, gRPC-Web and Connect's streaming protocol send each message in an
// envelope: one byte of flags, four of length, then the message. Connect
// reports a request that breaks the envelope (ends inside a prefix or a
// message, sets a flag only a server may send, or says it is compressed
// without naming an encoding) as internal, which blames the server for the
// client's bytes. A request's body is read through framedBody, which
// checks each envelope as it passes and turns those cases into
// invalid_argument; Connect's readers pass a *connect.Error from the body
// through as it is.
func checkFraming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if encodingHeader, ok := enveloped(r.Header.Get("Content-Type")); ok && r.Body != nil && r.Body != http.NoBody {
			enc := r.Header.Get(encodingHeader)
			r.Body = &framedBody{ReadCloser: r.Body, compression: enc != "" && enc != "identity", encodingHeader: encodingHeader}
		}
		next.ServeHTTP(w, r)
	})
}

// enveloped reports whether a request of this content type is a stream of
// enveloped messages, and the header that names its compression.
func enveloped(contentType string) (encodingHeader string, ok bool) {
	ct, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	ct = strings.TrimSpace(ct)
	switch {
	case ct == "application/grpc-web-text" || strings.HasPrefix(ct, "application/grpc-web-text+"):
		return "", false // base64 text: not served, and not bytes to check
	case ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+"),
		ct == "application/grpc-web" || strings.HasPrefix(ct, "application/grpc-web+"):
		return "Grpc-Encoding", true
	case strings.HasPrefix(ct, "application/connect+"):
		return "Connect-Content-Encoding", true
	}
	return "", false
}

// flagCompressed is the only envelope flag a client may set.
const flagCompressed = 0x01

// framedBody checks the envelopes of a request body as they are read.
type framedBody struct {
	io.ReadCloser
	compression    bool   // the request names an encoding
	encodingHeader string // which header would
	prefix         int    // bytes of the current prefix seen (0..4); 5 means inside a message
	size           uint32 // the current message's length, as its prefix is read
	left           uint32 // bytes of the current message still to come
	err            error  // the first violation, returned from then on
}

func protocolError(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("protocol error: "+format, args...))
}

func (b *framedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	if verr := b.scan(p[:n]); verr != nil {
		b.err = verr
		return 0, verr
	}
	if errors.Is(err, io.EOF) {
		switch {
		case b.prefix > 0 && b.prefix < 5:
			b.err = protocolError("the request ended %d bytes into a message's 5-byte envelope prefix", b.prefix)
		case b.prefix == 5 && b.left > 0:
			b.err = protocolError("a message promised %d bytes; the request ended after %d", b.size, b.size-b.left)
		}
		if b.err != nil {
			return n, b.err
		}
	}
	return n, err
}

// scan follows the envelopes through the bytes p.
func (b *framedBody) scan(p []byte) error {
	for len(p) > 0 {
		if b.prefix == 5 { // inside a message
			k := min(uint32(len(p)), b.left)
			b.left -= k
			p = p[k:]
			if b.left == 0 {
				b.prefix = 0
			}
			continue
		}
		c := p[0]
		p = p[1:]
		if b.prefix == 0 {
			switch {
			case c&^flagCompressed != 0:
				return protocolError("envelope flags 0x%02x: a request message may set only 0x01 (compressed)", c)
			case c&flagCompressed != 0 && !b.compression:
				return protocolError("a message is flagged compressed, but the request names no %s", b.encodingHeader)
			}
			b.size = 0
		} else {
			b.size = b.size<<8 | uint32(c)
		}
		b.prefix++
		if b.prefix == 5 {
			b.left = b.size
			if b.left == 0 {
				b.prefix = 0
			}
		}
	}
	return nil
}
