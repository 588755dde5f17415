package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// WriteRequest is a client's write to the fenced resource.
type WriteRequest struct {
	Key    string `json:"key"`
	Fence  uint64 `json:"fence"`
	Client int    `json:"client"`
	// Prim, Limit, Permits: set for a semaphore's or read-write lock's
	// grant (see Resource); Prim alone for an election's leader, whose
	// writes are fenced by term like a lock holder's by token.
	Prim    string `json:"prim,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Permits int    `json:"permits,omitempty"`
}

// WriteResponse is the resource's answer.
type WriteResponse struct {
	Accepted  bool   `json:"accepted"`
	Watermark uint64 `json:"watermark"`
}

// Resource is the shared resource the locks protect: one watermark per key,
// checked and raised in one atomic step the way holdfast.ValidateWrite
// prescribes (a token below the watermark is refused; the holder's repeated
// writes with an equal token pass). It serves POST /write over HTTP on a
// loopback port so that client processes write to it themselves, and records
// each decision as a Write op at the instant it was made.
//
// An election's leaders write as lock holders do, fenced by their term.
//
// A semaphore's or read-write lock's key has several holders at once, so a
// single watermark would refuse every holder but the newest: there the
// resource refuses nothing and instead records who is writing. A grant is
// among the key's writers (its occupants) from its first write until it
// says it is done (POST /leave, sent before it releases), and each write
// records every occupant with its permits. The model then checks that
// occupants never weigh more than the limit unless one of them may have
// lost its lease (a stale writer, the case a fence is for): at most `limit`
// holders write at once, readers together, a writer alone.
type Resource struct {
	mu        sync.Mutex
	watermark map[string]uint64
	occupants map[string]map[uint64]int // grant keys: fence -> permits
	ops       []Op

	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// StartResource serves a fresh resource on 127.0.0.1:0.
func StartResource() (*Resource, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Resource{watermark: map[string]uint64{}, occupants: map[string]map[uint64]int{}, ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", r.handle)
	mux.HandleFunc("POST /leave", r.handleLeave)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// URL is the base URL clients write to.
func (r *Resource) URL() string { return "http://" + r.ln.Addr().String() }

func (r *Resource) handle(w http.ResponseWriter, req *http.Request) {
	var wr WriteRequest
	if err := json.NewDecoder(req.Body).Decode(&wr); err != nil || wr.Key == "" {
		http.Error(w, "bad write", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.Write(wr))
}

func (r *Resource) handleLeave(w http.ResponseWriter, req *http.Request) {
	var wr WriteRequest
	if err := json.NewDecoder(req.Body).Decode(&wr); err != nil || wr.Key == "" {
		http.Error(w, "bad leave", http.StatusBadRequest)
		return
	}
	r.Leave(wr.Key, wr.Fence)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(WriteResponse{Accepted: true})
}

// Leave ends the grant fence's writing to a semaphore or read-write lock key.
func (r *Resource) Leave(key string, fence uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.occupants[key], fence)
}

// Write applies one write: the check, the new watermark and the record are
// one atomic step.
func (r *Resource) Write(wr WriteRequest) WriteResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UnixNano()
	if wr.Prim != PrimMutex && wr.Prim != PrimElection {
		occ := r.occupants[wr.Key]
		if occ == nil {
			occ = map[uint64]int{}
			r.occupants[wr.Key] = occ
		}
		occ[wr.Fence] = wr.Permits
		o := Op{Kind: Write, Prim: wr.Prim, Key: wr.Key, Client: wr.Client, Call: now, Return: now + 1,
			Fence: wr.Fence, Limit: wr.Limit, Permits: wr.Permits, Outcome: OK}
		for f, p := range occ {
			o.Occupants = append(o.Occupants, Occupant{Fence: f, Permits: p})
		}
		slices.SortFunc(o.Occupants, func(a, b Occupant) int { return cmp.Compare(a.Fence, b.Fence) })
		r.ops = append(r.ops, o)
		return WriteResponse{Accepted: true}
	}
	wm := r.watermark[wr.Key]
	resp := WriteResponse{Accepted: wr.Fence >= wm, Watermark: wm}
	out := Rejected
	if resp.Accepted {
		out = OK
		r.watermark[wr.Key] = wr.Fence
		resp.Watermark = wr.Fence
	}
	r.ops = append(r.ops, Op{Kind: Write, Prim: wr.Prim, Key: wr.Key, Client: wr.Client, Call: now, Return: now + 1, Fence: wr.Fence, Outcome: out})
	return resp
}

// Ops returns the writes decided so far.
func (r *Resource) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Close stops serving and waits for the server goroutine.
func (r *Resource) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	<-r.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
