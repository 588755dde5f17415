// Package handshake is what the plugin host (core/pluginhost) and a plugin
// process (core/backend/backendserver) agree on before they speak
// holdfast.backend.v1: the go-plugin handshake, the name the backend is
// served under, the environment variables that carry the backend's options,
// log level and profiling address into the plugin, how log levels map
// between hclog (go-plugin's logger) and slog (holdfast's), and the fixed
// flow-control windows of their gRPC connection (window.go).
//
// It is internal: a plugin author calls backendserver.Serve and never sees
// any of it, and the host sets it through pluginhost.Config.
package handshake

import (
	"log/slog"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Config is the go-plugin handshake. ProtocolVersion is the version of
// holdfast.backend.v1 spoken by both sides; the magic cookie only keeps
// people from running a plugin by hand (it is not a security measure: pin
// plugins by SHA-256 for that). It is a function so that nobody can change
// the value both sides rely on.
func Config() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  1,
		MagicCookieKey:   "HOLDFAST_BACKEND_PLUGIN",
		MagicCookieValue: "b4c0f8e2-holdfast-backend-v1",
	}
}

// PluginName is the name under which the plugin registers the backend with
// go-plugin; the host dispenses it by this name.
const PluginName = "backend"

// The environment of a plugin process, as the host sets it.
const (
	// OptionsEnv carries the backend's options (`holdfast serve
	// --backend-opt key=value`): a JSON object of string to string.
	OptionsEnv = "HOLDFAST_BACKEND_OPTIONS"
	// LogLevelEnv optionally sets the plugin's log level (trace, debug,
	// info, warn, error); the default is info. The host filters again at
	// its own level.
	LogLevelEnv = "HOLDFAST_BACKEND_LOG_LEVEL"
	// PprofAddrEnv, when set (for example to 127.0.0.1:0), makes the
	// plugin serve its profiles on that address, logged as "pprof serving"
	// with addr=HOST:PORT.
	PprofAddrEnv = "HOLDFAST_BACKEND_PPROF_ADDR"
)

// LevelTrace is hclog's trace level in slog terms.
const LevelTrace = slog.LevelDebug - 4

// SlogLevel is the slog level of an hclog level (Off and NoLevel map to
// info).
func SlogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// HCLogLevelName is the name hclog writes in a JSON line's @level for a
// slog level (levels between two of hclog's round down).
func HCLogLevelName(l slog.Level) string {
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
