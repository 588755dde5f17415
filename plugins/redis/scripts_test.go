package redis

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/plugins/redis/redistest"
)

// TestFmtWritesWholeDigits checks the scripts' fmt against %.0f, which it
// replaced, inside Redis's own Lua: every whole number a script writes
// (fencing tokens and deadlines in µs near 2^51, stamps, TTLs, PTTL's -1
// and -2) must come out as the same decimal digits, or a token written by
// this plugin would read differently in an older one sharing the keys. The
// values straddle fmt's two paths (2^31) and the carries of its split at
// 10^9.
func TestFmtWritesWholeDigits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Addr(t)})
	defer c.Close()
	values := []int64{0, 1, -1, -2, 999999999, 1000000000, 1000000001, 2147483647, 2147483648,
		-2147483647, -2147483648, -2147483649, -4000000000, 1999999999999, 2000000000000, 2000000000001,
		time.Now().UnixMicro(), 1<<53 - 1, 1 << 52}
	for k := int64(1); k < 1<<23; k = k*3 + 1 {
		values = append(values, k*1000000000-1, k*1000000000, k*1000000000+1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		values = append(values, rng.Int64N(1<<53), -rng.Int64N(1<<40))
	}
	args := make([]any, len(values))
	for i, v := range values {
		args[i] = strconv.FormatInt(v, 10)
	}
	script := goredis.NewScript(luaPrelude + `
local out = {}
for i = 1, #ARGV do
  local n = tonumber(ARGV[i])
  out[2 * i - 1], out[2 * i] = fmt(n), string.format('%.0f', n)
end
return out
`)
	res, err := script.Run(ctx, c, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2*len(values) {
		t.Fatalf("%d results for %d values", len(res), len(values))
	}
	for i, v := range values {
		want := strconv.FormatInt(v, 10)
		if got, old := res[2*i], res[2*i+1]; got != want || old != want {
			t.Errorf("%d: fmt wrote %q, %%.0f %q", v, got, old)
		}
	}
}
