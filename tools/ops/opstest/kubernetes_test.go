package opstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kubeVersion is the Kubernetes release whose schemas the manifests are
// validated against: the newest kubectl-validate v0.0.4 embeds. The
// manifests use nothing newer (preStop sleep is in 1.30).
const kubeVersion = "1.30"

var kubeDir = filepath.Join(root, "deploy", "kubernetes")

// build is kustomize build deploy/kubernetes, as one file and as objects.
func build(t *testing.T) (string, []map[string]any) {
	t.Helper()
	out := run(t, tool(t, "kustomize"), "build", kubeDir)
	p := filepath.Join(t.TempDir(), "holdfast.yaml")
	if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	var objs []map[string]any
	for _, doc := range strings.Split(out, "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("kustomize build output: %v", err)
		}
		objs = append(objs, o)
	}
	return p, objs
}

// validate runs kubectl-validate, which checks every object against the
// OpenAPI schemas of that Kubernetes release, embedded in the binary
// (nothing is downloaded).
func validate(t *testing.T, file string) (int, string) {
	t.Helper()
	return exitCode(t, tool(t, "kubectl-validate"), file, "--version", kubeVersion)
}

// TestKubernetesManifests: kustomize builds deploy/kubernetes, and
// Kubernetes' own schemas accept every object; a manifest with an unknown
// field is refused (so the check can fail).
func TestKubernetesManifests(t *testing.T) {
	file, objs := build(t)
	if code, out := validate(t, file); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("kubectl-validate: exit %d\n%s", code, out)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, fmt.Sprintf("%s/%s", o["kind"], str(o, "metadata", "name")))
	}
	t.Logf("kustomize build: %d objects, valid for Kubernetes %s: %s", len(objs), kubeVersion, strings.Join(kinds, " "))

	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, []byte(strings.Replace(string(body), "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := validate(t, broken); code == 0 {
		t.Fatalf("kubectl-validate accepted a misspelt field:\n%s", out)
	}
}

// TestKubernetesDeployment checks what the manifests promise operators:
// the image at VERSION, rolling updates that never drop below N ready
// servers, probes on the health service, a grace period that covers the
// graceful shutdown, the restricted security context, a disruption budget,
// network policies, the Secrets and Prometheus annotations.
func TestKubernetesDeployment(t *testing.T) {
	_, objs := build(t)
	get := func(kind, name string) map[string]any {
		for _, o := range objs {
			if o["kind"] == kind && str(o, "metadata", "name") == name {
				return o
			}
		}
		t.Fatalf("no %s %s in kustomize build", kind, name)
		return nil
	}
	d := get("Deployment", "holdfast")
	if ns := str(d, "metadata", "namespace"); ns != "holdfast" {
		t.Errorf("namespace %q", ns)
	}
	spec := d["spec"].(map[string]any)
	ru := spec["strategy"].(map[string]any)["rollingUpdate"].(map[string]any)
	if fmt.Sprint(ru["maxUnavailable"]) != "0" || fmt.Sprint(ru["maxSurge"]) != "1" {
		t.Errorf("rolling update %v: want maxUnavailable 0, maxSurge 1", ru)
	}
	pod := spec["template"].(map[string]any)["spec"].(map[string]any)
	c := pod["containers"].([]any)[0].(map[string]any)
	if img := c["image"]; img != "holdfast:"+version(t) {
		t.Errorf("image %v, want holdfast:%s", img, version(t))
	}
	for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
		cmd := fmt.Sprint(c[probe].(map[string]any)["exec"].(map[string]any)["command"])
		if !strings.HasPrefix(cmd, "[holdfast health") {
			t.Errorf("%s runs %s, want holdfast health", probe, cmd)
		}
		if live := strings.Contains(cmd, "--live"); live != (probe == "livenessProbe") {
			t.Errorf("%s: --live %t (only liveness passes on NOT_SERVING)", probe, live)
		}
	}
	grace := pod["terminationGracePeriodSeconds"].(float64)
	preStop := c["lifecycle"].(map[string]any)["preStop"].(map[string]any)["sleep"].(map[string]any)["seconds"].(float64)
	cfg := configFile(t, get("ConfigMap", str(find(t, pod["volumes"], "config"), "configMap", "name")))
	if !strings.Contains(cfg, "shutdown-timeout: 10s") || grace < preStop+10+5 {
		t.Errorf("grace period %vs does not cover preStop %vs + shutdown-timeout 10s + the plugin's stop", grace, preStop)
	}
	if !strings.Contains(cfg, "backend: etcd") {
		t.Errorf("the servers' config does not use etcd:\n%s", cfg)
	}
	sc := c["securityContext"].(map[string]any)
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false || fmt.Sprint(sc["capabilities"]) != "map[drop:[ALL]]" {
		t.Errorf("container securityContext %v", sc)
	}
	if psc := pod["securityContext"].(map[string]any); psc["runAsNonRoot"] != true || psc["runAsUser"] != float64(65532) {
		t.Errorf("pod securityContext %v", psc)
	}
	if a := str(spec["template"].(map[string]any), "metadata", "annotations"); !strings.Contains(a, "prometheus.io/scrape:true") {
		t.Errorf("pod annotations %s: no prometheus.io/scrape", a)
	}
	for _, v := range []string{"tls", "tokens"} {
		if find(t, pod["volumes"], v)["secret"] == nil {
			t.Errorf("volume %s is not a Secret", v)
		}
	}
	get("Secret", "holdfast-tokens")
	get("Service", "holdfast")
	for _, name := range []string{"holdfast", "etcd"} {
		get("PodDisruptionBudget", name)
		get("NetworkPolicy", name)
	}

	// The reference etcd is the version the project tests against.
	etcdVersion := goModVersion(t, filepath.Join(root, "tools", "etcd", "go.mod"), "go.etcd.io/etcd/server/v3")
	ss := get("StatefulSet", "etcd")
	img := ss["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"]
	if !strings.HasSuffix(fmt.Sprint(img), ":"+etcdVersion) {
		t.Errorf("etcd image %v, want the tested etcd %s (tools/etcd/go.mod)", img, etcdVersion)
	}
}

// configFile is holdfast.yaml in the ConfigMap.
func configFile(t *testing.T, cm map[string]any) string {
	t.Helper()
	s, ok := cm["data"].(map[string]any)["holdfast.yaml"].(string)
	if !ok {
		t.Fatalf("ConfigMap %v has no holdfast.yaml", cm["metadata"])
	}
	return s
}

// find is the element of list (volumes) named name.
func find(t *testing.T, list any, name string) map[string]any {
	t.Helper()
	for _, x := range list.([]any) {
		if m := x.(map[string]any); m["name"] == name {
			return m
		}
	}
	t.Fatalf("no %q in %v", name, list)
	return nil
}

// str is the value at path in o, printed ("" when absent); maps print
// sorted as key:value pairs.
func str(o map[string]any, path ...string) string {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	if cur == nil {
		return ""
	}
	return fmt.Sprint(cur)
}

// goModVersion is the version go.mod requires of module, without "v".
func goModVersion(t *testing.T, gomod, module string) string {
	t.Helper()
	b, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("%s does not require %s", gomod, module)
	return ""
}
