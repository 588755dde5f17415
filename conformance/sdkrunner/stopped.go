package sdkrunner

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// groupStopped reports whether every thread of every process in process
// group pgid is in the stopped state; ok is false where /proc cannot tell
// (not Linux, or the group is gone).
//
// kill(SIGSTOP) returns before its target has stopped: a process stops only
// once one of its threads runs again, which on a loaded machine can be a
// while. Specs that measure from "the adapter is paused" need the pause to
// have happened.
func groupStopped(pgid int) (stopped, ok bool) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return false, false
	}
	found := false
	for _, path := range stats {
		stat, err := os.ReadFile(path)
		if err != nil {
			continue // the process just ended
		}
		// After the parenthesised command name: state, ppid, pgrp.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(stat[i+1:])
		if len(fields) < 3 {
			continue
		}
		if pg, err := strconv.Atoi(string(fields[2])); err != nil || pg != pgid {
			continue
		}
		found = true
		pid := filepath.Base(filepath.Dir(path))
		if !threadsStopped(fmt.Sprintf("/proc/%s/task/*/stat", pid)) {
			return false, true
		}
	}
	return found, found
}

// threadsStopped reports whether every task matched by pattern is stopped.
func threadsStopped(pattern string) bool {
	tasks, _ := filepath.Glob(pattern)
	for _, path := range tasks {
		stat, err := os.ReadFile(path)
		if err != nil {
			return false // a thread just ended: look again
		}
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}
