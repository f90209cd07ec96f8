package safety

import (
	"strconv"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock"
)

// What the faults did, seen from the history: why each stale write was
// attempted, and whether the process stops found their child holding a
// lock. Both are for the report; the checkers judge the writes.

// Likely causes of a stale write attempt, tried in this order; the first
// that fits is counted.
const (
	causePause     = "pause"      // the client slept past its TTL before the write (op.Paused)
	causeSigstop   = "sigstop"    // its process was stopped between its acquire and its write
	causeLate      = "late"       // the write itself was delivered after its client gave up
	causeStoreSlow = "store-slow" // the store's network was held up or slowed between its acquire and its write
	causeLateGrant = "late-grant" // a network fault on its own lock connection during its acquire
	causeLockLost  = "lock-lost"  // a restart, flush or failover between its acquire and its write
	causeOther     = "other"
)

var causeOrder = []string{causePause, causeSigstop, causeLate, causeStoreSlow, causeLateGrant, causeLockLost, causeOther}

// staleCauses classifies the stale writes attempted, given by value, and
// returns their count by cause. applied gives, by value, when the store
// applied a write (zero when unknown, without a ledger).
func staleCauses(stale []string, ops []op, events []faultEvent, applied map[string]int64) map[string]int {
	puts := map[string]op{}
	type grantKey struct {
		client   int
		resource string
		token    fencedlock.Token
	}
	grants := map[grantKey][]op{} // in call order: ops are sorted
	for _, o := range ops {
		switch {
		case o.Kind == opPut:
			puts[o.Value] = o
		case o.Kind == opAcquire && o.Outcome == outOK:
			k := grantKey{o.Client, o.Resource, o.Token}
			grants[k] = append(grants[k], o)
		}
	}
	// during reports whether an event of one of the kinds, on client,
	// overlaps [from, to].
	during := func(client int, from, to int64, match func(kind string) bool) bool {
		for _, e := range events {
			if !match(e.Kind) || e.End < from || e.Start > to {
				continue
			}
			if e.Clients == nil || containsInt(e.Clients, client) {
				return true
			}
		}
		return false
	}
	out := map[string]int{}
	for _, v := range stale {
		p, ok := puts[v]
		if !ok {
			out[causeOther]++
			continue
		}
		// The grant the write used: the client's last one of that token
		// before the write.
		var g op
		for _, a := range grants[grantKey{p.Client, p.Resource, p.Token}] {
			if a.Call < p.Call {
				g = a
			}
		}
		if g.Kind == "" {
			g = op{Call: p.Call, Return: p.Call}
		}
		var cause string
		switch {
		case p.Paused:
			cause = causePause
		case during(p.Client, g.Call, p.Call, func(k string) bool { return k == faultSigstop }):
			cause = causeSigstop
		case p.Outcome != outOK && p.Outcome != outStale && applied[v] > p.Return:
			cause = causeLate
		case during(p.Client, g.Return, p.Call, func(k string) bool {
			return k == faultLateWrite || strings.HasPrefix(k, faultStoreProxy+"-")
		}):
			cause = causeStoreSlow
		case during(p.Client, g.Call, g.Return, func(k string) bool { return strings.HasPrefix(k, faultProxy+"-") }):
			cause = causeLateGrant
		case during(p.Client, g.Call, p.Call, func(k string) bool {
			return k == faultRestart || k == faultFlushAll || k == faultFailover || k == faultKillMaster
		}):
			cause = causeLockLost
		default:
			cause = causeOther
		}
		out[cause]++
	}
	return out
}

func containsInt(list []int, x int) bool {
	for _, v := range list {
		if v == x {
			return true
		}
	}
	return false
}

// formatCauses formats stale write causes: "pause 12, late 3".
func formatCauses(causes map[string]int) string {
	var parts []string
	for _, c := range causeOrder {
		if causes[c] > 0 {
			parts = append(parts, c+" "+strconv.Itoa(causes[c]))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

// stopsWhileHolding counts the SIGSTOPs that began while their child held
// a lock: after one of its acquires returned a grant and before it called
// that lock's release.
func stopsWhileHolding(ops []op, events []faultEvent) (stops, holding int) {
	type interval struct{ from, to int64 }
	holds := map[int][]interval{}
	type lockKey struct {
		client   int
		resource string
		token    fencedlock.Token
	}
	open := map[lockKey]int64{} // the grant's return
	key := func(o op) lockKey { return lockKey{o.Client, o.Resource, o.Token} }
	for _, o := range ops {
		switch {
		case o.Kind == opAcquire && o.Outcome == outOK:
			open[key(o)] = o.Return
		case o.Kind == opRelease:
			if from, ok := open[key(o)]; ok {
				holds[o.Client] = append(holds[o.Client], interval{from, o.Call})
				delete(open, key(o))
			}
		}
	}
	for _, e := range events {
		if e.Kind != faultSigstop || len(e.Clients) != 1 {
			continue
		}
		stops++
		for _, h := range holds[e.Clients[0]] {
			if h.from <= e.Start && e.Start <= h.to {
				holding++
				break
			}
		}
	}
	return stops, holding
}

// stallEffects returns how many waiting acquires were waiting when a
// stall of the lock network began and reached their deadline (acquireFor)
// during it; how many of those returned more than deadlineSlack after
// their deadline (every call should return within its deadline, plus a
// few ms); and how many acquires returned a Lock during a stall, when no
// grant can come back from Redis (more than a few ms after its start,
// while the proxies hold every reply).
func stallEffects(ops []op, events []faultEvent) (waited, overran, returned int) {
	const settle = int64(10 * time.Millisecond) // replies written as the stall began
	for _, e := range events {
		if e.Kind != faultStall {
			continue
		}
		for _, o := range ops {
			if o.Kind != opAcquire {
				continue
			}
			deadline := o.Call + int64(acquireFor)
			if o.Wait && o.Call <= e.Start && o.Return > e.Start && deadline <= e.End {
				waited++
				if o.Return > deadline+int64(deadlineSlack) {
					overran++
				}
			}
			if o.Outcome == outOK && o.Return > e.Start+settle && o.Return < e.End {
				returned++
			}
		}
	}
	return waited, overran, returned
}

// deadlineSlack is how late after its ctx deadline a call may return
// before the report counts it as overrun.
const deadlineSlack = 100 * time.Millisecond
