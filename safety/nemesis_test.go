package safety

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The nemesis injects a scenario's faults one after another, at random,
// with quiet gaps between them, until the workload's end, and counts each
// fault it injected and what it did. It runs on the scenario's test
// goroutine, so that the redistest helpers it calls (Restart) may fail the
// test; the clients run in goroutines and child processes beside it.
//
// Fault kinds (what each is for):
//   - faultProxy: the network between ONE lock client process (a Locker
//     and its two goroutines, or a child) and Redis: each has its own
//     proxy, and the nemesis picks one at random, so that its calls are
//     slowed while the others' are not. Latency longer than the TTL each
//     way (the grant reaches its client after it expired, while another
//     client takes the lock and writes: the late client writes stale), a
//     stall (Pause: heartbeats stop, locks expire, a reply held in the
//     stall arrives late), lost replies (DropReplies: go-redis resends
//     scripts that already ran), broken connections (CloseAll).
//   - faultStoreProxy: latency, stalls, lost replies and broken
//     connections on the network between the clients and the store, when
//     the clients use a RedisStore directly.
//   - faultLateWrite: HoldRequests on the store proxy: a write is delivered
//     after its client gave up and after its lock's TTL; a newer holder
//     has usually written meanwhile, and the store must refuse it.
//   - faultSigstop: a child process is stopped past the TTL, then resumed.
//   - faultRestart: the lock Redis is killed (SIGKILL) and restarted
//     empty: every lock and token counter is lost.
//   - faultFlushAll: FLUSHALL on the lock Redis (every master of a
//     cluster): the same loss without a restart.
//   - faultFailover: see failoverRig.
//   - faultKillMaster: see sentinelRig.
//   - faultLateReply: a Release or a Refresh whose reply is delayed past
//     its ctx, on a Locker with a waiter of its own, and then called
//     again: run by one of the Locker's goroutines (see latereply_test.go).
//   - faultStall: every lock client's network stalled (Pause) for longer
//     than the waiters' deadline (acquireFor) while they wait in Acquire,
//     then resumed: no lock call can get an answer meanwhile.
//
// The pause fault (a holder sleeping past its TTL) is the clients' own:
// see clientSpec.PauseEvery.
const (
	faultProxy      = "proxy"
	faultStoreProxy = "store-proxy"
	faultLateWrite  = "late-write"
	faultSigstop    = "sigstop"
	faultRestart    = "restart"
	faultFlushAll   = "flushall"
	faultFailover   = "failover"
	faultKillMaster = "kill-master"
	faultLateReply  = "late-reply"
	faultStall      = "stall"
)

// stallExtraMin and stallExtraMax bound how much longer than acquireFor
// the stall fault lasts.
const (
	stallExtraMin = 200 * time.Millisecond
	stallExtraMax = 600 * time.Millisecond
)

// lateGrantDelay bounds the latency of the proxy fault's delay, each way,
// on one lock client's network: above the TTL by at least 100ms, so that a
// grant made when the request arrives has expired when its reply does;
// and the round trip (twice the delay) well below lockReadTimeout and
// acquireFor, so that the client does get the late grant, and writes with
// it.
const (
	lateGrantDelayMin = lockTTL + 100*time.Millisecond
	lateGrantDelayMax = lockTTL + 400*time.Millisecond
	// lockReadTimeout is the lock clients' ReadTimeout in scenarios with
	// the proxy fault (redisTimeout elsewhere): longer than a delayed
	// round trip.
	lockReadTimeout = 2*lateGrantDelayMax + 300*time.Millisecond
)

// A lockProxy is the network of one lock client process to Redis.
type lockProxy struct {
	proxy   *redistest.Proxy
	clients []int // the ids of the clients that use it
}

// A faultEvent is one fault as injected: what, on whom, and when (wall
// clock, as op.Call), for the report's attribution of stale writes and
// effects.
type faultEvent struct {
	Kind    string // as counted: "sigstop", "proxy-delay", "restart" ...
	Clients []int  // the clients it targets; nil: all of them
	Start   int64
	End     int64
}

