package httpserver

import (
	"sync"

	"google.golang.org/protobuf/proto"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// sharedEncodings remembers how the last Watch events were encoded. The
// engine hands one message, never modified again, to every watcher of an
// event (package engine), so one encoding per codec serves them all: with
// many watchers of a busy prefix, encoding each event once per watcher
// would cost more than the events themselves. Connect copies the bytes
// into its own buffer (MarshalAppend), so they are never handed out to be
// written into.
type sharedEncodings struct {
	mu      sync.Mutex
	ring    [sharedEncodingsKept]*lockv1.WatchResponse
	next    int
	entries map[*lockv1.WatchResponse]*sharedEncoding
}

// sharedEncodingsKept events are remembered; a watcher further behind
// encodes its own (it is about to be ended for falling behind anyway).
const sharedEncodingsKept = 512

type sharedEncoding struct {
	once sync.Once
	b    []byte
	err  error
}

func newSharedEncodings() *sharedEncodings {
	return &sharedEncodings{entries: make(map[*lockv1.WatchResponse]*sharedEncoding, sharedEncodingsKept)}
}

// appendEncoding appends msg's encoding to dst: the remembered one for a
// Watch event, else a fresh one (encoded into dst itself: a List page is
// a hundred kilobytes, not worth a buffer of its own and a copy).
func (c *sharedEncodings) appendEncoding(dst []byte, msg proto.Message, encode func([]byte, proto.Message) ([]byte, error)) ([]byte, error) {
	ev, ok := msg.(*lockv1.WatchResponse)
	if !ok || ev.GetState() == nil || c == nil { // not an event: this message is its caller's own
		return encode(dst, msg)
	}
	c.mu.Lock()
	e := c.entries[ev]
	if e == nil {
		e = &sharedEncoding{}
		if old := c.ring[c.next]; old != nil {
			delete(c.entries, old)
		}
		c.ring[c.next] = ev
		c.next = (c.next + 1) % len(c.ring)
		c.entries[ev] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.b, e.err = encode(nil, msg) })
	return append(dst, e.b...), e.err
}
