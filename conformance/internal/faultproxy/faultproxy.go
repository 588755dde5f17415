// Package faultproxy is the SDK specs' fault-injecting HTTP proxy: it sits
// between an SDK (through its adapter) and a real holdfast server, forwards
// Connect unary calls, and on request answers `unavailable` itself, holds
// requests unanswered (a server that accepted the connection and hangs),
// or forwards a call and loses its answer in transit. It records every
// request it saw (method, arrival time, outcome, headers) and the leases
// the server granted through it, so a spec can count an SDK's attempts,
// time its renewals and end a lease behind its guard's back with the
// owner token only the guard knows. It serves HTTP/1.1 and cleartext
// HTTP/2 on 127.0.0.1; Watch (a stream) is not proxied.
package faultproxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Mode is what the proxy does with each request.
type Mode int

const (
	// Pass forwards every request to the server.
	Pass Mode = iota
	// Unavailable answers every request with Connect's `unavailable`.
	Unavailable
	// Blackhole accepts every request and never answers it (until the
	// client gives up or the proxy closes).
	Blackhole
)

// Outcome is what became of one request.
type Outcome int

const (
	// Forwarded: the server's answer was delivered.
	Forwarded Outcome = iota + 1
	// Refused: the proxy answered `unavailable`.
	Refused
	// Held: the proxy never answered.
	Held
	// Lost: forwarded to the server, which answered, but the client was
	// told `unavailable` instead.
	Lost
)

// Request is one request the proxy saw.
type Request struct {
	// Method is the RPC's name ("Acquire", "Extend", ...).
	Method string
	// Arrived is when the proxy read the request's headers: at or after
	// the SDK sent it, before the server saw it.
	Arrived time.Time
	Outcome Outcome
	// Status is the HTTP status of the server's answer (Forwarded, Lost).
	Status int
	Header http.Header
}

// Lease is a lease the server granted through the proxy.
type Lease struct {
	Key          string
	OwnerToken   string
	FencingToken uint64
}

// Proxy is a running fault proxy.
type Proxy struct {
	// URL is the proxy's base URL, for the SDK.
	URL string

	upstream string
	ln       net.Listener
	srv      *http.Server
	client   *http.Client
	closed   chan struct{}

	mu       sync.Mutex
	mode     Mode
	lose     map[string]int
	requests []Request
	leases   map[leaseID]Lease
}

// New starts a proxy on a free 127.0.0.1 port in front of the server at
// upstream (a base URL such as "http://127.0.0.1:7410").
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	p := &Proxy{
		URL:      "http://" + ln.Addr().String(),
		upstream: strings.TrimRight(upstream, "/"),
		ln:       ln,
		client:   &http.Client{Transport: tr},
		closed:   make(chan struct{}),
		lose:     map[string]int{},
		leases:   map[leaseID]Lease{},
	}
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	p.srv = &http.Server{Handler: p, Protocols: protos, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// SetMode changes what the proxy does with the requests that arrive from
// now on.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
}

// LoseNextAnswer makes the proxy forward the next call of method to the
// server and then tell the client `unavailable`, as if the answer had been
// lost on the way back.
func (p *Proxy) LoseNextAnswer(method string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose[method]++
}

// Requests returns the requests seen so far for method ("" for all), in
// arrival order.
func (p *Proxy) Requests(method string) []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Request
	for _, r := range p.requests {
		if method == "" || r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// Lease returns the lease with this fencing token, if the server granted it
// through the proxy.
func (p *Proxy) Lease(fencingToken uint64) (Lease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, l := range p.leases {
		if id.fencingToken == fencingToken {
			return l, true
		}
	}
	return Lease{}, false
}

// LeaseOf is the lease on key with fencingToken. Fencing tokens are
// unique per key only: etcd gives every key a batch took in one
// transaction the same revision, so a token alone can name several leases.
func (p *Proxy) LeaseOf(key string, fencingToken uint64) (Lease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.leases[leaseID{key, fencingToken}]
	return l, ok
}

// leaseID names a lease the proxy saw: a fencing token is unique per key.
type leaseID struct {
	key          string
	fencingToken uint64
}

// Close stops the proxy; held requests end.
func (p *Proxy) Close() error {
	select {
	case <-p.closed:
		return nil
	default:
	}
	close(p.closed)
	err := p.srv.Close()
	p.client.CloseIdleConnections()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) record(r Request) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, r)
	return len(p.requests) - 1
}

func (p *Proxy) update(i int, f func(*Request)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.requests[i])
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	p.mu.Lock()
	mode := p.mode
	lose := p.lose[method] > 0 && mode == Pass
	if lose {
		p.lose[method]--
	}
	p.mu.Unlock()
	i := p.record(Request{Method: method, Arrived: time.Now(), Header: r.Header.Clone()})
	switch mode {
	case Unavailable:
		p.update(i, func(q *Request) { q.Outcome = Refused })
		unavailable(w, r, "refused")
		return
	case Blackhole:
		p.update(i, func(q *Request) { q.Outcome = Held })
		select {
		case <-r.Context().Done():
		case <-p.closed:
		}
		return
	}
	status, header, body, err := p.forward(r)
	if err != nil {
		p.update(i, func(q *Request) { q.Outcome = Refused })
		unavailable(w, r, "upstream: "+err.Error())
		return
	}
	if status == http.StatusOK && method == "Acquire" {
		p.noteLease(header, body)
	}
	if lose {
		p.update(i, func(q *Request) { q.Outcome, q.Status = Lost, status })
		unavailable(w, r, "answer lost in transit")
		return
	}
	p.update(i, func(q *Request) { q.Outcome, q.Status = Forwarded, status })
	for k, vs := range header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// hopHeaders are not forwarded; the accept-encoding ones are dropped so that
// the server answers uncompressed and the proxy can read Acquire answers.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Accept-Encoding", "Connect-Accept-Encoding"}

func (p *Proxy) forward(r *http.Request) (int, http.Header, []byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return 0, nil, nil, err
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, nil, nil, err
	}
	h := resp.Header.Clone()
	for _, k := range hopHeaders {
		h.Del(k)
	}
	h.Del("Content-Length")
	return resp.StatusCode, h, out, nil
}

// noteLease records the lease of an Acquire answer.
func (p *Proxy) noteLease(h http.Header, body []byte) {
	if h.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return
		}
		if body, err = io.ReadAll(zr); err != nil {
			return
		}
	}
	var resp lockv1.AcquireResponse
	var err error
	switch ct := h.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/proto"):
		err = proto.Unmarshal(body, &resp)
	case strings.HasPrefix(ct, "application/json"):
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(body, &resp)
	default:
		return // gRPC framing: not proxied for leases
	}
	if err != nil || !resp.GetAcquired() {
		return
	}
	l := resp.GetLease()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leases[leaseID{l.GetKey(), l.GetFencingToken()}] = Lease{Key: l.GetKey(), OwnerToken: l.GetOwnerToken(), FencingToken: l.GetFencingToken()}
}

// unavailable answers the call with `unavailable` in the call's protocol.
func unavailable(w http.ResponseWriter, r *http.Request, why string) {
	msg := "conformance fault proxy: " + why
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.Header().Set("Grpc-Status", "14")
		w.Header().Set("Grpc-Message", msg)
		w.WriteHeader(http.StatusOK)
		return
	}
	body, _ := json.Marshal(map[string]string{"code": "unavailable", "message": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(body)
}
