package main

import (
	"net"
	"os"
	"testing"
)

func TestSplitRowDividesEachProcessTicksByOps(t *testing.T) {
	r := throughput{Name: "holdfast/etcd Acquire+Release", Concurrency: 32, Ops: 1000, OpsPerSec: 333}
	s0 := cpuSample{server: 100, plugin: 50, store: 10, client: 200}
	s1 := cpuSample{server: 130, plugin: 70, store: 30, client: 210}
	got := splitRow(r, s0, s1, 2.5)
	// 30 ticks are 0.3 s, 300,000 µs over 1,000 pairs.
	want := cpuUS{Server: 300, Plugin: 200, Store: 200, Client: 100}
	if got.CPU != want || got.TotalUS != 800 || got.Ops != 1000 || got.Load1 != 2.5 || got.Work != r.Name || got.Concurrency != 32 {
		t.Fatalf("splitRow = %+v, want CPU %+v and total 800", got, want)
	}
	if z := splitRow(throughput{}, s0, s1, 0); z.TotalUS != 0 {
		t.Fatalf("no operations: %+v, want nothing per op", z)
	}
}

func TestCPUFloorsSumTheParts(t *testing.T) {
	rows := []cpuRow{
		{Work: echoRow, Concurrency: 32, CPU: cpuUS{Server: 20, Client: 30}},
		{Work: hopRow, Concurrency: 32, CPU: cpuUS{Plugin: 40, Client: 50}},
		{Work: etcdReuseRow, Concurrency: 32, CPU: cpuUS{Store: 60, Client: 10}},
		{Work: "holdfast/etcd Acquire+Release", Concurrency: 32, CPU: cpuUS{Server: 150, Plugin: 70, Store: 90, Client: 65}},
		{Work: "holdfast/memory Acquire+Release", Concurrency: 32, CPU: cpuUS{Server: 80, Plugin: 45, Client: 70}},
		// No peer row for Redis: no floor.
		{Work: "holdfast/redis Acquire+Release", Concurrency: 32, CPU: cpuUS{Server: 1}},
		// No echo or hop row at c128: no floor.
		{Work: "holdfast/memory Acquire+Release", Concurrency: 128, CPU: cpuUS{Server: 1}},
	}
	got := cpuFloors(rows)
	if len(got) != 2 {
		t.Fatalf("cpuFloors = %+v, want etcd and memory at c32 only", got)
	}
	// Server 2 × 20 + the hop's engine 50; plugin 40 + the peer's client 10;
	// store 60; client 2 × 30.
	etcd := got[0]
	if want := (cpuUS{Server: 90, Plugin: 50, Store: 60, Client: 60}); etcd.Backend != "etcd" || etcd.Floor != want || etcd.FloorUS != 260 || etcd.HoldfastUS != 375 {
		t.Fatalf("etcd = %+v, want floor %+v (260 µs) against 375 µs", etcd, want)
	}
	if etcd.Most != "server" || etcd.MostUS != 60 {
		t.Fatalf("etcd: most in %s (%+.0f µs), want server (+60 µs)", etcd.Most, etcd.MostUS)
	}
	mem := got[1]
	if want := (cpuUS{Server: 90, Plugin: 40, Client: 60}); mem.Backend != "memory" || mem.Floor != want || mem.Most != "client" || mem.MostUS != 10 {
		t.Fatalf("memory = %+v, want floor %+v, most in the client (+10 µs)", mem, want)
	}
}

func TestListenerPIDFindsThisProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, err := listenerPID(ln.Addr().(*net.TCPAddr).Port)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("listenerPID = %d, %v; want this process %d", pid, err, os.Getpid())
	}
	if tree, own := treeTicks(pid), cpuTicks(pid); tree < own {
		t.Fatalf("treeTicks %d below the process's own %d", tree, own)
	}
}
