package opstest

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var alertRules = filepath.Join(root, "deploy", "prometheus", "holdfast-alerts.yaml")

// TestAlertRules: promtool (Prometheus' own, pinned in tools/promtool)
// accepts the rules and its unit tests of them pass (the alerts fire on the
// series holdfast exposes and stay quiet below their thresholds).
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool")
	out := run(t, promtool, "check", "rules", alertRules)
	t.Log(strings.TrimSpace(out))
	out = run(t, promtool, "test", "rules", strings.TrimSuffix(alertRules, ".yaml")+".test.yaml")
	t.Log(strings.TrimSpace(out))
}

// checkAlertMetrics: every holdfast and process series the alert rules
// read is one a real server exposes at url (so a renamed metric cannot
// leave an alert that never fires). The server has served a call by now.
func checkAlertMetrics(t *testing.T, url string) {
	t.Helper()
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b((?:holdfast|process)_[a-z_]+)\b`).FindAllString(string(rules), -1) {
		names[m] = true
	}
	exposed := get(t, url)
	var missing, found []string
	for n := range names {
		if regexp.MustCompile(`(?m)^` + n + `[{ ]`).MatchString(exposed) {
			found = append(found, n)
		} else {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	sort.Strings(found)
	if len(missing) > 0 {
		t.Errorf("the alert rules read series a holdfast server does not expose: %v", missing)
	}
	t.Logf("the alert rules' series, all exposed by the packaged server: %v", found)
}
