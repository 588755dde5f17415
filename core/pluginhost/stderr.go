package pluginhost

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
)

// stderrTail keeps the last lines a plugin wrote to stderr, so that a plugin
// that fails to start can be reported with its own words ("open backend:
// etcd: cannot reach endpoints ..."). go-plugin writes every raw stderr line
// here (ClientConfig.Stderr) before re-levelling it into the log.
type stderrTail struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
}

const tailLines = 32

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(t.partial[:i])); line != "" {
			t.lines = append(t.lines, line)
			if len(t.lines) > tailLines {
				t.lines = t.lines[len(t.lines)-tailLines:]
			}
		}
		t.partial = t.partial[i+1:]
	}
	if len(t.partial) > 64<<10 { // a runaway line: keep memory bounded
		t.partial = t.partial[:0]
	}
	return len(p), nil
}

// reason is what the plugin said about its failure: the message of its last
// error-level log line, or else its first plain-text lines (a panic, or a
// message printed without the logger), or "".
func (t *stderrTail) reason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lastError string
	var plain []string
	for _, line := range t.lines {
		var entry struct {
			Level   string `json:"@level"`
			Message string `json:"@message"`
			Error   any    `json:"error"`
		}
		if json.Unmarshal([]byte(line), &entry) != nil || entry.Message == "" {
			if len(plain) < 3 {
				plain = append(plain, line)
			}
			continue
		}
		if strings.EqualFold(entry.Level, "error") {
			lastError = entry.Message
			if entry.Error != nil {
				if s, ok := entry.Error.(string); ok && s != "" {
					lastError += ": " + s
				}
			}
		}
	}
	if lastError != "" {
		return lastError
	}
	return strings.Join(plain, " | ")
}

// lineLogger logs what a plugin writes to os.Stdout or os.Stderr after it
// started serving (go-plugin streams those over gRPC), one record a line.
type lineLogger struct {
	log     *slog.Logger
	mu      sync.Mutex
	partial []byte
}

func newLineLogger(log *slog.Logger, stream string) *lineLogger {
	return &lineLogger{log: log.With("stream", stream)}
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimRight(string(l.partial[:i]), "\r"); line != "" {
			l.log.Info(line)
		}
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > 64<<10 {
		l.log.Info(string(l.partial))
		l.partial = l.partial[:0]
	}
	return len(p), nil
}
