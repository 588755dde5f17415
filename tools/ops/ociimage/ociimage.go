// Package ociimage builds holdfast's container image without a daemon, a
// base image or a registry: two layers written from files on disk (a
// minimal root of /etc/passwd, /etc/group, CA certificates and /tmp; then
// the static binaries), an OCI image config, and an OCI image layout packed
// into one tar (an "OCI archive", which podman load, skopeo copy
// oci-archive:… and crane push read).
//
// Everything that goes into the image is fixed by its inputs: file times
// are the Created time (SOURCE_DATE_EPOCH in make dist-oci), owners are
// root, and gzip carries no timestamp, so the same inputs give the same
// digests.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The unprivileged user the server runs as (the number distroless images
// use for "nonroot"); it owns nothing in the image.
const (
	UID      = 65532
	UserName = "holdfast"
)

// BinDir is where the binaries go; the server finds its plugins
// (holdfast-backend-NAME) next to itself.
const BinDir = "/usr/local/bin"

// Port is the API port the image's server listens on.
const Port = "7410/tcp"

// Spec is what one platform's image is built from.
type Spec struct {
	Platform v1.Platform
	Version  string    // the release, e.g. 0.1.0
	Revision string    // the source commit
	Created  time.Time // image and file times
	Source   string    // the project's URL (org.opencontainers.image.source)
	// Binaries are host paths of the executables to put in BinDir, under
	// their own names; holdfast must be one of them.
	Binaries []string
	// CACertificates is a PEM bundle for /etc/ssl/certs/ca-certificates.crt
	// (where Go looks first), so TLS to a backend with a public
	// certificate works; empty leaves it out.
	CACertificates string
}

// Labels are the image's OCI annotations, in its config and its manifest.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "holdfast",
		"org.opencontainers.image.description": "holdfast distributed lock server (holdfast serve) with the etcd, Redis and PostgreSQL backend plugins",
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.revision":    s.Revision,
		"org.opencontainers.image.created":     s.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":      s.Source,
		"org.opencontainers.image.base.name":   "scratch",
	}
}

// Build makes the image.
func Build(s Spec) (v1.Image, error) {
	if s.Version == "" || s.Created.IsZero() || s.Platform.OS == "" || s.Platform.Architecture == "" {
		return nil, fmt.Errorf("ociimage: a spec needs a version, a creation time and a platform")
	}
	root, err := rootLayer(s)
	if err != nil {
		return nil, err
	}
	bins, err := binaryLayer(s)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: s.Created.UTC()}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: root, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "holdfast-image: /etc/passwd, /etc/group, CA certificates, /tmp", Comment: "root"}},
		mutate.Addendum{Layer: bins, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "holdfast-image: " + BinDir + ": holdfast and its backend plugins", Comment: "binaries"}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = s.Platform.OS, s.Platform.Architecture, s.Platform.Variant
	cf.Created = created
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint: []string{path.Join(BinDir, "holdfast"), "serve"},
		// Inside the container only: the container's own network
		// namespace, published as the operator decides. The flag's
		// default stays loopback everywhere else.
		Env:          []string{"PATH=" + BinDir, "HOLDFAST_ADDR=0.0.0.0:7410"},
		ExposedPorts: map[string]struct{}{Port: {}},
		WorkingDir:   "/",
		StopSignal:   "SIGTERM",
		Labels:       s.Labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, s.Labels()).(v1.Image), nil
}

// entry is one file of a layer.
type entry struct {
	name string // absolute path in the image
	mode int64
	dir  bool
	data []byte
}

func rootLayer(s Spec) (v1.Layer, error) {
	entries := []entry{
		{name: "/etc", mode: 0o755, dir: true},
		{name: "/etc/passwd", mode: 0o644, data: fmt.Appendf(nil,
			"root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/nonexistent:/sbin/nologin\n", UserName, UID, UID, UserName)},
		{name: "/etc/group", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", UserName, UID)},
		// go-plugin puts the plugin's socket in the temporary directory:
		// with a read-only root, mount a tmpfs (podman --read-only does)
		// or an emptyDir here.
		{name: "/tmp", mode: 0o1777, dir: true},
	}
	if s.CACertificates != "" {
		pem, err := os.ReadFile(s.CACertificates)
		if err != nil {
			return nil, err
		}
		entries = append(entries,
			entry{name: "/etc/ssl", mode: 0o755, dir: true},
			entry{name: "/etc/ssl/certs", mode: 0o755, dir: true},
			entry{name: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: pem})
	}
	return layer(entries, s.Created)
}

func binaryLayer(s Spec) (v1.Layer, error) {
	entries := []entry{{name: "/usr", mode: 0o755, dir: true}, {name: "/usr/local", mode: 0o755, dir: true}, {name: BinDir, mode: 0o755, dir: true}}
	found := false
	for _, b := range s.Binaries {
		data, err := os.ReadFile(b)
		if err != nil {
			return nil, err
		}
		name := path.Base(b)
		found = found || name == "holdfast"
		entries = append(entries, entry{name: path.Join(BinDir, name), mode: 0o755, data: data})
	}
	if !found {
		return nil, fmt.Errorf("ociimage: no holdfast among the binaries %v", s.Binaries)
	}
	return layer(entries, s.Created)
}

// layer is a gzipped tar of entries, sorted by name, owned by root, with
// mtime t.
func layer(entries []entry, t time.Time) (v1.Layer, error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name[1:], // layer paths are relative to the root
			Mode:    e.mode,
			ModTime: t.UTC(),
			Format:  tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
