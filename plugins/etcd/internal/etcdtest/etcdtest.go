// Package etcdtest runs real etcd server processes for tests: one member or a
// cluster of three on 127.0.0.1, free ports chosen at run time, data in a
// temp dir, each member stoppable and restartable (same data dir) by its
// PID. It is the Go twin of scripts/etcd.sh, for tests that must restart or
// stop members themselves and for `go test` runs without
// HOLDFAST_ETCD_ENDPOINTS.
//
// The etcd binary is $HOLDFAST_ETCD_BIN, else $HOLDFAST_BIN_DIR/etcd, else
// bin/etcd in the source tree (scripts/setup.d/10-etcd.sh builds it).
package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/harness"
)

// EndpointsEnv names the variable holding the endpoints of an etcd started
// outside the test (scripts/etcd.sh start prints it).
const EndpointsEnv = "HOLDFAST_ETCD_ENDPOINTS"

// ErrNoBinary is returned when no etcd executable can be found.
var ErrNoBinary = errors.New("etcdtest: no etcd binary (run scripts/setup.d/10-etcd.sh or set HOLDFAST_ETCD_BIN)")

// Binary finds the etcd executable.
func Binary() (string, error) {
	var candidates []string
	if p := os.Getenv("HOLDFAST_ETCD_BIN"); p != "" {
		candidates = append(candidates, p)
	}
	if d := os.Getenv("HOLDFAST_BIN_DIR"); d != "" {
		candidates = append(candidates, filepath.Join(d, "etcd"))
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		// file is <root>/plugins/etcd/internal/etcdtest/etcdtest.go
		root := filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
		candidates = append(candidates, filepath.Join(root, "bin", "etcd"))
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w; looked at %s", ErrNoBinary, strings.Join(candidates, ", "))
}

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	DataDir   string
	bin       string
	args      []string
	log       string
	tls       *TLS

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Cluster is a set of members started together.
type Cluster struct {
	Members []*Member
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// EndpointList is Endpoints joined with commas, as the backend option wants.
func (c *Cluster) EndpointList() string { return strings.Join(c.Endpoints(), ",") }

// TLS makes the members serve clients over TLS.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and key (for
	// 127.0.0.1); CAFile is the CA that signed it and, with ClientCertAuth,
	// the clients' certificates.
	CertFile, KeyFile, CAFile string
	ClientCertAuth            bool
	// ClientCertFile and ClientKeyFile are what the health check presents
	// when ClientCertAuth is set.
	ClientCertFile, ClientKeyFile string
}

// Options tune Start.
type Options struct {
	// TLS, when set, serves clients over https.
	TLS *TLS
}

// Start starts a new cluster of n members with data under dir and waits
// until every member is healthy. Free ports are picked at run time; a lost
// race for a port is retried with new ports.
func Start(ctx context.Context, dir string, n int) (*Cluster, error) {
	return StartWith(ctx, dir, n, Options{})
}

// StartWith is Start with options.
func StartWith(ctx context.Context, dir string, n int, opts Options) (*Cluster, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := start(ctx, bin, filepath.Join(dir, fmt.Sprintf("try%d", attempt)), n, opts)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(ctx context.Context, bin, dir string, n int, opts Options) (*Cluster, error) {
	scheme := "http"
	if opts.TLS != nil {
		scheme = "https"
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	var initial []string
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			DataDir:   filepath.Join(dir, fmt.Sprintf("m%d.data", i)),
			log:       filepath.Join(dir, fmt.Sprintf("m%d.log", i)),
			bin:       bin,
			tls:       opts.TLS,
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	token := fmt.Sprintf("holdfast-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	for _, m := range c.Members {
		m.args = []string{
			"--name", m.Name, "--data-dir", m.DataDir,
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", token,
			"--initial-cluster-state", "new", "--log-level", "warn",
		}
		if t := opts.TLS; t != nil {
			m.args = append(m.args, "--cert-file", t.CertFile, "--key-file", t.KeyFile, "--trusted-ca-file", t.CAFile)
			if t.ClientCertAuth {
				m.args = append(m.args, "--client-cert-auth")
			}
		}
		if err := m.launch(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := m.WaitHealthy(ctx, 30*time.Second); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// Stop stops every member that runs.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.Stop()
	}
}

func (m *Member) launch() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("etcdtest: %s already runs", m.Name)
	}
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(m.bin, m.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	m.cmd, m.done = cmd, done
	return nil
}

// Running reports whether the member's process runs.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Stop ends the member's process (SIGTERM, then SIGKILL after 10s) by its
// PID and waits for it. Its data dir stays for Restart.
func (m *Member) Stop() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd, m.done = nil, nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Kill ends the member's process with SIGKILL and waits for it.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd, m.done = nil, nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts the stopped member again on the same ports and data dir
// and waits until it is healthy.
func (m *Member) Restart(ctx context.Context) error {
	if err := m.launch(); err != nil {
		return err
	}
	return m.WaitHealthy(ctx, 30*time.Second)
}

// WaitHealthy polls the member's /health until it says true, the process
// exits, or the timeout passes.
func (m *Member) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	if m.tls != nil {
		tr, err := m.tls.transport()
		if err != nil {
			return err
		}
		defer tr.CloseIdleConnections()
		client.Transport = tr
	}
	for {
		m.mu.Lock()
		done := m.done
		m.mu.Unlock()
		if done == nil {
			return fmt.Errorf("etcdtest: %s is not running", m.Name)
		}
		select {
		case <-done:
			return fmt.Errorf("etcdtest: %s exited before it was healthy; see %s: %s", m.Name, m.log, tail(m.log))
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.ClientURL+"/health", nil)
		if resp, err := client.Do(req); err == nil {
			var buf [256]byte
			k, _ := resp.Body.Read(buf[:])
			resp.Body.Close()
			if strings.Contains(string(buf[:k]), `"health":"true"`) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdtest: %s not healthy within %s; see %s", m.Name, timeout, m.log)
		case <-done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (t *TLS) transport() (*http.Transport, error) {
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("etcdtest: no certificate in %s", t.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool}
	if t.ClientCertAuth {
		cert, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Transport{TLSClientConfig: cfg}, nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return string(b)
}

// freePorts returns n distinct ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// StartShared is for a TestMain: it returns $HOLDFAST_ETCD_ENDPOINTS, or
// starts a one-member etcd in a temp dir and sets that variable to its
// endpoints (so test binaries re-executed by the conformance suite use it
// too). stop stops what was started; err says why there is no etcd.
func StartShared() (endpoints string, stop func(), err error) {
	if eps := os.Getenv(EndpointsEnv); eps != "" {
		return eps, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "holdfast-etcd-test-")
	if err != nil {
		return "", func() {}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, dir, 1)
	if err != nil {
		os.RemoveAll(dir)
		return "", func() {}, err
	}
	eps := c.EndpointList()
	os.Setenv(EndpointsEnv, eps)
	return eps, func() {
		c.Stop()
		os.Unsetenv(EndpointsEnv)
		os.RemoveAll(dir)
	}, nil
}

// StartT starts a private etcd of n members for t in t.TempDir() and stops
// it when t ends. Without an etcd binary it skips t, or fails it under
// HOLDFAST_REQUIRE_SERVICES=1.
func StartT(t testing.TB, n int) *Cluster {
	t.Helper()
	if _, err := Binary(); err != nil {
		harness.SkipOrFail(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, t.TempDir(), n)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}
