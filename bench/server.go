package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// process is a server this program started and must stop.
type process struct {
	*harness.Server
	addr string

	// From the server's log (stderr): its plugin's process id and, with
	// -profile, where the server and the plugin serve pprof.
	mu          sync.Mutex
	pluginPID   int
	serverPprof string
	pluginPprof string
	metrics     string // the /metrics URL, with --metrics-addr
}

// logged reads what the server's log said (see process).
func (p *process) logged() (pluginPID int, serverPprof, pluginPprof string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pluginPID, p.serverPprof, p.pluginPprof
}

// metricsURL is the server's /metrics URL, once it has logged it (waiting
// up to 10s), or "" without --metrics-addr.
func (p *process) metricsURL() string {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		url := p.metrics
		p.mu.Unlock()
		if url != "" {
			return url
		}
	}
	return ""
}

// scanLine picks facts out of one line of the server's text log and passes
// it on to w.
func (p *process) scanLine(line string, w io.Writer) {
	fmt.Fprintln(w, line)
	p.mu.Lock()
	defer p.mu.Unlock()
	if v := logField(line, "plugin_pid"); v != "" {
		p.pluginPID, _ = strconv.Atoi(v)
	}
	if strings.Contains(line, "metrics serving") {
		p.metrics = logField(line, "url")
	}
	if strings.Contains(line, "pprof serving") {
		if logField(line, "plugin") != "" {
			p.pluginPprof = logField(line, "addr")
		} else {
			p.serverPprof = logField(line, "addr")
		}
	}
}

// logField is the value of key=value in a slog text line.
func logField(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// lineWriter calls line for every complete line written to it.
type lineWriter struct {
	line    func(string)
	partial []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
}

// startProcess runs name with args and waits for the readiness line that
// holdfast (and this program's echo mode) print on stdout:
// "holdfast serving addr=HOST:PORT ...". The process dies with this one
// (a parent-death signal): a bench killed midway leaves no server behind.
func startProcess(ctx context.Context, name string, args ...string) (*process, error) {
	p := &process{}
	logTo := io.Discard
	if *verbose {
		logTo = os.Stderr
	}
	hs, err := harness.Start(ctx, harness.Options{
		Binary:        name,
		Command:       args,
		Stderr:        &lineWriter{line: func(l string) { p.scanLine(l, logTo) }},
		DieWithParent: true,
	})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	p.Server, p.addr = hs, hs.Addr
	return p, nil
}

// stop sends SIGTERM and waits, killing the process if it lingers.
func (p *process) stop() {
	if err := p.Stop(10 * time.Second); err != nil {
		logf("stop %s: %v", p.addr, err)
	}
}

// newClient dials addr over HTTP/2 without TLS, as the SDKs do, with the
// Connect protocol.
func newClient(addr string) lockv1connect.LockServiceClient {
	tr := &http.Transport{
		Protocols: new(http.Protocols),
		DialContext: (&net.Dialer{
			Timeout: 5 * time.Second,
		}).DialContext,
		TLSClientConfig: &tls.Config{},
	}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, "http://"+addr)
}

// holdfastLocker is one hot-key worker over the holdfast API.
type holdfastLocker struct {
	client lockv1connect.LockServiceClient
	key    string
	token  string
}

func (l *holdfastLocker) lock(ctx context.Context) error {
	for {
		resp, err := l.client.Acquire(ctx, &lockv1.AcquireRequest{
			Key:       l.key,
			Ttl:       durationpb.New(10 * time.Second),
			Wait:      durationpb.New(10 * time.Second),
			RequestId: newRequestID(),
		})
		if err != nil {
			return err
		}
		if resp.GetAcquired() {
			l.token = resp.GetLease().GetOwnerToken()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// warm opens the worker's connection.
func (l *holdfastLocker) warm(ctx context.Context) error {
	_, err := l.client.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
	return err
}

func (l *holdfastLocker) unlock(ctx context.Context) error {
	resp, err := l.client.Release(ctx, &lockv1.ReleaseRequest{Key: l.key, OwnerToken: l.token, RequestId: newRequestID()})
	if err != nil {
		return err
	}
	if !resp.GetReleased() {
		return errors.New("release answered released=false")
	}
	return nil
}

// acquireRelease is the uncontended operation: each worker takes and gives
// back its own key, each call with a fresh request id (see requestIDs).
func acquireRelease(client lockv1connect.LockServiceClient, prefix string) op {
	return func(ctx context.Context, worker, _ int) error {
		key := fmt.Sprintf("%s/%d", prefix, worker)
		resp, err := client.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(10 * time.Second), RequestId: newRequestID()})
		if err != nil {
			return err
		}
		if !resp.GetAcquired() {
			return fmt.Errorf("key %s not acquired", key)
		}
		rel, err := client.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken(), RequestId: newRequestID()})
		if err != nil {
			return err
		}
		if !rel.GetReleased() {
			return fmt.Errorf("key %s not released", key)
		}
		return nil
	}
}

// echo is the floor of any RPC lock service: one connect-go unary call.
func echo(client lockv1connect.LockServiceClient) op {
	return func(ctx context.Context, _, _ int) error {
		_, err := client.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
		return err
	}
}

var _ = connect.CodeUnavailable
