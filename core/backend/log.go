package backend

import (
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogTimeFormat is the @timestamp layout the plugin host parses.
const hclogTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// levelTrace is hclog's trace level in slog terms.
const levelTrace = slog.LevelDebug - 4

// newHCLogHandler is a slog handler that writes hclog's JSON line format
// (@timestamp, @level, @message, then the attributes), so that what a
// backend logs with slog is re-levelled by the host like go-plugin's own logs.
func newHCLogHandler(w io.Writer, level slog.Level) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format(hclogTimeFormat))
			case slog.LevelKey:
				return slog.String("@level", hclogLevelName(a.Value.Any().(slog.Level)))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	})
}

func hclogLevelName(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "trace"
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	}
	return "error"
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}
