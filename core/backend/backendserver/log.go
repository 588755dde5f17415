package backendserver

import (
	"io"
	"log/slog"

	"github.com/holdfast/holdfast/core/internal/handshake"
)

// hclogTimeFormat is the @timestamp layout the plugin host parses.
const hclogTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

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
				level, _ := a.Value.Any().(slog.Level)
				return slog.String("@level", handshake.HCLogLevelName(level))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	})
}
