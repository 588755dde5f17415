package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
	"github.com/holdfast/holdfast/proto/hlc"
)

// BenchmarkScriptServerTime measures what the scripts of one uncontended
// Acquire, Extend and Release cost inside Redis, apart from the round
// trip: the EVALSHA time Redis itself counts (INFO commandstats, usec per
// call), the CPU the Redis server used per call (INFO cpu: the whole
// request, read, script and reply, and not inflated by waiting for a
// core), and the commands each script runs (every redis.call is one more
// command dispatched inside the script). bsm/redislock's SET NX PX and
// compare-and-delete script on the same Redis are the floor.
//
//	go test -run '^$' -bench ScriptServerTime ./plugins/redis
//
// The Redis should be this benchmark's alone while it runs: commandstats
// count every client's calls.
func BenchmarkScriptServerTime(b *testing.B) {
	ctx := context.Background()
	addr := redistest.Addr(b)
	var salt [4]byte
	_, _ = rand.Read(salt[:])
	o, err := ParseOptions(map[string]string{"addrs": addr, "key_prefix": "scriptbench" + hex.EncodeToString(salt[:]) + ":"})
	if err != nil {
		b.Fatal(err)
	}
	bk, err := New(ctx, o)
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	defer admin.Close()
	clock := hlc.NewClock(nil, 0)

	keys := make([]string, b.N)
	tokens := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("k/%d", i)
		tokens[i] = fmt.Sprintf("t%d", i)
	}
	// measure runs op on every key and reports Redis's time per EVALSHA and
	// the commands run per call (EVALSHA itself not counted).
	measure := func(name, top string, op func(i int) error) {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		cpu0 := redisCPU(ctx, b, admin)
		for i := range keys {
			if err := op(i); err != nil {
				b.Fatal(err)
			}
		}
		cpu := redisCPU(ctx, b, admin) - cpu0
		stats, err := admin.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		calls, usec, inner := commandStats(stats, top)
		if calls < int64(b.N) {
			b.Fatalf("%s: Redis counted %d %s calls for %d ops", name, calls, top, b.N)
		}
		b.ReportMetric(float64(usec)/float64(calls), name+"-redis-µs")
		b.ReportMetric(float64(inner)/float64(calls), name+"-cmds")
		b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), name+"-redis-cpu-µs")
	}
	b.ResetTimer()
	measure("acquire", "evalsha", func(i int) error {
		r, err := bk.Acquire(ctx, backend.AcquireRequest{Key: keys[i], OwnerToken: tokens[i], TTL: time.Minute, Stamp: clock.Now()})
		if err == nil && !r.Acquired {
			err = fmt.Errorf("%s not acquired", keys[i])
		}
		return err
	})
	measure("extend", "evalsha", func(i int) error {
		r, err := bk.Extend(ctx, backend.ExtendRequest{Key: keys[i], OwnerToken: tokens[i], TTL: time.Minute, Stamp: clock.Now()})
		if err == nil && !r.Extended {
			err = fmt.Errorf("%s not extended", keys[i])
		}
		return err
	})
	measure("release", "evalsha", func(i int) error {
		ok, err := bk.Release(ctx, backend.ReleaseRequest{Key: keys[i], OwnerToken: tokens[i], Stamp: clock.Now()})
		if err == nil && !ok {
			err = fmt.Errorf("%s not released", keys[i])
		}
		return err
	})
	// The floor: bsm/redislock's two commands on the same keys, a SET NX PX
	// and its compare-and-delete script.
	measure("redislock-obtain", "set", func(i int) error {
		return admin.SetNX(ctx, o.KeyPrefix+keys[i], tokens[i], time.Minute).Err()
	})
	measure("redislock-release", "evalsha", func(i int) error {
		return redislockRelease.Run(ctx, admin, []string{o.KeyPrefix + keys[i]}, tokens[i]).Err()
	})
}

// redislockRelease is bsm/redislock's release script.
var redislockRelease = goredis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// redisCPU is the CPU time the Redis server has used (INFO cpu, user and
// system): unlike commandstats' wall time it does not grow while the server
// waits for a core, so it compares scripts on a loaded machine.
func redisCPU(ctx context.Context, b *testing.B, c *goredis.Client) time.Duration {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(infoField(info, f), 64)
		if err != nil {
			b.Fatalf("INFO cpu %s: %v", f, err)
		}
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

// commandStats sums INFO commandstats: the calls and usec of the command
// top (EVALSHA counted with EVAL, which loads a script), and the calls of
// every other command but the benchmark's and the connections'
// own (INFO, CONFIG, HELLO, CLIENT, PING).
func commandStats(info, top string) (calls, usec, inner int64) {
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		fields := map[string]int64{}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseFloat(v, 64)
			fields[k] = int64(n)
		}
		switch {
		case name == top || top == "evalsha" && name == "eval":
			calls += fields["calls"]
			usec += fields["usec"]
		case name == "info" || name == "hello" || name == "ping" ||
			strings.HasPrefix(name, "config") || strings.HasPrefix(name, "client"):
		default:
			inner += fields["calls"]
		}
	}
	return calls, usec, inner
}
