package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

// writeGoProxy writes a file-system module proxy into out: for every shipped
// module, <escaped path>/@v/list, vX.Y.Z.info, vX.Y.Z.mod and vX.Y.Z.zip, the
// layout the public proxy serves, so GOPROXY=file://OUT,<public proxy> gives
// holdfast to the go command exactly as a published release would.
//
// A module's files are those git would publish from this tree: tracked and
// untracked files, less what .gitignore excludes (so build outputs and
// node_modules never ship), with their working-tree contents (so a change
// can be tested before it is committed). Like the go command for a module in
// a subdirectory, the repository's LICENSE is added to a module without one.
func writeGoProxy(r *repo, out string, stdout io.Writer) error {
	if err := errors.Join(checkRelease(r)...); err != nil {
		return fmt.Errorf("the tree is not a consistent release %s:\n%w", r.Version, err)
	}
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(out, r.Root); err == nil && !strings.HasPrefix(rel, "..") {
		return fmt.Errorf("refusing to empty %s: it holds the repository", out)
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{r.GoVersion(), commitTime(r.Root)})
	if err != nil {
		return err
	}
	license, _ := os.ReadFile(filepath.Join(r.Root, "LICENSE"))
	for _, m := range r.Modules {
		if !m.Shipped {
			continue
		}
		hash, err := writeModule(r, m, out, info, license)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Dir, err)
		}
		fmt.Fprintf(stdout, "goproxy: %s %s %s\n", m.Path, r.GoVersion(), hash)
	}
	return nil
}

func writeModule(r *repo, m goModule, out string, info, license []byte) (string, error) {
	mv := module.Version{Path: m.Path, Version: r.GoVersion()}
	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	files, err := publishedFiles(r.abs(m.Dir))
	if err != nil {
		return "", err
	}
	if len(license) > 0 && !slices.ContainsFunc(files, func(f zip.File) bool { return f.Path() == "LICENSE" }) {
		files = append(files, memFile{name: "LICENSE", data: license})
	}
	zipPath := filepath.Join(dir, mv.Version+".zip")
	zf, err := os.Create(zipPath)
	if err != nil {
		return "", err
	}
	if err := zip.Create(zf, mv, files); err != nil {
		zf.Close()
		return "", err
	}
	if err := zf.Close(); err != nil {
		return "", err
	}
	gomod, err := os.ReadFile(filepath.Join(r.abs(m.Dir), "go.mod"))
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		"list":               []byte(mv.Version + "\n"),
		mv.Version + ".info": append(info, '\n'),
		mv.Version + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return dirhash.HashZip(zipPath, dirhash.Hash1)
}

// publishedFiles lists the files under dir that a commit of the working
// tree would hold (git ls-files: tracked, and untracked but not ignored),
// with slash paths relative to dir. zip.Create then leaves out what the go
// command leaves out (nested modules, vendor directories).
func publishedFiles(dir string) ([]zip.File, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	listed, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	var files []zip.File
	seen := map[string]bool{}
	for _, name := range strings.Split(string(listed), "\x00") {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		p := filepath.Join(dir, filepath.FromSlash(name))
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree, not yet in the index
		}
		if err != nil {
			return nil, err
		}
		files = append(files, diskFile{name: name, path: p, info: fi})
	}
	return files, nil
}

// commitTime is HEAD's commit time, so that the same commit always gives the
// same .info files; a tree without commits gets the current time.
func commitTime(root string) time.Time {
	cmd := exec.Command("git", "log", "-1", "--format=%cI")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out))); err == nil {
			return t.UTC()
		}
	}
	return time.Now().UTC().Truncate(time.Second)
}

// diskFile and memFile are the files zip.Create reads.
type diskFile struct {
	name, path string
	info       os.FileInfo
}

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.path) }

type memFile struct {
	name string
	data []byte
}

func (f memFile) Path() string                 { return f.name }
func (f memFile) Lstat() (os.FileInfo, error)  { return memInfo{f}, nil }
func (f memFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.data)), nil }

type memInfo struct{ f memFile }

func (i memInfo) Name() string       { return filepath.Base(i.f.name) }
func (i memInfo) Size() int64        { return int64(len(i.f.data)) }
func (i memInfo) Mode() os.FileMode  { return 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }

// moduleTag is the git tag that publishes m at version: the go command
// finds a module in a subdirectory by a tag prefixed with that directory.
func moduleTag(m goModule, version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}
