package fencedlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/names"
	"github.com/fencedlock/fencedlock/internal/script"
)

// Info is what Redis said of a resource at one moment: see
// Locker.Inspect.
type Info struct {
	// Held says whether a lock on the resource was held.
	Held bool
	// Token is the holder's fencing token; 0 when not held.
	Token Token
	// TTL is the lock's remaining time to live; 0 when not held.
	TTL time.Duration
	// Waiters is how many processes waited in the queue. A Locker queues
	// only its first waiter for a resource in Redis, so goroutines
	// waiting behind it in the same process are not counted.
	Waiters int
	// Counter is the resource's token counter: every token granted so
	// far is at or below it. 0 when the counter is missing (never used,
	// or expired after the resource was idle, see WithIdleExpiry).
	Counter Token
}

// Inspect returns what Redis says of resource now, in one read-only round
// trip: whether its lock is held, by which token and for how long, how
// many processes wait for it, and its token counter.
//
// It is a snapshot for dashboards and debugging, never a reason to
// write: the lock can change hands right after Inspect returns. Only a
// fenced store's token check makes a write safe.
//
// An invalid resource returns an error wrapping ErrInvalidArgument; keys
// holding what the library did not write, ErrCorrupt; Redis unreachable
// or not answering before ctx ends, ErrUnavailable.
func (l *Locker) Inspect(ctx context.Context, resource string) (Info, error) {
	if err := l.check(resource); err != nil {
		return Info{}, err
	}
	lockKey := keyFor(l.prefix, resource, "lock")
	counterKey := keyFor(l.prefix, resource, "token")
	deadlines := keyFor(l.prefix, resource, "deadlines")
	res, err := call.Bounded(ctx, l.heeds, func(ctx context.Context) ([]any, error) {
		return inspectScript.Run(ctx, l.client, script.Keys(lockKey, counterKey, deadlines)).Slice()
	})
	if err != nil {
		return Info{}, redisErr(ctx, "inspect", resource, err, lockKey, counterKey, deadlines)
	}
	r, err := decodeInspect(res)
	if err != nil {
		return Info{}, fmt.Errorf("fencedlock: inspect %s: %w", names.Quote(resource), err)
	}
	var info Info
	if r.held {
		v := r.lock
		i := strings.LastIndexByte(v, ':')
		t, err := ParseToken(v[i+1:])
		if i < 0 || err != nil || t == 0 {
			return Info{}, fmt.Errorf("%w: inspect %s: lock key %s holds %s, not an owner and a token", ErrCorrupt, names.Quote(resource), names.Quote(lockKey), names.Quote(v))
		}
		info.Held, info.Token = true, t
		if r.pttl > 0 {
			info.TTL = time.Duration(r.pttl) * time.Millisecond
		}
	}
	if r.waiters > 0 {
		info.Waiters = int(r.waiters)
	}
	if r.counted {
		// As the scripts read it (read_counter): digits without a
		// leading zero, at most 2^63-1; any other value they refuse.
		t, err := ParseToken(r.counter)
		if err != nil || r.counter != t.String() || t > maxFloor+1 {
			return Info{}, fmt.Errorf("%w: inspect %s: token counter %s holds %s, not a token", ErrCorrupt, names.Quote(resource), names.Quote(counterKey), names.Quote(r.counter))
		}
		info.Counter = t
	}
	return info, nil
}

// inspectReply is the reply of inspect.lua, decoded: what the keys
// hold, unchecked.
type inspectReply struct {
	held    bool   // the lock key exists
	lock    string // held: its value
	pttl    int64  // its PTTL in milliseconds (negative when free)
	waiters int64  // how many queue entries are alive
	counted bool   // the counter exists
	counter string // counted: its value
}

// decodeInspect decodes the reply of inspect.lua: {lock, pttl, waiters,
// counter}, lock and counter each false when missing.
func decodeInspect(res []any) (inspectReply, error) {
	var r inspectReply
	ok := len(res) == 4
	if ok {
		r.lock, r.held = res[0].(string)
		r.counter, r.counted = res[3].(string)
		var okTTL, okWaiters bool
		r.pttl, okTTL = res[1].(int64)
		r.waiters, okWaiters = res[2].(int64)
		ok = okTTL && okWaiters && (r.held || res[0] == nil) && (r.counted || res[3] == nil)
	}
	if !ok {
		return inspectReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	return r, nil
}
