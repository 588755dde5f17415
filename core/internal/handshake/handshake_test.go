package handshake

import (
	"log/slog"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// Every hclog level survives the trip to slog and back to the name hclog
// writes, so a plugin's line is re-levelled by the host at its own level.
func TestLevelsRoundTrip(t *testing.T) {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if got := HCLogLevelName(SlogLevel(l)); got != l.String() {
			t.Errorf("%s -> %s -> %q", l, SlogLevel(l), got)
		}
	}
	if SlogLevel(hclog.NoLevel) != slog.LevelInfo {
		t.Error("an unknown hclog level is not info")
	}
}

// Config hands out a fresh value: changing one cannot change the handshake.
func TestConfigIsAValue(t *testing.T) {
	c := Config()
	c.MagicCookieValue = "changed"
	if Config().MagicCookieValue == "changed" {
		t.Fatal("the handshake was changed through a copy")
	}
}
