package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// process is a server this program started and must stop.
type process struct {
	cmd  *exec.Cmd
	addr string
	done chan error

	// From the server's log (stderr): its plugin's process id and, with
	// -profile, where the server and the plugin serve pprof.
	mu          sync.Mutex
	pluginPID   int
	serverPprof string
	pluginPprof string
}

// logged reads what the server's log said (see process).
func (p *process) logged() (pluginPID int, serverPprof, pluginPprof string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pluginPID, p.serverPprof, p.pluginPprof
}

// scanLog picks facts out of the server's text log and passes every line on
// to w.
func (p *process) scanLog(r io.Reader, w io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(w, line)
		p.mu.Lock()
		if v := logField(line, "plugin_pid"); v != "" {
			p.pluginPID, _ = strconv.Atoi(v)
		}
		if strings.Contains(line, "pprof serving") {
			if logField(line, "plugin") != "" {
				p.pluginPprof = logField(line, "addr")
			} else {
				p.serverPprof = logField(line, "addr")
			}
		}
		p.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
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

// startProcess runs args and waits for the readiness line that holdfast
// (and this program's echo mode) print on stdout:
// "holdfast serving addr=HOST:PORT ...".
func startProcess(ctx context.Context, name string, args ...string) (*process, error) {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{cmd: cmd, done: make(chan error, 1)}
	var logTo io.Writer = io.Discard
	if *verbose {
		logTo = os.Stderr
	}
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		p.scanLog(errOut, logTo)
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "holdfast serving ") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						ready <- a
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		<-logDone // Wait closes the pipes: read them to the end first
		p.done <- cmd.Wait()
	}()
	select {
	case p.addr = <-ready:
		return p, nil
	case err := <-p.done:
		return nil, fmt.Errorf("%s %s exited before it was ready: %v", name, strings.Join(args, " "), err)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s %s: not ready after 30s", name, strings.Join(args, " "))
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

// stop sends SIGTERM and waits, killing the process if it lingers.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
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
			Key:  l.key,
			Ttl:  durationpb.New(10 * time.Second),
			Wait: durationpb.New(10 * time.Second),
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
	resp, err := l.client.Release(ctx, &lockv1.ReleaseRequest{Key: l.key, OwnerToken: l.token})
	if err != nil {
		return err
	}
	if !resp.GetReleased() {
		return errors.New("release answered released=false")
	}
	return nil
}

// acquireRelease is the uncontended operation: each worker takes and gives
// back its own key.
func acquireRelease(client lockv1connect.LockServiceClient, prefix string) op {
	return func(ctx context.Context, worker, _ int) error {
		key := fmt.Sprintf("%s/%d", prefix, worker)
		resp, err := client.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(10 * time.Second)})
		if err != nil {
			return err
		}
		if !resp.GetAcquired() {
			return fmt.Errorf("key %s not acquired", key)
		}
		rel, err := client.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken()})
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
