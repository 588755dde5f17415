package opstest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// deb is this machine's architecture's package in dist/deb.
func deb(t *testing.T) string {
	t.Helper()
	arch := strings.TrimSpace(run(t, "dpkg", "--print-architecture"))
	p := filepath.Join(dist(), "deb", "holdfast_"+version(t)+"_"+arch+".deb")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v (make dist-deb writes it)", err)
	}
	return p
}

// dpkg runs dpkg, waiting out another dpkg or apt-get holding its lock
// (others install packages on this machine too).
func dpkg(t *testing.T, args ...string) string {
	t.Helper()
	var out string
	var err error
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		out, err = runErr("dpkg", args...)
		if err == nil || !strings.Contains(out, "lock") || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func installed() bool {
	out, err := exec.Command("dpkg-query", "-W", "-f=${db:Status-Status}", "holdfast").Output()
	return err == nil && strings.TrimSpace(string(out)) != "not-installed" && len(out) > 0
}

// leftovers are the paths a purge must remove, besides the package's files.
var leftovers = []string{
	"/etc/holdfast",
	"/etc/systemd/system/multi-user.target.wants/holdfast.service",
	"/etc/systemd/system/holdfast.service",
	"/var/lib/systemd/deb-systemd-helper-enabled/holdfast.service.dsh-also",
	"/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/holdfast.service",
	"/var/lib/systemd/deb-systemd-helper-masked/holdfast.service",
}

// TestDebianPackage installs the package on this machine with dpkg, checks
// its files and the unit, runs the packaged server as the unit would (from
// the unit's own ExecStart, as an unprivileged user in the holdfast-config
// group, with $NOTIFY_SOCKET), takes a lock with the packaged CLI, stops it
// with SIGTERM, and removes and purges the package, which must leave
// nothing behind. Safe to run again: a leftover install is purged first.
func TestDebianPackage(t *testing.T) {
	if os.Getuid() != 0 {
		if requireServices() {
			t.Fatal("installing the package needs root")
		}
		t.Skip("installing the package needs root")
	}
	pkg := deb(t)
	if installed() {
		t.Log("holdfast was installed (an earlier run?): purging it first")
		dpkg(t, "--purge", "holdfast")
	}
	t.Cleanup(func() {
		if installed() {
			_, _ = runErr("dpkg", "--purge", "holdfast")
		}
	})
	t.Logf("%s", dpkg(t, "-i", pkg))

	files := strings.Fields(run(t, "dpkg-query", "-L", "holdfast"))
	for _, f := range []string{"/usr/bin/holdfast", "/usr/bin/holdfast-backend-etcd", "/usr/bin/holdfast-backend-redis",
		"/usr/bin/holdfast-backend-postgres", "/lib/systemd/system/holdfast.service", "/etc/holdfast/holdfast.yaml", "/etc/holdfast/tokens.yaml"} {
		if !contains(files, f) {
			t.Errorf("the package has no %s", f)
		}
	}
	conffiles := run(t, "dpkg-query", "-W", "-f=${Conffiles}", "holdfast")
	for _, f := range []string{"/etc/holdfast/holdfast.yaml", "/etc/holdfast/tokens.yaml"} {
		if !strings.Contains(conffiles, f) {
			t.Errorf("%s is not a conffile (an upgrade would overwrite the operator's edits): %q", f, conffiles)
		}
	}
	gid := groupID(t, "holdfast-config")
	for f, mode := range map[string]os.FileMode{"/etc/holdfast": os.ModeDir | 0o750, "/etc/holdfast/holdfast.yaml": 0o640, "/etc/holdfast/tokens.yaml": 0o640} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != mode || owner(st) != [2]int{0, gid} {
			t.Errorf("%s: mode %s owner %v, want %s root:holdfast-config (0:%d)", f, st.Mode(), owner(st), mode, gid)
		}
	}
	if out := run(t, "/usr/bin/holdfast", "version"); strings.TrimSpace(out) != version(t) {
		t.Errorf("packaged holdfast version %q, want %s", out, version(t))
	}

	unit := "/lib/systemd/system/holdfast.service"
	checkUnit(t, unit)
	runAsTheUnit(t, unit, gid)

	// Remove: the binaries and the unit go, the conffiles stay.
	dpkg(t, "-r", "holdfast")
	for _, f := range files {
		if exists(f) && !isDir(f) && !strings.HasPrefix(f, "/etc/holdfast/") {
			t.Errorf("%s is still there after dpkg -r", f)
		}
	}
	if _, err := os.Stat("/etc/holdfast/holdfast.yaml"); err != nil {
		t.Errorf("dpkg -r removed the configuration: %v", err)
	}
	// Purge: nothing left.
	dpkg(t, "--purge", "holdfast")
	if installed() {
		t.Error("dpkg still knows holdfast after --purge")
	}
	for _, f := range append(files, leftovers...) {
		if exists(f) && (!isDir(f) || strings.HasPrefix(f, "/etc/holdfast")) {
			t.Errorf("%s is left behind after dpkg --purge", f)
		}
	}
	if out, err := exec.Command("getent", "group", "holdfast-config").Output(); err == nil {
		t.Errorf("the holdfast-config group is left behind: %s", out)
	}
}

