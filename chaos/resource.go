package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// WriteRequest is a client's write to the fenced resource.
type WriteRequest struct {
	Key    string `json:"key"`
	Fence  uint64 `json:"fence"`
	Client int    `json:"client"`
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
type Resource struct {
	mu        sync.Mutex
	watermark map[string]uint64
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
	r := &Resource{watermark: map[string]uint64{}, ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", r.handle)
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

// Write applies one write: the check, the new watermark and the record are
// one atomic step.
func (r *Resource) Write(wr WriteRequest) WriteResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UnixNano()
	wm := r.watermark[wr.Key]
	resp := WriteResponse{Accepted: wr.Fence >= wm, Watermark: wm}
	out := Rejected
	if resp.Accepted {
		out = OK
		r.watermark[wr.Key] = wr.Fence
		resp.Watermark = wr.Fence
	}
	r.ops = append(r.ops, Op{Kind: Write, Key: wr.Key, Client: wr.Client, Call: now, Return: now + 1, Fence: wr.Fence, Outcome: out})
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
