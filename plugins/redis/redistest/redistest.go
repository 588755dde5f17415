// Package redistest gives tests a real Redis: the one named by
// HOLDFAST_REDIS_ADDR (started by scripts/redis.sh), or a redis-server from
// PATH that the test starts itself on a free loopback port, without
// persistence, in a temporary directory. No mocks.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/harness"
)

// EnvAddr names the environment variable holding a running Redis's address.
const EnvAddr = "HOLDFAST_REDIS_ADDR"

// Addr returns the address of a Redis for t: HOLDFAST_REDIS_ADDR, or a
// server started for t and stopped when t ends. Without either it skips t,
// or fails it when HOLDFAST_REQUIRE_SERVICES=1.
func Addr(t testing.TB) string {
	t.Helper()
	if a := os.Getenv(EnvAddr); a != "" {
		return a
	}
	return Start(t).Addr
}

// Server is a redis-server process owned by a test.
type Server struct {
	Addr string
	Port int
	Dir  string
	args []string
	conf string // config file given first, for Sentinel
	// readyLog is the log line that says the server serves; empty means
	// redis-server's "Ready to accept connections".
	readyLog string
	// TLS: serve TLS only, on Port (the args carry the certificate options).
	TLS  bool
	cmd  *exec.Cmd
	done chan struct{} // closed when the log reader has finished
}

// Start starts redis-server from PATH for t on a free port, with no
// persistence and extra command-line arguments args (for example
// "--requirepass", "x"). It is stopped (by its PID) when t ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		harness.SkipOrFail(t, "redis-server not in PATH and "+EnvAddr+" unset: run scripts/setup.sh, or scripts/redis.sh start DIR and export "+EnvAddr)
	}
	return startServer(t, &Server{Dir: t.TempDir(), args: args})
}

func startServer(t testing.TB, s *Server) *Server {
	t.Helper()
	var err error
	for range 5 {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		if err = s.start(port); err == nil {
			t.Cleanup(func() { s.Stop(t) })
			return s
		}
	}
	t.Fatalf("start redis-server: %v", err)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs redis-server on port and waits for its "Ready to accept
// connections" log line (an event, with a deadline).
func (s *Server) start(port int) error {
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	portArgs := []string{"--port", strconv.Itoa(port)}
	if s.TLS {
		portArgs = []string{"--port", "0", "--tls-port", strconv.Itoa(port)}
	}
	args = append(args, portArgs...)
	args = append(args, []string{
		"--bind", "127.0.0.1", "--dir", s.Dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
	}...)
	args = append(args, s.args...)
	cmd := exec.Command("redis-server", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	readyLog := s.readyLog
	if readyLog == "" {
		readyLog = "Ready to accept connections"
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	var tail []string
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if !signalled {
				tail = append(tail, line)
				if strings.Contains(line, readyLog) {
					signalled = true
					close(ready)
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case <-ready:
		s.cmd, s.done, s.Port = cmd, done, port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return nil
	case <-done:
		_ = cmd.Wait()
		return fmt.Errorf("redis-server exited on port %d: %s", port, strings.Join(tail, "\n"))
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-done
		return fmt.Errorf("redis-server not ready on port %d within 10s", port)
	}
}

// Stop stops the server (SIGTERM by PID, SIGKILL after 10 s) and waits
// for it. Stopping a stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	timer := time.AfterFunc(10*time.Second, func() { _ = s.cmd.Process.Kill() })
	_ = s.cmd.Wait()
	timer.Stop()
	<-s.done
	s.cmd = nil
}

// Kill stops the server with SIGKILL, as a crash would.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	<-s.done
	s.cmd = nil
}

// Restart stops the server and starts it again on the same port, empty
// (there is no persistence unless the test's args asked for it).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	if err := s.start(s.Port); err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
}

// StartCluster starts a Redis Cluster of n masters (no replicas) for t, each
// a redis-server on free ports (client and cluster bus), joined with
// redis-cli --cluster create; it returns once every node reports
// cluster_state:ok. The servers stop when t ends.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		harness.SkipOrFail(t, "redis-cli not in PATH: run scripts/setup.sh")
	}
	nodes := make([]*Server, n)
	addrs := make([]string, n)
	for i := range nodes {
		bus, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "2000")
		addrs[i] = nodes[i].Addr
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range nodes {
		for {
			out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "cluster", "info").Output()
			if err == nil && strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok within 20s: %s %v", s.Addr, out, err)
			}
			time.Sleep(50 * time.Millisecond) // poll the node's state, with a deadline
		}
	}
	return nodes
}

// StartTLS starts redis-server for t serving TLS only, with args carrying
// the certificate options (--tls-cert-file, --tls-key-file,
// --tls-ca-cert-file, --tls-auth-clients ...).
func StartTLS(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		harness.SkipOrFail(t, "redis-server not in PATH: run scripts/setup.sh")
	}
	return startServer(t, &Server{Dir: t.TempDir(), args: args, TLS: true})
}

// StartSentinel starts one Redis Sentinel for t, on a free port, monitoring
// master under name (quorum 1). It returns once the Sentinel serves.
func StartSentinel(t testing.TB, master *Server, name string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		harness.SkipOrFail(t, "redis-server not in PATH: run scripts/setup.sh")
	}
	dir := t.TempDir()
	conf := dir + "/sentinel.conf"
	body := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\n", name, master.Port, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServer(t, &Server{Dir: dir, conf: conf, args: []string{"--sentinel"}, readyLog: "+monitor master"})
}
