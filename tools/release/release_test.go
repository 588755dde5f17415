package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// The repository itself: one version everywhere. This is the test that
// keeps VERSION, the go.mod files, the Go constants, sdk-ts/package.json
// (and its lock) and sdk-python/pyproject.toml in step.
func TestRepositoryIsOneRelease(t *testing.T) {
	r, err := openRepo("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(checkRelease(r)...); err != nil {
		t.Fatalf("release %s:\n%v", r.Version, err)
	}
	shipped := 0
	for _, m := range r.Modules {
		if m.Shipped {
			shipped++
		}
	}
	// core, proto, server, sdk-go, conformance and the plugins at least.
	if shipped < 6 {
		t.Fatalf("only %d shipped modules found in %+v", shipped, r.Modules)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]string{"0.1.0\n": "0.1.0", " 1.2.3-rc.1 ": "1.2.3-rc.1"} {
		if got, err := parseVersion(in); err != nil || got != want {
			t.Errorf("parseVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"v0.1.0", "0.1", "0.1.0.0", "", "latest", "01.2.3"} {
		if got, err := parseVersion(in); err == nil {
			t.Errorf("parseVersion(%q) = %q, want an error", in, got)
		}
	}
}

// fixture writes a small repository: modules a (shipped, requires b),
// b (shipped), c (in go.work, not shipped: named like chaos), and bench
// (outside go.work, with a replace it needs), every version constant and
// SDK manifest at 0.0.1, and a git history.
func fixture(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("VERSION", "0.0.1\n")
	write("LICENSE", "the license\n")
	write("go.work", "go 1.26\n\nuse (\n\t./a\n\t./b\n\t./chaos\n)\n")
	write("a/go.mod", "module "+rootPath+"/a\n\ngo 1.26\n\nrequire "+rootPath+"/b v0.0.0\n\nreplace "+rootPath+"/b => ../b\n")
	write("a/a.go", "// Package a says hello through b.\npackage a\n\nimport \"github.com/holdfast/holdfast/b\"\n\nfunc Hello() string { return b.Hello() }\n")
	write("a/untracked.txt", "ships: a commit of the tree would hold it\n")
	write("a/.gitignore", "ignored.txt\n")
	write("a/ignored.txt", "never ships\n")
	write("a/nested/go.mod", "module "+rootPath+"/a/nested\n\ngo 1.26\n")
	write("a/nested/n.go", "package nested\n")
	write("b/go.mod", "module "+rootPath+"/b\n\ngo 1.26\n")
	write("b/b.go", "// Package b says hello.\npackage b\n\nfunc Hello() string { return \"hello from b\" }\n")
	write("b/LICENSE", "b's own license\n")
	write("chaos/go.mod", "module "+rootPath+"/chaos\n\ngo 1.26\n\nrequire "+rootPath+"/a v0.0.0\n\nreplace "+rootPath+"/a => ../a\n")
	write("bench/go.mod", "module "+rootPath+"/bench\n\ngo 1.26\n\nrequire "+rootPath+"/b v0.0.0\n\nreplace "+rootPath+"/b => ../b\n")
	for _, c := range versionConsts {
		write(c.File, "package x\n\n// "+c.Name+" is the release.\nconst "+c.Name+" = \"0.0.1\"\n")
	}
	write(npmManifest, "{\n  \"name\": \"@holdfast/sdk\",\n  \"version\": \"0.0.1\",\n  \"dependencies\": {\n    \"dep\": {\n      \"version\": \"9.9.9\"\n    }\n  }\n}\n")
	write(npmLock, "{\n  \"name\": \"@holdfast/sdk\",\n  \"version\": \"0.0.1\",\n  \"lockfileVersion\": 3,\n  \"packages\": {\n    \"\": {\n      \"name\": \"@holdfast/sdk\",\n      \"version\": \"0.0.1\"\n    },\n    \"node_modules/dep\": {\n      \"version\": \"9.9.9\"\n    }\n  }\n}\n")
	write(pyprojectToml, "[build-system]\nrequires = [\"setuptools\"]\n\n[project]\nname = \"holdfast\"\nversion = \"0.0.1\"\n\n[tool.other]\nversion = \"9.9.9\"\n")
	git(t, root, "init", "-q")
	git(t, root, "add", "-A")
	git(t, root, "rm", "-q", "--cached", "a/untracked.txt")
	git(t, root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "fixture")
	return root
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func modFile(t *testing.T, root, dir string) *modfile.File {
	t.Helper()
	p := filepath.Join(root, dir, "go.mod")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(p, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSetVersion(t *testing.T) {
	root := fixture(t)
	r, err := openRepo(filepath.Join(root, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := checkRelease(r); len(errs) == 0 {
		t.Fatal("check passed on a fixture with v0.0.0 requires and replace lines")
	}
	var out bytes.Buffer
	if err := setVersion(r, "0.2.0", &out); err != nil {
		t.Fatalf("set-version: %v\n%s", err, out.String())
	}

	for _, dir := range []string{"a", "chaos"} {
		f := modFile(t, root, dir)
		if len(f.Require) != 1 || f.Require[0].Mod.Version != "v0.2.0" {
			t.Errorf("%s/go.mod requires %+v, want its sibling at v0.2.0", dir, f.Require)
		}
		if len(f.Replace) != 0 {
			t.Errorf("%s/go.mod still replaces %+v", dir, f.Replace)
		}
	}
	bench := modFile(t, root, "bench")
	if bench.Require[0].Mod.Version != "v0.2.0" || len(bench.Replace) != 1 {
		t.Errorf("bench/go.mod: requires %+v replaces %+v; want b at v0.2.0, its replace kept (it is built outside go.work)", bench.Require, bench.Replace)
	}
	r, err = openRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != "0.2.0" {
		t.Errorf("VERSION says %q after set-version 0.2.0", r.Version)
	}
	if err := errors.Join(checkRelease(r)...); err != nil {
		t.Errorf("check after set-version: %v", err)
	}
	// The lookalike version fields stay: only the root package's change.
	for file, keep := range map[string]string{npmManifest: `"version": "9.9.9"`, npmLock: `"version": "9.9.9"`, pyprojectToml: `version = "9.9.9"`} {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte(keep)) {
			t.Errorf("%s lost %s:\n%s", file, keep, data)
		}
	}

	work := readFixture(t, root, "go.work")
	for _, dir := range []string{"a", "b", "chaos"} {
		if want := rootPath + "/" + dir + " v0.2.0 => ./" + dir; !strings.Contains(work, want) {
			t.Errorf("go.work lacks %q:\n%s", want, work)
		}
	}

	out.Reset()
	if err := setVersion(r, "0.2.0", &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "(0 files changed)") {
		t.Errorf("a second set-version changed files:\n%s", out.String())
	}
	if err := setVersion(r, "v0.3.0", &out); err == nil {
		t.Error("set-version v0.3.0 (with the v) was accepted")
	}
	if err := setVersion(r, "0.3.0", &out); err != nil {
		t.Fatal(err)
	}
	if work := readFixture(t, root, "go.work"); strings.Contains(work, "v0.2.0") || strings.Count(work, "v0.3.0 =>") != 3 {
		t.Errorf("go.work after set-version 0.3.0:\n%s", work)
	}
}

func readFixture(t *testing.T, root, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestCheckNamesEveryDisagreement(t *testing.T) {
	root := fixture(t)
	r, err := openRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := setVersion(r, "0.2.0", new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	edit := func(rel, from, to string) {
		p := filepath.Join(root, rel)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Replace(data, []byte(from), []byte(to), 1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit(pyprojectToml, `version = "0.2.0"`, `version = "0.2.1"`)
	edit(npmLock, `"version": "0.2.0"`, `"version": "0.1.9"`)
	edit(versionConsts[0].File, `"0.2.0"`, `"0.2.0-dev"`)
	edit("b/go.mod", "go 1.26\n", "go 1.26\n\nreplace golang.org/x/mod => ../mod\n")
	errs := checkRelease(r)
	joined := errors.Join(errs...).Error()
	for _, want := range []string{pyprojectToml, npmLock, versionConsts[0].File, "b/go.mod replaces golang.org/x/mod"} {
		if !strings.Contains(joined, want) {
			t.Errorf("check did not name %s:\n%s", want, joined)
		}
	}
	if len(errs) != 4 {
		t.Errorf("check found %d problems, want 4:\n%s", len(errs), joined)
	}
}

func TestGoProxy(t *testing.T) {
	root := fixture(t)
	r, err := openRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "goproxy")
	if err := writeGoProxy(r, out, new(bytes.Buffer)); err == nil {
		t.Fatal("goproxy wrote a release whose go.mod files still replace their siblings")
	}
	if err := setVersion(r, "0.2.0", new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := writeGoProxy(r, out, &log); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "/chaos") || strings.Contains(log.String(), "/bench") {
		t.Errorf("goproxy shipped a module that is not released:\n%s", log.String())
	}

	a := filepath.Join(out, "github.com/holdfast/holdfast/a/@v")
	list, err := os.ReadFile(filepath.Join(a, "list"))
	if err != nil || string(list) != "v0.2.0\n" {
		t.Errorf("a/@v/list = %q, %v", list, err)
	}
	var info struct{ Version, Time string }
	data, err := os.ReadFile(filepath.Join(a, "v0.2.0.info"))
	if err == nil {
		err = json.Unmarshal(data, &info)
	}
	if err != nil || info.Version != "v0.2.0" || info.Time == "" {
		t.Errorf("a/@v/v0.2.0.info = %s (%v)", data, err)
	}
	if got := zipNames(t, filepath.Join(a, "v0.2.0.zip")); !slices.Equal(got, []string{
		".gitignore", "LICENSE", "a.go", "go.mod", "untracked.txt",
	}) {
		t.Errorf("a's zip holds %v: want its published files, the root LICENSE, no nested module, nothing ignored", got)
	}
	b := filepath.Join(out, "github.com/holdfast/holdfast/b/@v/v0.2.0.zip")
	if got := zipContent(t, b, "LICENSE"); got != "b's own license\n" {
		t.Errorf("b's LICENSE is %q: a module's own LICENSE wins over the root's", got)
	}

	// The real consumer: the go command, from a fresh module, with nothing
	// but the proxy.
	user := t.TempDir()
	if err := os.WriteFile(filepath.Join(user, "main.go"), []byte("package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/holdfast/holdfast/a\"\n)\n\nfunc main() { fmt.Println(a.Hello()) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOPROXY=file://"+filepath.ToSlash(out), "GOSUMDB=off", "GOWORK=off",
		"GOMODCACHE="+filepath.Join(t.TempDir(), "modcache"), "GOFLAGS=-modcacherw", "GOTOOLCHAIN=local")
	for _, argv := range [][]string{{"mod", "init", "example.com/user"}, {"get", rootPath + "/a@v0.2.0"}, {"run", "."}} {
		cmd := exec.Command("go", argv...)
		cmd.Dir, cmd.Env = user, env
		got, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %v: %v\n%s", argv, err, got)
		}
		if argv[0] == "run" && string(got) != "hello from b\n" {
			t.Errorf("go run printed %q", got)
		}
	}
}

func zipNames(t *testing.T, path string) []string {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		_, name, ok := strings.Cut(f.Name, "@v0.2.0/")
		if !ok {
			t.Errorf("%s: entry %q is outside the module's prefix", path, f.Name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func zipContent(t *testing.T, path, name string) string {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "@v0.2.0/"+name) {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			var buf bytes.Buffer
			if _, err := buf.ReadFrom(rc); err != nil {
				t.Fatal(err)
			}
			return buf.String()
		}
	}
	t.Fatalf("%s has no %s", path, name)
	return ""
}

func TestTags(t *testing.T) {
	root := fixture(t)
	var out bytes.Buffer
	if code := runCLI(t, root, &out, "tags"); code != 0 {
		t.Fatalf("tags: exit %d\n%s", code, out.String())
	}
	if got, want := out.String(), "a/v0.0.1\nb/v0.0.1\n"; got != want {
		t.Errorf("tags printed %q, want %q (the shipped modules, prefixed by their directories)", got, want)
	}
}

// runCLI runs the command line in dir, as the tool is run from a shell.
func runCLI(t *testing.T, dir string, out *bytes.Buffer, args ...string) int {
	t.Helper()
	t.Chdir(dir)
	return run(args, out, out)
}