// effects is what the faults were seen to do, measured when they were
// injected. The history adds more (see effectReport).
type effects struct {
	// KeysLost counts, by fault kind (restart, flushall), the token
	// counters the lock Redis held just before the fault: every one is
	// lost, since the lock Redis was found empty after each fault.
	KeysLost map[string]int
	// LossyFaults counts, by kind, the restarts and flushes that lost at
	// least one counter.
	LossyFaults map[string]int
	// Failovers counts the failovers (faultFailover, faultKillMaster)
	// whose steps all succeeded, and FailoversLost those among them whose
	// promoted replica had a token counter below the old master's: grants
	// lost. FailoversCut counts the kill-master failovers whose replicas
	// were cut off before the kill.
	Failovers     int
	FailoversLost int
	FailoversCut  int
	// HoldsAsked counts the requests the late-write fault asked the store
	// proxy to hold; HoldsDelivered those delivered to the store after
	// their hold.
	HoldsAsked     int
	HoldsDelivered int
	// LateReplies are the late-reply faults' cycles, by call (release,
	// refresh).
	LateReplies map[string][]lateReplyResult
}

// nemesis is one scenario's fault injector. Only the test goroutine uses
// it.
type nemesis struct {
	t      *testing.T
	rng    *rand.Rand
	ttl    time.Duration
	kinds  []string
	counts map[string]int // faults injected, by kind (and sub-kind)
	events []faultEvent
	eff    effects

	lockProxies []lockProxy       // faultProxy, faultStall; on one node, one per lock client process
	lockers     []*lockerState    // faultLateReply: the in-process Lockers
	storeProxy  *redistest.Proxy  // faultLateWrite, faultStoreProxy
	lockServer  *redistest.Server // faultRestart
	lockAdmin   []*redis.Client   // faultFlushAll, faultRestart: direct clients of every master
	children    *children         // faultSigstop
	failover    *failoverRig      // faultFailover
	sentinel    *sentinelRig      // faultKillMaster
	holdFor     time.Duration     // faultLateWrite: how long a write is held
	lastHold    time.Time         // when the last hold was asked for; zero if none was
	errs        []error           // faults that could not be injected, or did not do what they should
}

func newNemesis(t *testing.T, seed int64, kinds []string) *nemesis {
	return &nemesis{
		t: t, rng: rand.New(rand.NewSource(seed)), ttl: lockTTL, kinds: kinds, counts: map[string]int{},
		eff:     effects{KeysLost: map[string]int{}, LossyFaults: map[string]int{}, LateReplies: map[string][]lateReplyResult{}},
		holdFor: lateWriteHold, children: &children{},
	}
}

// run injects faults until stopAt, then heals everything it may have left
// broken (a proxy paused or slowed, a child stopped).
func (n *nemesis) run(stopAt time.Time) {
	defer n.heal()
	if len(n.kinds) == 0 {
		time.Sleep(time.Until(stopAt))
		return
	}
	// The kinds come in rounds, each round in a random order, so that
	// every kind is injected once the workload is long enough for a round.
	var round []string
	for {
		quiet := time.Duration(50+n.rng.Intn(200)) * time.Millisecond
		if time.Until(stopAt) < quiet {
			time.Sleep(time.Until(stopAt))
			return
		}
		time.Sleep(quiet)
		if len(round) == 0 {
			round = append(round, n.kinds...)
			n.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		n.inject(round[0])
		round = round[1:]
	}
}

// record counts a fault of kind that began at start and ends now.
func (n *nemesis) record(kind string, clients []int, start int64) {
	n.counts[kind]++
	n.events = append(n.events, faultEvent{Kind: kind, Clients: clients, Start: start, End: now()})
}

// between returns a random duration in [lo, hi).
func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int63n(int64(hi-lo)))
}

