package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The process facts below come from /proc (Linux). Elsewhere they say
// nothing: no children, not alive, and Signal(SIGSTOP) does not wait.

// Children returns the process ids of pid's running children (a zombie is
// not running). A child is listed under the thread that started it.
func Children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []int
	for _, path := range tasks {
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(f); err == nil && Alive(k) {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

// Alive reports whether pid is a running process (a zombie is not).
func Alive(pid int) bool {
	state, ok := procState(fmt.Sprintf("/proc/%d/stat", pid))
	return ok && state != 'Z' && state != 'X'
}

// procState is the state letter of a /proc stat file, which follows the
// parenthesised command name.
func procState(path string) (byte, bool) {
	stat, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0, false
	}
	return stat[i+2], true
}

// allThreadsStopped reports whether every thread of pid is in the stopped
// state (T, or t when a tracer such as a debugger is attached: it does not
// run either; the TS and Python SDKs' awaitStopped accept both); ok is
// false where /proc cannot tell (not Linux).
func allThreadsStopped(pid int) (stopped, ok bool) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, false
	}
	for _, path := range tasks {
		// A thread that just ended has no state: look again.
		if state, ok := procState(path); !ok || (state != 'T' && state != 't') {
			return false, true
		}
	}
	return true, true
}
