package pluginhost

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/core/internal/handshake"
)

// hclogAdapter is an hclog.Logger that writes to a slog.Logger. go-plugin
// logs through it, both its own messages and the plugin's stderr JSON lines,
// which it parses and re-levels; so the plugin's logs land in the host's
// slog logger at their own level, with the plugin's name.
type hclogAdapter struct {
	base    *slog.Logger // with the plugin attribute
	name    string       // hclog's logger name, from Named
	l       *slog.Logger // base with name and implied args
	implied []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLogAdapter(base *slog.Logger) *hclogAdapter {
	return &hclogAdapter{base: base, l: base}
}

func (a *hclogAdapter) derive(name string, implied []any) *hclogAdapter {
	l := a.base
	if name != "" {
		l = l.With("logger", name)
	}
	if len(implied) > 0 {
		l = l.With(implied...)
	}
	return &hclogAdapter{base: a.base, name: name, l: l, implied: implied}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	sl := handshake.SlogLevel(level)
	if !a.l.Enabled(context.Background(), sl) {
		return
	}
	// go-plugin names the executable "plugin"; that key is ours (the
	// plugin's configured name), so rename theirs.
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == "plugin" {
			args = append([]any(nil), args...) // not the caller's slice
			args[i] = "plugin_path"
			break
		}
	}
	a.l.Log(context.Background(), sl, msg, args...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	return a.l.Enabled(context.Background(), handshake.SlogLevel(level))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	return a.derive(a.name, append(append([]any(nil), a.implied...), args...))
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.derive(name, a.implied)
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger { return a.derive(name, a.implied) }

// SetLevel does nothing: the slog handler decides.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

// GetLevel is the lowest level the slog handler accepts. go-plugin uses it to
// skip parsing plugin log lines nobody would see.
func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if a.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (a *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(a.l.Handler(), slog.LevelInfo)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return a.StandardLogger(opts).Writer()
}
