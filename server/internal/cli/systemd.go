package cli

import (
	"log/slog"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifySystemd tells the service manager how the server is doing
// (sd_notify: READY=1 once it serves, STOPPING=1 when it starts shutting
// down), so a systemd unit of Type=notify is started only when the port
// answers. Without $NOTIFY_SOCKET (not run by systemd) it does nothing.
func notifySystemd(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("cannot notify systemd", "state", state, "err", err)
	}
}
