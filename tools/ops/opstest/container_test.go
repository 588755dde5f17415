package opstest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// podman runs podman as root with the flags this kind of machine needs:
// runc (crun refuses its hybrid cgroup hierarchy) and resource limits at or
// below the sandbox's own (it may not raise them: no CAP_SYS_RESOURCE, and
// podman's defaults ask for more).
type podman struct {
	t    *testing.T
	path string
}

func (p podman) cmd(args ...string) *exec.Cmd {
	return exec.Command(p.path, append([]string{"--runtime", "runc"}, args...)...)
}

var limits = []string{"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=2048:2048"}

func (p podman) run(args ...string) string {
	p.t.Helper()
	out, err := p.cmd(args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newPodman loads the image archive and returns podman and the image, or
// skips saying plainly why containers cannot run on this machine (the
// archive itself is checked by TestImageArchive either way).
func newPodman(t *testing.T) (podman, string) {
	t.Helper()
	path, err := exec.LookPath("podman")
	if err != nil {
		if requireServices() {
			t.Fatal("podman is not installed (scripts/setup.d/70-ops.sh installs it)")
		}
		t.Skip("podman is not installed: the image is not run here (make test-ops installs it)")
	}
	p := podman{t: t, path: path}
	out, err := p.cmd("load", "-q", "-i", archive(t)).CombinedOutput()
	if err != nil {
		t.Skipf("containers cannot run on this machine: podman load failed: %v\n%s\n(the archive is checked by TestImageArchive)", err, out)
	}
	img := "localhost/holdfast:" + version(t)
	t.Cleanup(func() { _ = p.cmd("rmi", "--force", img).Run() })
	// A first run proves the machine can run containers at all.
	if out, err := p.cmd(append(append([]string{"run", "--rm", "--network", "none"}, limits...),
		"--entrypoint", "/usr/local/bin/holdfast", img, "version")...).CombinedOutput(); err != nil {
		t.Skipf("containers cannot run on this machine: %v\n%s\n(the archive is checked by TestImageArchive)", err, out)
	} else if strings.TrimSpace(string(out)) != version(t) {
		t.Fatalf("holdfast version in the container: %q, want %s", out, version(t))
	}
	return p, img
}

func name(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// container is one started container, removed at cleanup.
func (p podman) start(t *testing.T, args ...string) string {
	t.Helper()
	n := name("holdfast-opstest-")
	p.run(append(append([]string{"run", "-d", "--name", n}, limits...), args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := p.cmd("logs", n).CombinedOutput()
			t.Logf("container %s logs:\n%s", n, out)
		}
		_ = p.cmd("rm", "-f", "-t", "0", n).Run()
	})
	return n
}

// waitServing polls the container's log for the readiness line.
func (p podman) waitServing(t *testing.T, n string) []string {
	t.Helper()
	var m []string
	eventually(t, time.Minute, "readiness line in the container's log", func() bool {
		out, _ := p.cmd("logs", n).CombinedOutput()
		m = readiness.FindStringSubmatch(string(out))
		return m != nil
	})
	return m[1:]
}

// hostCLI is the image's own holdfast, extracted, run on the host as a
// client.
func hostCLI(t *testing.T) string {
	t.Helper()
	img, _ := image(t)
	dir := t.TempDir()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[len(layers)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	untar(t, rc, dir)
	return filepath.Join(dir, "usr", "local", "bin", "holdfast")
}

// TestImageRuns: the image as an operator runs it, read-only root, no
// capabilities, its port published on the host's loopback only. It serves
// the memory backend as user 65532 on 0.0.0.0 inside the container and
// warns that it has neither TLS nor tokens; the host's CLI takes a lock
// through the published port; SIGTERM (podman stop) shuts it down
// gracefully: a waiter is told unavailable, the log says so, exit 0.
func TestImageRuns(t *testing.T) {
	p, img := newPodman(t)
	cli := hostCLI(t)
	n := p.start(t, "--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges",
		"-p", "127.0.0.1::7410", img)
	line := p.waitServing(t, n)
	if line[0] != "[::]:7410" && line[0] != "0.0.0.0:7410" {
		t.Errorf("listening on %s in the container, want 0.0.0.0:7410", line[0])
	}
	logs := p.run("logs", n)
	if !strings.Contains(logs, `level=WARN msg="serving without TLS or tokens on a non-loopback address`) {
		t.Errorf("no start-up warning about serving without TLS or tokens:\n%s", logs)
	}
	pid := p.run("inspect", "--format", "{{.State.Pid}}", n)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil || !strings.Contains(string(status), "\nUid:\t65532\t65532\t65532\t65532\n") {
		t.Errorf("the container's server does not run as 65532 (%v):\n%s", err, status)
	}
	hostPort := p.run("port", n, "7410/tcp")
	if !strings.HasPrefix(hostPort, "127.0.0.1:") {
		t.Fatalf("published on %s, want the host's loopback", hostPort)
	}
	server := "http://" + hostPort
	if code, out := exitCode(t, cli, "acquire", "ops/container", "--ttl", "1m", "--server", server); code != 0 || !strings.Contains(out, "acquired       true") {
		t.Fatalf("acquire through the container's port: exit %d\n%s", code, out)
	}
	if code, out := exitCode(t, cli, "health", "--server", server); code != 0 || strings.TrimSpace(out) != "SERVING" {
		t.Fatalf("health: exit %d %q", code, out)
	}
	// A waiter on the held key is queued on the server when it stops.
	waiter := exec.Command(cli, "acquire", "ops/container", "--wait", "1m", "--server", server)
	var wout strings.Builder
	waiter.Stdout, waiter.Stderr = &wout, &wout
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the waiter queued", func() bool {
		_, out := exitCode(t, cli, "inspect", "ops/container", "--server", server, "-o", "json")
		return strings.Contains(out, `"waiters": 1`)
	})

	stopped := time.Now()
	p.run("stop", "--time", "20", n) // SIGTERM, SIGKILL only after 20s
	took := time.Since(stopped)
	werr := waiter.Wait()
	if code := waiter.ProcessState.ExitCode(); code != 69 {
		t.Errorf("the waiter at shutdown: exit %d (%v), want 69 (unavailable)\n%s", code, werr, wout.String())
	}
	if code := p.run("inspect", "--format", "{{.State.ExitCode}}", n); code != "0" {
		t.Errorf("exit code after SIGTERM %s, want 0", code)
	}
	logs = p.run("logs", n)
	for _, want := range []string{`msg="shutting down" cause="terminated signal received"`, "msg=stopped"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %s:\n%s", want, logs)
		}
	}
	if took > 15*time.Second {
		t.Errorf("podman stop took %s: the server did not stop on SIGTERM", took)
	}
	t.Logf("stopped gracefully %s after SIGTERM", took.Round(time.Millisecond))
}

