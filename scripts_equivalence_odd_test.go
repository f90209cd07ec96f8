package fencedlock

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// equivOdd is a state of a resource's keys that equivStates does not
// build: a key of the queue or the marker of another type, one key of
// the queue without the other, a deadline exactly at the server clock, a
// counter at the clock, a lock value that is the owner alone.
type equivOdd struct {
	name string
	// miniOnly: the state is at the server clock, which only miniredis
	// holds still between the runs
	miniOnly bool
	put      func(ctx context.Context, p redis.Pipeliner, keys []string, baseUS, baseMS int64)
}

func equivOddStates() []equivOdd {
	live := func(baseMS int64) int64 { return baseMS + 600000 }
	var odd []equivOdd
	locks := map[string]func(ctx context.Context, p redis.Pipeliner, k string){
		"free": func(context.Context, redis.Pipeliner, string) {},
		"own": func(ctx context.Context, p redis.Pipeliner, k string) {
			p.Set(ctx, k, equivOwner+"777", 20*time.Second)
		},
		"owner alone": func(ctx context.Context, p redis.Pipeliner, k string) {
			p.Set(ctx, k, equivOwner, 20*time.Second)
		},
	}
	rest := []equivOdd{
		{name: "queue a string", put: func(ctx context.Context, p redis.Pipeliner, k []string, _, _ int64) {
			p.Set(ctx, k[2], "x", time.Minute)
		}},
		{name: "queue a list", put: func(ctx context.Context, p redis.Pipeliner, k []string, _, _ int64) {
			p.RPush(ctx, k[2], equivNext)
		}},
		{name: "queue absent, deadlines a string", put: func(ctx context.Context, p redis.Pipeliner, k []string, _, _ int64) {
			p.Set(ctx, k[3], "x", time.Minute)
		}},
		{name: "queue [other], deadlines a string", put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, _ int64) {
			p.ZAdd(ctx, k[2], redis.Z{Score: float64(baseUS - 5000000), Member: equivOther + equivTTL})
			p.Set(ctx, k[3], "x", time.Minute)
		}},
		{name: "queue [other] without deadlines", put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, _ int64) {
			p.ZAdd(ctx, k[2], redis.Z{Score: float64(baseUS - 5000000), Member: equivOther + equivTTL})
		}},
		{name: "queue [next] without deadlines", put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, _ int64) {
			p.ZAdd(ctx, k[2], redis.Z{Score: float64(baseUS - 5000000), Member: equivNext})
		}},
		{name: "deadlines of other without queue", put: func(ctx context.Context, p redis.Pipeliner, k []string, _, baseMS int64) {
			p.HSet(ctx, k[3], equivOther+equivTTL, live(baseMS))
		}},
		{name: "deadline not a number", put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, _ int64) {
			p.ZAdd(ctx, k[2], redis.Z{Score: float64(baseUS - 5000000), Member: equivOther + equivTTL})
			p.HSet(ctx, k[3], equivOther+equivTTL, "soon")
		}},
		{name: "marker a hash", put: func(ctx context.Context, p redis.Pipeliner, k []string, _, _ int64) {
			p.HSet(ctx, k[4], "f", "v")
		}},
		{name: "marker a hash, queue [dead]", put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, baseMS int64) {
			p.HSet(ctx, k[4], "f", "v")
			p.ZAdd(ctx, k[2], redis.Z{Score: float64(baseUS - 5000000), Member: "old:" + equivTTL})
			p.HSet(ctx, k[3], "old:"+equivTTL, baseMS-1000)
		}},
		{name: "queue [other] dead exactly now", miniOnly: true, put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, baseMS int64) {
			p.ZAdd(ctx, k[2], redis.Z{Score: float64(baseUS - 5000000), Member: equivOther + equivTTL})
			p.HSet(ctx, k[3], equivOther+equivTTL, baseMS)
		}},
		{name: "queue [other] live for 1ms more", miniOnly: true, put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, baseMS int64) {
			p.ZAdd(ctx, k[2], redis.Z{Score: float64(baseUS - 5000000), Member: equivOther + equivTTL})
			p.HSet(ctx, k[3], equivOther+equivTTL, baseMS+1)
		}},
		{name: "queue [next] dead exactly now, marker", miniOnly: true, put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, baseMS int64) {
			p.ZAdd(ctx, k[2], redis.Z{Score: float64(baseUS - 5000000), Member: equivNext})
			p.HSet(ctx, k[3], equivNext, baseMS)
			p.Set(ctx, k[4], "1", 5*time.Second)
		}},
		{name: "counter at the clock", miniOnly: true, put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, _ int64) {
			p.Set(ctx, k[1], strconv.FormatInt(baseUS, 10), 0)
		}},
		{name: "counter 1us behind the clock", miniOnly: true, put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, _ int64) {
			p.Set(ctx, k[1], strconv.FormatInt(baseUS-1, 10), 0)
		}},
		{name: "counter with a leading zero", put: func(ctx context.Context, p redis.Pipeliner, k []string, _, _ int64) {
			p.Set(ctx, k[1], "012345", 0)
		}},
		{name: "counter negative", put: func(ctx context.Context, p redis.Pipeliner, k []string, _, _ int64) {
			p.Set(ctx, k[1], "-12345", 0)
		}},
		{name: "counter empty", put: func(ctx context.Context, p redis.Pipeliner, k []string, _, _ int64) {
			p.Set(ctx, k[1], "", 0)
		}},
		{name: "nothing else", put: func(context.Context, redis.Pipeliner, []string, int64, int64) {}},
	}
	for _, lock := range []string{"free", "own", "owner alone"} {
		putLock := locks[lock]
		for _, r := range rest {
			r := r
			odd = append(odd, equivOdd{
				name:     "lock " + lock + ", " + r.name,
				miniOnly: r.miniOnly,
				put: func(ctx context.Context, p redis.Pipeliner, k []string, baseUS, baseMS int64) {
					p.Del(ctx, k...)
					putLock(ctx, p, k[0])
					r.put(ctx, p, k, baseUS, baseMS)
				},
			})
		}
	}
	return odd
}

// TestFastPathsAreEquivalentOnOddKeys runs the runs of
// TestFastPathsAreEquivalentToTheFullScripts on the states equivOddStates
// builds: the shipped script and the script without its fast path must
// answer alike (an error too, but for its script and line) and leave the
// same keys, and the fast path alone, when it does not decide, must
// write nothing.
func TestFastPathsAreEquivalentOnOddKeys(t *testing.T) {
	runs := equivRuns(t)
	// and the runs with no life for a candidate that is queued (ARGV[7]
	// empty), which the header allows
	for _, r := range runs {
		if r.name == "release" && r.args[5] == equivNext {
			r.args = append([]any(nil), r.args...)
			r.args[6] = ""
			runs = append(runs, r)
			break
		}
	}
	redistest.Each(t, func(t *testing.T, be *redistest.Backend) {
		skipMiniUnderRace(t, be)
		e := newEquivBackend(t, be)
		for _, r := range runs {
			for _, s := range equivOddStates() {
				if s.miniOnly && be.Miniredis() == nil {
					continue
				}
				e.compare(r, r.args, fmt.Sprintf("%s %v, %s", r.name, r.args, s.name), func(p redis.Pipeliner, keys []string) {
					s.put(e.ctx, p, keys, e.base.UnixMicro(), e.base.UnixMilli())
				})
			}
		}
		t.Logf("%d odd states compared", e.n)
	})
}
