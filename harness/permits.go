package harness

import (
	"sync"
	"testing"
)

// PermitTry is what one racer's attempt at a permit got: whether it was
// granted, its fencing token when it was, and the permits in use that the
// store reported (for a refusal, what it refused against).
type PermitTry struct {
	Granted bool
	Fence   uint64
	InUse   int
}

// RacePermits judges a store's permits where it matters, under real
// concurrency: in each of rounds rounds, racers callers of try (each asking
// one permit of a key with limit permits) start at once and nobody releases
// until all have answered, so exactly limit of them must be granted, every
// refusal must have seen limit permits in use, and no fencing token may be
// issued twice over the whole race. release(i) then gives back racer i's
// grant of the round. It fails t at the first violation.
func RacePermits(t testing.TB, limit, racers, rounds int, try func(i int) (PermitTry, error), release func(i int) error) {
	t.Helper()
	seen := map[uint64]bool{}
	for round := range rounds {
		got := make([]PermitTry, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() { got[i], errs[i] = try(i) })
		}
		wg.Wait()
		granted := 0
		for i, g := range got {
			switch {
			case errs[i] != nil:
				t.Fatalf("round %d, racer %d: %v", round, i, errs[i])
			case !g.Granted:
				if g.InUse != limit {
					t.Fatalf("round %d, racer %d: refused with %d of %d permits in use", round, i, g.InUse, limit)
				}
			case seen[g.Fence]:
				t.Fatalf("round %d, racer %d: fencing token %d issued twice", round, i, g.Fence)
			default:
				seen[g.Fence] = true
				granted++
			}
		}
		if granted != limit {
			t.Fatalf("round %d: %d of %d racers granted, for %d permits", round, granted, racers, limit)
		}
		for i, g := range got {
			if g.Granted {
				if err := release(i); err != nil {
					t.Fatalf("round %d, racer %d: release: %v", round, i, err)
				}
			}
		}
	}
}
