// Package tlsconfig builds the server's TLS configuration from PEM files
// and picks up new files without a restart.
//
// At every TLS handshake the certificate, key and (for mTLS) client CA
// files are stat'ed; when one changed (size, modification time or inode,
// as an atomic rename or a rewrite leaves them) all are read again, and the
// new certificate serves this handshake and the next ones. A stat is two
// system calls, small beside a handshake's public-key work, so no watcher
// (fsnotify) is needed. A change that does not parse (for example the
// certificate written but not yet its key) is logged and the last good
// files keep serving; the next handshake tries again.
//
// TLS 1.2 is the minimum. ALPN offers h2 and http/1.1, so gRPC and Connect
// run over HTTP/2 and curl over either. With a client CA every client must
// present a certificate signed by it (RequireAndVerifyClientCert).
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// Files names the PEM files.
type Files struct {
	Cert, Key string
	// ClientCA, when set, turns on client-certificate authentication.
	ClientCA string
}

// Reloader serves the current certificate (and client CAs).
type Reloader struct {
	files Files
	log   *slog.Logger

	mu    sync.Mutex
	stats []os.FileInfo // of files, in the order paths() lists them
	cur   *tls.Config
}

// New reads the files once (an error refuses to start) and returns the
// server's tls.Config, which re-reads them when they change.
func New(files Files, log *slog.Logger) (*tls.Config, *Reloader, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, nil, errors.New("--tls-cert and --tls-key go together")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{files: files, log: log}
	stats, err := r.stat()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := r.load()
	if err != nil {
		return nil, nil, err
	}
	r.stats, r.cur = stats, cfg
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		// Every handshake takes its settings from the current files.
		GetConfigForClient: r.configForClient,
	}
	return base, r, nil
}

func (r *Reloader) paths() []string {
	p := []string{r.files.Cert, r.files.Key}
	if r.files.ClientCA != "" {
		p = append(p, r.files.ClientCA)
	}
	return p
}

func (r *Reloader) stat() ([]os.FileInfo, error) {
	var out []os.FileInfo
	for _, p := range r.paths() {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		out = append(out, st)
	}
	return out, nil
}

// load reads and parses the files into a complete per-handshake config.
func (r *Reloader) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: --tls-cert %s, --tls-key %s: %w", r.files.Cert, r.files.Key, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
		Certificates: []tls.Certificate{cert},
	}
	if r.files.ClientCA != "" {
		pem, err := os.ReadFile(r.files.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("tls: --tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: --tls-client-ca %s: no PEM certificate in it", r.files.ClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func changed(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		if !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()) {
			return true
		}
	}
	return false
}

// Current returns the config in force after checking the files.
func (r *Reloader) Current() *tls.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	stats, err := r.stat()
	if err != nil {
		r.log.Warn("tls files unreadable; serving the last good certificate", "err", err)
		return r.cur
	}
	if !changed(stats, r.stats) {
		return r.cur
	}
	r.stats = stats // report a bad change once, not per handshake
	cfg, err := r.load()
	if err != nil {
		r.log.Error("tls files changed but do not load; serving the last good certificate", "err", err)
		return r.cur
	}
	r.cur = cfg
	r.log.Info("tls certificate reloaded", "cert", r.files.Cert)
	return r.cur
}

func (r *Reloader) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	return r.Current(), nil
}
