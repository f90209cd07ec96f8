package fencedlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// BenchmarkReleaseHandOver measures the one script that a contended
// acquisition across processes costs Redis: a release that hands the lock
// to the first waiter queued in Redis, another Locker's, and publishes the
// grant to it. Each iteration puts the resource's keys in that state (one
// pipeline of commands the script does not run), then runs the script,
// on a redis-server of its own.
//
//   - back-to-back: the iterations follow each other at once.
//   - idle-1ms: each script runs 1 ms after the pipeline, as in a contended
//     run, whose holds of 1 ms leave Redis idle between hand-overs: the
//     script then runs in cold caches.
//   - +candidate: the releasing Locker has a waiter of its own, which
//     takes its place at the back of the queue, behind a third waiter
//     (the usual hand-over with two or more waiters in each process).
//
// It reports script-µs/op, the script's own time in Redis (INFO
// commandstats: EVALSHA's usec, inner commands included, per script),
// inner-µs/op, what Redis counted for the commands the script ran, and
// inner-calls/op, how many it ran: the rest of script-µs/op is the
// scripting itself, the Lua code and each call's way in and out. Its
// ns/op counts the pipeline and the pause too.
func BenchmarkReleaseHandOver(b *testing.B) {
	for _, idle := range []time.Duration{0, time.Millisecond} {
		for _, candidate := range []bool{false, true} {
			name := "back-to-back"
			if idle > 0 {
				name = "idle-" + idle.String()
			}
			if candidate {
				name += "+candidate"
			}
			b.Run(name, func(b *testing.B) { benchReleaseHandOver(b, idle, candidate) })
		}
	}
}

func benchReleaseHandOver(b *testing.B, idle time.Duration, withCandidate bool) {
	c := redistest.Start(b).Client(b)
	ctx := context.Background()
	tag := "bench:{handover}:"
	keys := []string{tag + "lock", tag + "token", tag + "queue", tag + "deadlines"}
	const (
		owner = "aaaaaaaaaaaaaaaa1111111111111111:" // the releasing Locker's holder
		other = "bbbbbbbbbbbbbbbb2222222222222222:" // another Locker's waiter, first in the queue
		third = "cccccccccccccccc4444444444444444:" // a third Locker's, behind it
		ttl   = "10000"
	)
	candidate, life := "", ""
	if withCandidate {
		keys = append(keys, tag+markerKind+"aaaaaaaaaaaaaaaa3333333333333333")
		candidate, life = "aaaaaaaaaaaaaaaa3333333333333333:"+ttl, "3000"
	}
	idleArg := New(c).idleArg
	keyArgs := make([]any, len(keys))
	for i, k := range keys {
		keyArgs[i] = k
	}
	run := func() {
		now := time.Now()
		// commands the script does not run, so that commandstats tells
		// the two apart
		p := c.Pipeline()
		p.Del(ctx, keys[2], keys[3])
		p.Do(ctx, "PSETEX", keys[0], 10000, owner+"1")
		p.ZIncrBy(ctx, keys[2], float64(now.UnixMicro()), other+ttl)
		p.HIncrBy(ctx, keys[3], other+ttl, now.UnixMilli()+60000)
		if withCandidate {
			p.ZIncrBy(ctx, keys[2], float64(now.UnixMicro()+1), third+ttl)
			p.HIncrBy(ctx, keys[3], third+ttl, now.UnixMilli()+60000)
		}
		p.PExpireAt(ctx, keys[2], now.Add(time.Minute))
		p.PExpireAt(ctx, keys[3], now.Add(time.Minute))
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		if idle > 0 {
			time.Sleep(idle)
		}
		reply, err := releaseScript.Run(ctx, c, keyArgs, owner, tag+"grants:", "", "", idleArg, candidate, life, "").Result()
		if err != nil {
			b.Fatal(err)
		}
		r, err := decodeRelease(reply)
		if err != nil {
			b.Fatal(err)
		}
		if !r.held || r.owner != other || r.told != releasePublished || r.queued != withCandidate {
			b.Fatalf("not the hand-over measured: %+v", r)
		}
	}
	run() // loads the script
	before := commandStats(b, c)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.StopTimer()
	after := commandStats(b, c)
	n := float64(b.N)
	script := float64(after["evalsha"].Usec - before["evalsha"].Usec)
	if calls := after["evalsha"].Calls - before["evalsha"].Calls; calls != int64(b.N) {
		b.Fatalf("%d EVALSHA for %d scripts", calls, b.N)
	}
	// Every other command but the pipeline's and INFO ran in the script.
	var innerCalls, innerUsec int64
	for cmd, st := range after {
		switch cmd {
		case "evalsha", "del", "psetex", "zincrby", "hincrby", "pexpireat", "info":
			continue
		}
		innerCalls += st.Calls - before[cmd].Calls
		innerUsec += st.Usec - before[cmd].Usec
	}
	b.ReportMetric(script/n, "script-µs/op")
	b.ReportMetric(float64(innerUsec)/n, "inner-µs/op")
	b.ReportMetric(float64(innerCalls)/n, "inner-calls/op")
}

// commandStats returns INFO commandstats of the server behind c.
func commandStats(b *testing.B, c *redis.Client) map[string]redistest.CommandStat {
	b.Helper()
	stats, err := redistest.CommandStats(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return stats
}
