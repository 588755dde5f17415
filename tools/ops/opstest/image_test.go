package opstest

import (
	"archive/tar"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/holdfast/holdfast/tools/ops/ociimage"
)

// archive is this machine's platform's image archive in dist/oci.
func archive(t *testing.T) string {
	t.Helper()
	p := filepath.Join(dist(), "oci", "holdfast-"+version(t)+"-"+hostPlatform()+".oci.tar")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v (make dist-oci writes it)", err)
	}
	return p
}

// untar unpacks the tar at src into dir, showing each entry to seen
// first (when not nil).
func untar(t *testing.T, src io.Reader, dir string, seen ...func(*tar.Header)) {
	t.Helper()
	tr := tar.NewReader(src)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range seen {
			f(h)
		}
		p := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		default:
			t.Fatalf("%s: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
	}
}

// image opens the archive's one image and its index entry.
func image(t *testing.T) (v1.Image, v1.Descriptor) {
	t.Helper()
	f, err := os.Open(archive(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	untar(t, f, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("the archive's index lists %d manifests, want 1", len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img, im.Manifests[0]
}

// TestImageArchive checks the OCI archive as a registry or a runtime would
// read it: one image named holdfast:VERSION for this platform, two OCI
// layers, an unprivileged user, the entrypoint, the labels, and static
// binaries that run (holdfast version, from the extracted layer).
func TestImageArchive(t *testing.T) {
	v := version(t)
	img, desc := image(t)
	if got := desc.Annotations[ociimage.RefNameAnnotation]; got != "holdfast:"+v {
		t.Errorf("index names the image %q, want holdfast:%s", got, v)
	}
	if desc.Platform == nil || desc.Platform.OS != runtime.GOOS || desc.Platform.Architecture != runtime.GOARCH {
		t.Errorf("index platform %v, want %s/%s", desc.Platform, runtime.GOOS, runtime.GOARCH)
	}
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", desc.MediaType, types.OCIManifestSchema1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/holdfast", "serve"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/usr/local/bin/holdfast serve] and no cmd", c.Entrypoint, c.Cmd)
	}
	if !slices.Contains(c.Env, "HOLDFAST_ADDR=0.0.0.0:7410") {
		t.Errorf("env %q lacks HOLDFAST_ADDR=0.0.0.0:7410", c.Env)
	}
	if _, ok := c.ExposedPorts["7410/tcp"]; !ok || c.StopSignal != "SIGTERM" {
		t.Errorf("exposed ports %v, stop signal %q", c.ExposedPorts, c.StopSignal)
	}
	if c.Labels["org.opencontainers.image.version"] != v || c.Labels["org.opencontainers.image.revision"] == "" ||
		c.Labels["org.opencontainers.image.title"] != "holdfast" || c.Labels["org.opencontainers.image.source"] == "" {
		t.Errorf("labels %v: want title holdfast, version %s, a revision and a source", c.Labels, v)
	}
	if cf.OS != runtime.GOOS || cf.Architecture != runtime.GOARCH {
		t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 || len(cf.History) != 2 {
		t.Fatalf("%d layers, %d history entries; want 2 (root files, binaries)", len(layers), len(cf.History))
	}
	rootfs := t.TempDir()
	var files []string
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		untar(t, rc, rootfs, func(h *tar.Header) {
			files = append(files, h.Name)
			if h.Uid != 0 || h.Gid != 0 {
				t.Errorf("%s owned by %d:%d: the server's user must own nothing", h.Name, h.Uid, h.Gid)
			}
			if h.Mode&0o6000 != 0 || (h.Typeflag == tar.TypeReg && h.Mode&0o022 != 0) {
				t.Errorf("%s mode %o: setuid/setgid or writable by others", h.Name, h.Mode)
			}
		})
		rc.Close()
	}
	for _, want := range []string{"etc/passwd", "etc/group", "tmp/", "etc/ssl/certs/ca-certificates.crt",
		"usr/local/bin/holdfast", "usr/local/bin/holdfast-backend-etcd", "usr/local/bin/holdfast-backend-redis", "usr/local/bin/holdfast-backend-postgres"} {
		if !slices.Contains(files, want) {
			t.Errorf("the image has no %s (it has %v)", want, files)
		}
	}
	passwd, err := os.ReadFile(filepath.Join(rootfs, "etc", "passwd"))
	if err != nil || !strings.Contains(string(passwd), "holdfast:x:65532:65532:") {
		t.Errorf("/etc/passwd %q lacks the holdfast user 65532 (%v)", passwd, err)
	}
	for _, b := range []string{"holdfast", "holdfast-backend-etcd", "holdfast-backend-redis", "holdfast-backend-postgres"} {
		staticELF(t, filepath.Join(rootfs, "usr", "local", "bin", b))
	}
	out, err := exec.Command(filepath.Join(rootfs, "usr", "local", "bin", "holdfast"), "version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != v {
		t.Errorf("the image's holdfast version: %q, %v; want %s", out, err, v)
	}
	t.Logf("image %s: %d layers, config %s; files %v", must(img.Digest()), len(layers), must(img.ConfigName()), files)
}

// staticELF fails unless p is an ELF executable for this machine with no
// interpreter and no shared libraries: it runs from scratch.
func staticELF(t *testing.T, p string) {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s has a dynamic loader (PT_INTERP): not static", filepath.Base(p))
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", filepath.Base(p), libs)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if f.Machine != want {
		t.Errorf("%s is for %s, want %s", filepath.Base(p), f.Machine, want)
	}
}
