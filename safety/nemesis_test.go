package safety

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The nemesis injects a scenario's faults one after another, at random,
// with quiet gaps between them, until the workload's end, and counts each
// fault it injected. It runs on the scenario's test goroutine, so that
// the redistest helpers it calls (Restart) may fail the test; the clients
// run in goroutines and child processes beside it.
//
// Fault kinds (what each is for):
//   - faultProxy: the network between the lock clients and Redis (the
//     lock proxy): latency (round trips longer than the TTL, so a grant can
//     arrive already expired), a stall (Pause: heartbeats stop, locks
//     expire while their holders wait for Redis), lost replies
//     (DropReplies: go-redis resends scripts that already ran), broken
//     connections (CloseAll).
//   - faultStoreProxy: the same on the network between the clients and the
//     store, when the clients use a RedisStore directly.
//   - faultLateWrite: HoldRequests on the store proxy: a write is delivered
//     after its client gave up and after its lock's TTL; a newer holder
//     has usually written meanwhile, and the store must refuse it.
//   - faultSigstop: a child process is stopped past the TTL, then resumed.
//   - faultRestart: the lock Redis is killed (SIGKILL) and restarted
//     empty: every lock and token counter is lost.
//   - faultFlushAll: FLUSHALL on the lock Redis (every master of a
//     cluster): the same loss without a restart.
//   - faultFailover: see failoverRig.
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
)

// nemesis is one scenario's fault injector. Only the test goroutine uses
// it.
type nemesis struct {
	t      *testing.T
	rng    *rand.Rand
	ttl    time.Duration
	kinds  []string
	counts map[string]int // faults injected, by kind (and sub-kind)

	lockProxy  *redistest.Proxy  // faultProxy
	storeProxy *redistest.Proxy  // faultLateWrite, faultStoreProxy
	lockServer *redistest.Server // faultRestart
	lockAdmin  []*redis.Client   // faultFlushAll: direct clients of every master
	children   *children         // faultSigstop
	failover   *failoverRig      // faultFailover
	holdFor    time.Duration     // faultLateWrite: how long a write is held
	lastHold   time.Time         // when the last hold was asked for; zero if none was
	errs       []error           // faults that could not be injected
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

func (n *nemesis) count(kind string) { n.counts[kind]++ }

// between returns a random duration in [lo, hi).
func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int63n(int64(hi-lo)))
}

func (n *nemesis) inject(kind string) {
	switch kind {
	case faultProxy:
		n.proxyFault(n.lockProxy, "proxy")
	case faultStoreProxy:
		n.proxyFault(n.storeProxy, "store-proxy")
	case faultLateWrite:
		// The next few requests to the store are held past their
		// clients' timeout and past the TTL; the nemesis waits for them
		// to be delivered before its next fault.
		n.storeProxy.HoldRequests(2+n.rng.Intn(3), n.holdFor)
		n.lastHold = time.Now()
		n.count(faultLateWrite)
		time.Sleep(n.holdFor)
	case faultSigstop:
		running := n.children.running()
		if len(running) == 0 {
			return
		}
		c := running[n.rng.Intn(len(running))]
		if err := c.stop(); err != nil {
			return // it has just exited
		}
		n.count(faultSigstop)
		time.Sleep(n.between(n.ttl+100*time.Millisecond, n.ttl+500*time.Millisecond))
		c.cont()
	case faultRestart:
		n.lockServer.Restart(n.t)
		n.count(faultRestart)
	case faultFlushAll:
		for _, c := range n.lockAdmin {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := c.FlushAll(ctx).Err()
			cancel()
			if err != nil {
				n.errs = append(n.errs, err)
			}
		}
		n.count(faultFlushAll)
	case faultFailover:
		if err := n.failover.step(n.rng, n.ttl); err != nil {
			n.errs = append(n.errs, err)
		}
		n.count(faultFailover)
	default:
		n.t.Fatalf("unknown fault %q", kind)
	}
}

// proxyFault injects one network fault through p, counted as
// "<name>-<sub-kind>".
func (n *nemesis) proxyFault(p *redistest.Proxy, name string) {
	switch n.rng.Intn(4) {
	case 0:
		// Latency: each chunk is delayed this long, each way, so that a
		// round trip can outlast the TTL and a grant arrive expired.
		p.Delay(n.between(n.ttl/2, n.ttl+n.ttl/2))
		n.count(name + "-delay")
		time.Sleep(n.between(300*time.Millisecond, time.Second))
		p.Delay(0)
	case 1:
		// A stall longer than the TTL: holders' heartbeats stop reaching
		// Redis, and locks expire.
		p.Pause()
		n.count(name + "-pause")
		time.Sleep(n.between(n.ttl+100*time.Millisecond, n.ttl+500*time.Millisecond))
		p.Resume()
	case 2:
		p.DropReplies(1 + n.rng.Intn(3))
		n.count(name + "-drop")
		time.Sleep(200 * time.Millisecond)
	default:
		p.CloseAll()
		n.count(name + "-closeall")
	}
}

// heal undoes what a fault may have left in place when the workload ended.
func (n *nemesis) heal() {
	for _, p := range []*redistest.Proxy{n.lockProxy, n.storeProxy} {
		if p != nil {
			p.Delay(0)
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
