package pluginhost

import (
	"os/exec"
	"syscall"
)

// setPdeathsig asks the kernel to SIGKILL the plugin when the thread that
// started it dies; the supervisor keeps that thread alive (LockOSThread).
// SIGKILL, not SIGTERM: a plugin of a dead host must not do anything on its
// way out (releasing locks early would break the leases clients hold).
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