// checkUnit checks the unit with systemd's own tools: systemd-analyze
// verify (it parses the unit and checks ExecStart's binary), and the
// hardening the issue asks for, scored by systemd-analyze security
// --offline (no running systemd here).
func checkUnit(t *testing.T, unit string) {
	t.Helper()
	if out, err := runErr("systemd-analyze", "verify", unit); err != nil {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	body, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "Restart=on-failure", "DynamicUser=yes", "ProtectSystem=strict",
		"NoNewPrivileges=yes", "LimitNOFILE=", "KillMode=mixed", "SupplementaryGroups=holdfast-config"} {
		if !strings.Contains(string(body), "\n"+want) {
			t.Errorf("the unit has no %s", want)
		}
	}
	out, err := runErr("systemd-analyze", "security", "--offline=true", unit)
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for holdfast.service: ([0-9.]+) (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security gave no exposure level:\n%s", out)
	}
	score, _ := strconv.ParseFloat(m[1], 64)
	t.Logf("systemd-analyze security: exposure %s %s", m[1], m[2])
	if score > 2.0 { // systemd's scale: 0 (best) to 10; up to 2 is "OK"
		t.Errorf("exposure level %s %s, want at most 2.0:\n%s", m[1], m[2], out)
	}
}

// runAsTheUnit runs the unit's ExecStart by hand, as systemd would have it
// (there is no running systemd here): an unprivileged user of the dynamic
// range in the holdfast-config group, no capabilities, no new privileges,
// and $NOTIFY_SOCKET. The packaged config is used as installed, except for
// its ports: the test cannot count on 7410 and 9410 being free on a shared
// machine, so HOLDFAST_ADDR and HOLDFAST_METRICS_ADDR (which win over the
// file) pick free loopback ports.
func runAsTheUnit(t *testing.T, unit string, gid int) {
	t.Helper()
	execStart := unitValue(t, unit, "ExecStart")
	argv := strings.Fields(execStart)
	// A directory the unprivileged server can reach (t.TempDir's parent is
	// private to root).
	dir, err := os.MkdirTemp("", "holdfast-opstest-notify-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := os.Chmod(sock, 0o777); err != nil { // the unprivileged server sends to it
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const uid = "61999" // in systemd's dynamic user range (61184-65519)
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + uid, "--regid=" + uid, "--groups=" + strconv.Itoa(gid),
		"--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"}, argv...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "NOTIFY_SOCKET=" + sock, "HOLDFAST_ADDR=127.0.0.1:0", "HOLDFAST_METRICS_ADDR=127.0.0.1:0"}
	cmd.Dir = "/"
	p := start(t, cmd)
	if p.line[1] != "memory" {
		t.Errorf("the packaged config serves backend=%s, want memory", p.line[1])
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1024)
	n, err := conn.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "READY=1") {
		t.Fatalf("no READY=1 on $NOTIFY_SOCKET (%v): %q", err, buf[:n])
	}
	server := "http://" + p.line[0]
	if code, out := exitCode(t, "/usr/bin/holdfast", "acquire", "ops/deb", "--server", server); code != 0 || !strings.Contains(out, "acquired       true") {
		t.Fatalf("acquire with the packaged CLI: exit %d\n%s", code, out)
	}
	checkAlertMetrics(t, metricsURL(t, p))
	if err := p.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr)
	}
	n, err = conn.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "STOPPING=1") {
		t.Errorf("no STOPPING=1 on $NOTIFY_SOCKET (%v): %q", err, buf[:n])
	}
}

// metricsURL is the /metrics address the server logged.
func metricsURL(t *testing.T, p *process) string {
	t.Helper()
	re := regexp.MustCompile(`msg="metrics serving" url=(\S+)`)
	var m []string
	eventually(t, 5*time.Second, "the metrics address in the log", func() bool {
		m = re.FindStringSubmatch(p.stderr.String())
		return m != nil
	})
	return m[1]
}

// unitValue is the value of key in the unit file's [Service] section.
func unitValue(t *testing.T, unit, key string) string {
	t.Helper()
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+"="); ok {
			return v
		}
	}
	t.Fatalf("%s has no %s=", unit, key)
	return ""
}

func groupID(t *testing.T, name string) int {
	t.Helper()
	out := run(t, "getent", "group", name)
	parts := strings.Split(strings.TrimSpace(out), ":")
	gid, err := strconv.Atoi(parts[2])
	if err != nil {
		t.Fatalf("getent group %s: %q", name, out)
	}
	return gid
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// exists reports whether f is there, a dangling symlink included.
func exists(f string) bool { _, err := os.Lstat(f); return err == nil }

// isDir reports whether f is a directory, through symlinks (/lib is one on
// a merged-/usr system): shared directories stay after a purge.
func isDir(f string) bool { st, err := os.Stat(f); return err == nil && st.IsDir() }
