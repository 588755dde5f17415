package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/holdfast/holdfast/harness"
)

// What this program reads of other processes from /proc: CPU time, and
// which process listens on a TCP port (the store a flag points at).

// clockTicks is USER_HZ, 100 on Linux everywhere that matters.
const clockTicks = 100

// procStat is a process's /proc/PID/stat fields after the command name,
// which may hold spaces (so counted from its ')'): [0] is the state, [1]
// the parent's pid, [11] to [14] utime, stime, cutime and cstime in clock
// ticks. Nil when unreadable.
func procStat(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 15 {
		return nil
	}
	return fields
}

// ticksSum adds up fields [from, to] of a procStat.
func ticksSum(fields []string, from, to int) int64 {
	var n int64
	for _, f := range fields[from : to+1] {
		v, _ := strconv.ParseInt(f, 10, 64)
		n += v
	}
	return n
}

// cpuTicks is a process's user+system CPU time in clock ticks, or 0 when
// unreadable.
func cpuTicks(pid int) int64 {
	if f := procStat(pid); f != nil {
		return ticksSum(f, 11, 12)
	}
	return 0
}

// treeTicks is the CPU time of pid and all its descendants, in clock
// ticks, with the children they have reaped (cutime+cstime): a
// PostgreSQL postmaster's connection backends, even one that exits
// between two readings, whose time then moves into its parent's cutime.
func treeTicks(pid int) int64 {
	f := procStat(pid)
	if f == nil {
		return 0
	}
	n := ticksSum(f, 11, 14)
	for _, kid := range harness.Children(pid) {
		n += treeTicks(kid)
	}
	return n
}

// loadAvg1 is the machine's one-minute load average (/proc/loadavg), or 0.
func loadAvg1() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	_, _ = fmt.Sscan(string(data), &l)
	return l
}

// listenerPID is the process listening on TCP port: the socket's inode
// from /proc/net/tcp{,6}, then the process holding it among every
// process's open files (reading other users' fds needs root or the same
// user).
func listenerPID(port int) (int, error) {
	sockets := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			// sl local_address rem_address st ... inode (field 9);
			// st 0A is LISTEN.
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" {
				continue
			}
			i := strings.LastIndexByte(f[1], ':')
			if p, err := strconv.ParseInt(f[1][i+1:], 16, 32); err == nil && int(p) == port {
				sockets["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(sockets) == 0 {
		return 0, fmt.Errorf("nothing listens on TCP port %d", port)
	}
	holders := map[int]bool{}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && sockets[link] {
			// /proc/PID/fd/N
			if pid, err := strconv.Atoi(strings.Split(fd, "/")[2]); err == nil {
				holders[pid] = true
			}
		}
	}
	// A forked child may still hold its parent's listening socket: the
	// listener is the holder whose parent is not one.
	for pid := range holders {
		if f := procStat(pid); f != nil && !holders[atoi(f[1])] {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process found holding the socket listening on TCP port %d", port)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
