package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// profiles are the pprof profiles -profile takes of the server and of its
// plugin while a holdfast row runs: CPU, and the blocking, mutex and
// allocation deltas over the same seconds.
var profiles = []string{"profile", "block", "mutex", "allocs"}

// captureProfiles starts taking profiles of p's server and plugin for secs
// seconds into dir, named LABEL-{server,plugin}-KIND.pb.gz. The returned
// function waits for them.
func captureProfiles(ctx context.Context, p *process, dir, label string, secs int) func() {
	var server, plugin string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, server, plugin = p.logged(); server != "" && plugin != "" {
			break
		}
	}
	var wg sync.WaitGroup
	for who, addr := range map[string]string{"server": server, "plugin": plugin} {
		if addr == "" {
			logf("-profile: the %s did not log a pprof address", who)
			continue
		}
		for _, kind := range profiles {
			wg.Go(func() {
				url := fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", addr, kind, secs)
				file := filepath.Join(dir, fmt.Sprintf("%s-%s-%s.pb.gz", label, who, kind))
				if err := fetch(ctx, url, file); err != nil {
					logf("-profile: %s: %v", url, err)
				}
			})
		}
	}
	return wg.Wait
}

// profileSelf takes a CPU profile of this bench process for most of d into
// -profile's directory as LABEL-bench-profile.pb.gz (the clients' own work:
// the Go SDK's watchdogs in the SDK row). The returned function stops it.
func profileSelf(label string, d time.Duration) (stop func()) {
	if *profileDir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(*profileDir, label+"-bench-profile.pb.gz"))
	if err != nil {
		logf("-profile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		logf("-profile: bench CPU profile: %v", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			logf("-profile: %v", err)
		}
	}
}

func fetch(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profileSeconds is how long to profile a row of length d: most of it.
func profileSeconds(d time.Duration) int {
	return max(int(d.Seconds()*0.8), 1)
}

// rssKiB is a process's resident set size (VmRSS in /proc/PID/status), in KiB.
func rssKiB(pid int) (int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("pid %d: no VmRSS in /proc status", pid)
}
