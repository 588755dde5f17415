package ociimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func spec(t *testing.T) Spec {
	dir := t.TempDir()
	bin := filepath.Join(dir, "holdfast")
	if err := os.WriteFile(bin, []byte("not really a binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Platform: v1.Platform{OS: "linux", Architecture: "arm64"},
		Version:  "1.2.3", Revision: "abc", Created: time.Unix(1700000000, 0), Source: "https://example.invalid/holdfast",
		Binaries: []string{bin},
	}
}

// The same inputs give the same image, byte for byte, archive included:
// nothing depends on the time of the build or the files' own times.
func TestReproducible(t *testing.T) {
	s := spec(t)
	a, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(s.Binaries[0], time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	b, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("two builds of one spec: %s and %s", da, db)
	}
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	if err := WriteArchive(pa, a, s.Platform, "holdfast:1.2.3", s.Created); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(pb, b, s.Platform, "holdfast:1.2.3", s.Created); err != nil {
		t.Fatal(err)
	}
	ra, _ := os.ReadFile(pa)
	rb, _ := os.ReadFile(pb)
	if string(ra) != string(rb) {
		t.Fatal("two archives of one image differ")
	}
}

// The archive is an OCI layout whose index names the image and its
// platform, as podman load and skopeo read it.
func TestArchiveIndex(t *testing.T) {
	s := spec(t)
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "img.tar")
	if err := WriteArchive(p, img, s.Platform, "holdfast:1.2.3", s.Created); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", p, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("index: %v %v", im, err)
	}
	d := im.Manifests[0]
	want, _ := img.Digest()
	if d.Digest != want || d.Annotations[RefNameAnnotation] != "holdfast:1.2.3" || d.Platform.Architecture != "arm64" {
		t.Fatalf("index entry %+v, want %s named holdfast:1.2.3 for arm64", d, want)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "arm64" || cf.Config.User != "65532:65532" || cf.Config.Labels["org.opencontainers.image.version"] != "1.2.3" {
		t.Fatalf("config: %s %q %v", cf.Architecture, cf.Config.User, cf.Config.Labels)
	}
}

func TestSpecNeedsHoldfast(t *testing.T) {
	s := spec(t)
	other := filepath.Join(t.TempDir(), "something-else")
	if err := os.WriteFile(other, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	s.Binaries = []string{other}
	if _, err := Build(s); err == nil {
		t.Fatal("an image without holdfast was built")
	}
	s = spec(t)
	s.Version = ""
	if _, err := Build(s); err == nil {
		t.Fatal("an image without a version was built")
	}
}
