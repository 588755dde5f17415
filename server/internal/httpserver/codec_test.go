package httpserver

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// The codecs append a message's encoding after what Connect's buffer
// already holds, byte for byte what protobuf's own Marshal makes, and leave
// the bytes before it alone (a List page is encoded in place).
func TestCodecsAppendTheEncoding(t *testing.T) {
	page := &lockv1.ListResponse{NextPageToken: "next", Locks: []*lockv1.LockState{
		{Key: "a", FencingToken: 1, Holder: "h"}, {Key: "b", FencingToken: 2, Waiters: 3},
	}}
	wantProto, err := proto.Marshal(page)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, err := protojson.Marshal(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		codec interface {
			MarshalAppend([]byte, any) ([]byte, error)
		}
		want []byte
	}{
		{"proto", protoCodec{shared: newSharedEncodings()}, wantProto},
		{"json", jsonCodec{shared: newSharedEncodings()}, wantJSON},
	} {
		prefix := []byte("already here")
		dst := make([]byte, len(prefix), len(prefix)+8) // room to append in place, then to grow
		copy(dst, prefix)
		got, err := c.codec.MarshalAppend(dst, page)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], c.want) {
			t.Fatalf("%s: MarshalAppend = %q, want %q then %q", c.name, got, prefix, c.want)
		}
	}
}
