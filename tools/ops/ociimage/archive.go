package ociimage

import (
	"archive/tar"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// RefNameAnnotation names an image in an OCI layout's index; podman load
// and skopeo use it as the image's tag.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// WriteArchive writes img as an OCI archive at path: an OCI image layout
// (oci-layout, index.json naming it ref, blobs/) in one tar, entries
// sorted, with the times of created.
func WriteArchive(path string, img v1.Image, platform v1.Platform, ref string, created time.Time) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img, layout.WithPlatform(platform),
		layout.WithAnnotations(map[string]string{RefNameAnnotation: ref})); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: created.UTC(), Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, h.Name+"/"
			return tw.WriteHeader(h)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