func (n *nemesis) inject(kind string) {
	start := now()
	switch kind {
	case faultProxy:
		lp := n.lockProxies[n.rng.Intn(len(n.lockProxies))]
		n.proxyFault(lp.proxy, lp.clients, "proxy", lateGrantDelayMin, lateGrantDelayMax)
	case faultStoreProxy:
		n.proxyFault(n.storeProxy, nil, "store-proxy", n.ttl/2, n.ttl+n.ttl/2)
	case faultLateWrite:
		// The next few requests to the store are held past their
		// clients' timeout and past the TTL; the nemesis waits for them
		// to be delivered before its next fault.
		k := 2 + n.rng.Intn(3)
		n.storeProxy.HoldRequests(k, n.holdFor)
		n.eff.HoldsAsked += k
		n.lastHold = time.Now()
		time.Sleep(n.holdFor)
		n.record(faultLateWrite, nil, start)
	case faultSigstop:
		running := n.children.running()
		if len(running) == 0 {
			return
		}
		c := running[n.rng.Intn(len(running))]
		if err := c.stop(); err != nil {
			return // it has just exited
		}
		time.Sleep(n.between(n.ttl+100*time.Millisecond, n.ttl+500*time.Millisecond))
		c.cont()
		n.record(faultSigstop, []int{c.id}, start)
	case faultRestart:
		n.restart(start)
	case faultFlushAll:
		n.flushAll(start)
	case faultFailover:
		lost, err := n.failover.step(n.rng, n.ttl)
		n.failedOver(faultFailover, start, lost, err)
	case faultKillMaster:
		cut, lost, err := n.sentinel.step(n.t, n.rng)
		if n.failedOver(faultKillMaster, start, lost, err) && cut {
			n.eff.FailoversCut++
		}
	case faultLateReply:
		n.lateReply()
	case faultStall:
		for _, lp := range n.lockProxies {
			lp.proxy.Pause()
		}
		time.Sleep(acquireFor + n.between(stallExtraMin, stallExtraMax))
		for _, lp := range n.lockProxies {
			lp.proxy.Resume()
		}
		n.record(faultStall, nil, start)
	default:
		n.t.Fatalf("unknown fault %q", kind)
	}
}

// failedOver counts a failover of kind that began at start, and reports
// whether it completed: err says why it did not, lost that the promoted
// replica had missed grants.
func (n *nemesis) failedOver(kind string, start int64, lost bool, err error) bool {
	if err != nil {
		n.errs = append(n.errs, err)
		return false
	}
	n.eff.Failovers++
	if lost {
		n.eff.FailoversLost++
	}
	n.record(kind, nil, start)
	return true
}

// lateReply arms the late-reply fault on one in-process Locker and waits
// for one of its goroutines to run it. Release comes twice as often as
// Refresh; with Release, the other Locker's waiter always queues first
// (the bug's sequence), with Refresh half the time. Half the cycles run
// on lateReplyResource, the others on a resource of the workload.
func (n *nemesis) lateReply() {
	ls := n.lockers[n.rng.Intn(len(n.lockers))]
	o := &lateReplyOrder{call: lateRelease, delay: n.between(lateReplyDelayMin, lateReplyDelayMax), peer: true, done: make(chan lateReplyResult, 1)}
	if n.rng.Intn(3) == 0 {
		o.call, o.peer = lateRefresh, n.rng.Intn(2) == 0
	}
	if n.rng.Intn(2) == 0 {
		o.resource = lateReplyResource
	}
	ls.arm(o)
	t := time.NewTimer(lateReplyWait)
	defer t.Stop()
	select {
	case res := <-o.done:
		n.eff.LateReplies[o.call] = append(n.eff.LateReplies[o.call], res)
		n.counts[faultLateReply+"-"+o.call]++
		n.events = append(n.events, faultEvent{Kind: faultLateReply + "-" + o.call, Clients: ls.clients(), Start: res.Start, End: res.End})
	case <-t.C:
		if ls.disarm(o) {
			return // no cycle began: the clients are done
		}
		n.errs = append(n.errs, fmt.Errorf("late-reply: the cycle took more than %v", lateReplyWait))
	}
}

// tokenKeys matches the Locker's token counters ("{<resource>}:token").
const tokenKeys = "*}:token"

