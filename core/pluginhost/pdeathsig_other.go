//go:build !linux

package pluginhost

import "os/exec"

// setPdeathsig does nothing where the kernel has no parent-death signal;
// backendserver.Serve's parent watch still ends orphaned plugins.
func setPdeathsig(*exec.Cmd) {}
