package opstest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nspawnRoot is the minimal Debian that scripts/setup.d/70-ops.sh makes
// for booting under systemd-nspawn.
func nspawnRoot(t *testing.T) string {
	t.Helper()
	if r := os.Getenv("HOLDFAST_OPS_NSPAWN_ROOT"); r != "" {
		return r
	}
	out, err := exec.Command("sh", "-c", `. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	return "/var/cache/holdfast/nspawn-" + strings.TrimSpace(string(out))
}

// machine is a Debian booted with systemd as its PID 1, in a container of
// its own (systemd-nspawn: own PID, mount and network namespaces, only a
// loopback), its root an overlay thrown away when it stops.
type machine struct {
	t      *testing.T
	nspawn *exec.Cmd
	init   int // the container's systemd, as this machine sees its PID
	done   chan error
}

// boot starts the machine with the package bound in at /root/holdfast.deb
// and waits until its systemd has started everything.
func boot(t *testing.T, deb string) *machine {
	t.Helper()
	root := nspawnRoot(t)
	if _, err := os.Stat(root + "/.holdfast-ready"); err != nil {
		if requireServices() {
			t.Fatalf("no Debian to boot at %s (scripts/setup.d/70-ops.sh makes it): %v", root, err)
		}
		t.Skipf("no Debian to boot at %s (scripts/setup.d/70-ops.sh makes it)", root)
	}
	cmd := exec.Command("systemd-nspawn", "--quiet", "--directory", root, "--boot", "--volatile=overlay",
		"--private-network", "--register=no", "--keep-unit", "--console=passive",
		"--bind-ro="+deb+":/root/holdfast.deb")
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &machine{t: t, nspawn: cmd, done: make(chan error, 1)}
	go func() { m.done <- cmd.Wait() }()
	t.Cleanup(func() {
		m.stop()
		if t.Failed() {
			t.Logf("systemd-nspawn:\n%s", log.String())
		}
	})
	eventually(t, 30*time.Second, "the container's systemd", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		m.init, _ = strconv.Atoi(f[0])
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", m.init))
		return strings.TrimSpace(string(comm)) == "systemd"
	})
	// "running", or "degraded" when a unit of the minimal system failed;
	// either way start-up is over. Before its manager is up (and while it
	// execs) systemctl answers "offline".
	var state string
	eventually(t, time.Minute, "the container's start-up", func() bool {
		state, _ = m.sh("systemctl is-system-running --wait")
		return state == "running" || state == "degraded"
	})
	return m
}

// sh runs a shell command in the machine and returns its trimmed output
// and exit status.
func (m *machine) sh(script string) (string, int) {
	m.t.Helper()
	out, err := exec.Command("nsenter", "--target", strconv.Itoa(m.init), "--all", "--", "/bin/sh", "-c", script).CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !asExit(err, &ee) {
			m.t.Fatalf("nsenter: %v", err)
		}
		code = ee.ExitCode()
	}
	return strings.TrimSpace(string(out)), code
}

// must runs script in the machine and fails the test unless it exits 0.
func (m *machine) must(script string) string {
	m.t.Helper()
	out, code := m.sh(script)
	if code != 0 {
		m.t.Fatalf("in the container, %q: exit %d\n%s", script, code, out)
	}
	return out
}

// stop powers the machine off (nspawn turns SIGTERM into the container's
// shutdown), by PID; SIGKILL if it has not stopped within 30s.
func (m *machine) stop() {
	if m.nspawn.ProcessState != nil {
		return
	}
	_ = m.nspawn.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.done:
		if err != nil {
			m.t.Logf("systemd-nspawn: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = m.nspawn.Process.Kill()
		m.t.Logf("systemd-nspawn did not stop within 30s of SIGTERM; killed: %v", <-m.done)
	}
}

// TestDebianPackageUnderSystemd: the package installed on a Debian whose
// PID 1 is systemd. Installing starts the unit, and Type=notify means it
// is active only once the server serves; it runs as a dynamic user in
// holdfast-config; a lock is taken; a killed server is restarted
// (Restart=on-failure); systemctl stop is a graceful stop with exit 0; the
// purge leaves neither the configuration, the group nor the unit.
func TestDebianPackageUnderSystemd(t *testing.T) {
	if os.Getuid() != 0 {
		if requireServices() {
			t.Fatal("systemd-nspawn needs root")
		}
		t.Skip("systemd-nspawn needs root")
	}
	m := boot(t, deb(t))
	m.must("dpkg -i /root/holdfast.deb")
	if state, _ := m.sh("systemctl is-active holdfast"); state != "active" {
		t.Fatalf("holdfast.service is %q after the install\n%s", state, m.must("journalctl -u holdfast --no-pager -o cat"))
	}
	if status := m.must("systemctl show -p StatusText --value holdfast"); status != "serving on 127.0.0.1:7410 (backend memory)" {
		t.Errorf("the unit's status %q: no READY/STATUS from the server", status)
	}
	if out := m.must("holdfast acquire ops/systemd --ttl 1m"); !strings.Contains(out, "acquired       true") {
		t.Fatalf("acquire through the service:\n%s", out)
	}
	pid := m.must("systemctl show -p MainPID --value holdfast")
	status := m.must("grep -E '^(Uid|Groups):' /proc/" + pid + "/status")
	gid := m.must("getent group holdfast-config | cut -d: -f3")
	var uid int
	var groups []string
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "Uid:":
			uid, _ = strconv.Atoi(f[1])
		case len(f) > 0 && f[0] == "Groups:":
			groups = f[1:]
		}
	}
	if uid < 61184 || uid > 65519 || !contains(groups, gid) {
		t.Errorf("the server runs as %q; want a dynamic user (61184-65519) in holdfast-config (%s)", status, gid)
	}
	t.Logf("holdfast.service: %s; %s", m.must("systemctl show -p StatusText --value holdfast"), strings.ReplaceAll(status, "\n", "; "))

	// Restart=on-failure: a server killed by a signal comes back.
	m.must("kill -KILL " + pid)
	eventually(t, 20*time.Second, "holdfast.service restarted after SIGKILL", func() bool {
		now, _ := m.sh("systemctl is-active holdfast; systemctl show -p MainPID --value holdfast")
		f := strings.Fields(now)
		return len(f) == 2 && f[0] == "active" && f[1] != pid && f[1] != "0"
	})

	m.must("systemctl stop holdfast")
	if res := m.must("systemctl show -p Result -p ExecMainStatus holdfast"); res != "Result=success\nExecMainStatus=0" {
		t.Errorf("after systemctl stop: %q, want a clean exit", res)
	}
	journal := m.must("journalctl -u holdfast --no-pager -o cat")
	for _, want := range []string{`msg="shutting down" cause="terminated signal received"`, "msg=stopped"} {
		if !strings.Contains(journal, want) {
			t.Errorf("the journal does not say %s:\n%s", want, journal)
		}
	}

	m.must("dpkg --purge holdfast")
	if out, code := m.sh("ls /etc/holdfast; getent group holdfast-config; systemctl cat holdfast.service"); code == 0 || strings.Contains(out, "holdfast.yaml") || strings.Contains(out, "holdfast-config:") {
		t.Errorf("left behind after the purge:\n%s", out)
	}
}