// restart kills the lock Redis and starts it again, with the lock proxies
// paused meanwhile so that no client reaches the new server before it is
// checked: it must be empty. The counters it held before are lost.
func (n *nemesis) restart(start int64) {
	for _, lp := range n.lockProxies {
		lp.proxy.Pause()
	}
	defer func() {
		for _, lp := range n.lockProxies {
			lp.proxy.Resume()
		}
	}()
	admin := n.lockAdmin[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys, err := admin.Keys(ctx, tokenKeys).Result()
	if err != nil {
		n.errs = append(n.errs, fmt.Errorf("restart: counting the counters: %w", err))
	}
	n.lockServer.Restart(n.t)
	size, err := admin.DBSize(ctx).Result()
	switch {
	case err != nil:
		n.errs = append(n.errs, fmt.Errorf("restart: DBSIZE after the restart: %w", err))
	case size != 0:
		n.errs = append(n.errs, fmt.Errorf("restart: the lock Redis holds %d keys after its restart, want 0", size))
	}
	n.lost(faultRestart, len(keys))
	n.record(faultRestart, nil, start)
}

// flushAll flushes every master of the lock Redis, each in one MULTI that
// lists its counters, flushes and counts what is left: nothing.
func (n *nemesis) flushAll(start int64) {
	lost := 0
	for _, c := range n.lockAdmin {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var keys *redis.StringSliceCmd
		var size *redis.IntCmd
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			keys = p.Keys(ctx, tokenKeys)
			p.FlushAll(ctx)
			size = p.DBSize(ctx)
			return nil
		})
		cancel()
		switch {
		case err != nil:
			n.errs = append(n.errs, fmt.Errorf("flushall on %s: %w", c.Options().Addr, err))
		case size.Val() != 0:
			n.errs = append(n.errs, fmt.Errorf("flushall on %s: %d keys left after FLUSHALL, want 0", c.Options().Addr, size.Val()))
		default:
			lost += len(keys.Val())
		}
	}
	n.lost(faultFlushAll, lost)
	n.record(faultFlushAll, nil, start)
}

func (n *nemesis) lost(kind string, keys int) {
	n.eff.KeysLost[kind] += keys
	if keys > 0 {
		n.eff.LossyFaults[kind]++
	}
}

// proxyFault injects one network fault through p, counted as
// "<name>-<sub-kind>"; a delay lasts from lo to hi each way.
func (n *nemesis) proxyFault(p *redistest.Proxy, clients []int, name string, lo, hi time.Duration) {
	start := now()
	// Latency, which makes late grants and late writes, comes half the
	// time, and lasts long enough for a few of the slowed client's calls.
	switch k := n.rng.Intn(6); {
	case k < 3:
		// Latency: each chunk is delayed this long, each way.
		p.Delay(n.between(lo, hi))
		time.Sleep(n.between(time.Second, 2*time.Second))
		p.Delay(0)
		n.record(name+"-delay", clients, start)
	case k == 3:
		// A stall longer than the TTL: holders' heartbeats stop reaching
		// Redis, and locks expire; a reply held meanwhile arrives late.
		p.Pause()
		time.Sleep(n.between(n.ttl+100*time.Millisecond, n.ttl+500*time.Millisecond))
		p.Resume()
		n.record(name+"-pause", clients, start)
	case k == 4:
		p.DropReplies(1 + n.rng.Intn(3))
		time.Sleep(200 * time.Millisecond)
		n.record(name+"-drop", clients, start)
	default:
		p.CloseAll()
		n.record(name+"-closeall", clients, start)
	}
}

// heal undoes what a fault may have left in place when the workload
// ended.
func (n *nemesis) heal() {
	proxies := []*redistest.Proxy{n.storeProxy}
	for _, lp := range n.lockProxies {
		proxies = append(proxies, lp.proxy)
	}
	for _, p := range proxies {
		if p != nil {
			p.Delay(0)
			p.DelayReplies(0)
			p.Resume()
		}
	}
	if n.children != nil {
		for _, c := range n.children.all() {
			if !c.exited() {
				c.cont()
			}
		}
	}
}