// TestImageServesEtcd: the image's etcd plugin, found next to holdfast,
// over a real etcd (scripts/etcd.sh, on the host's loopback; the container
// shares the host's network and listens on loopback too).
func TestImageServesEtcd(t *testing.T) {
	p, img := newPodman(t)
	endpoints := startEtcd(t)
	n := p.start(t, "--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges", "--network", "host",
		"-e", "HOLDFAST_ADDR=127.0.0.1:0", img,
		"--backend", "etcd", "--backend-opt", "endpoints="+endpoints, "--backend-opt", "prefix=/"+name("opstest-")+"/")
	line := p.waitServing(t, n)
	if line[1] != "etcd" || line[2] != "true" || line[3] != "true" {
		t.Fatalf("readiness %v, want backend=etcd shared=true durable=true", line)
	}
	cli := hostCLI(t)
	if code, out := exitCode(t, cli, "acquire", "ops/etcd", "--server", "http://"+line[0]); code != 0 {
		t.Fatalf("acquire on etcd through the container: exit %d\n%s", code, out)
	}
	p.run("stop", "--time", "20", n)
	if code := p.run("inspect", "--format", "{{.State.ExitCode}}", n); code != "0" {
		t.Errorf("exit code after SIGTERM %s, want 0", code)
	}
}

// startEtcd starts a throw-away etcd with the project's script and returns
// its client URL; it is stopped (by PID) at cleanup.
func startEtcd(t *testing.T) string {
	t.Helper()
	script := filepath.Join(root, "scripts", "etcd.sh")
	dir := t.TempDir()
	cmd := exec.Command(script, "start", dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s start: %v", script, err)
	}
	t.Cleanup(func() { _ = exec.Command(script, "stop", dir).Run() })
	k, v, ok := strings.Cut(strings.TrimSpace(string(out)), "=")
	if !ok || k != "HOLDFAST_ETCD_ENDPOINTS" {
		t.Fatalf("%s start said %q", script, out)
	}
	return v
}
