package harness

import (
	"os/exec"
	"syscall"
)

// dieWithParent asks the kernel to SIGKILL the process when the thread that
// started it ends.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
