package safety

import (
	"fmt"
	"sort"

	"github.com/fencedlock/fencedlock"
)

// Checkers A and B, and the cross-check of what the clients saw against
// what the store applied. Checker C, linearizability of the clients'
// reads and writes, is in model_test.go.

// maxExamples bounds how many violations a checker describes.
const maxExamples = 10

// examples collects the first maxExamples descriptions of violations.
type examples []string

func (e *examples) add(format string, args ...any) {
	if len(*e) < maxExamples {
		*e = append(*e, fmt.Sprintf(format, args...))
	}
}

// ledgerReport is checker A: what the store did with the writes and the
// fences, in the order it applied them. It proves the promise itself: per
// resource, the tokens of the accepted writes and fences never go down.
type ledgerReport struct {
	Puts     int // writes that reached the store
	Accepted int
	Rejected int // refused as stale
	Errors   int // the store failed, and reading it back did not tell whether it wrote

	// Fences that reached the store (Store.Fence): accepted, refused as
	// stale, failed (the store cannot be read back to tell whether it
	// raised the fence).
	Fences, FencesAccepted, FencesRejected, FenceErrors int

	// StaleAccepted counts writes and fences accepted with a token below
	// the resource's fence: the highest token accepted before them, by a
	// write or a fence. The promise: 0.
	StaleAccepted int
	// Lost counts accepted writes overwritten by a write with a lower
	// token: the newer holder's work that a stale holder destroyed. 0.
	Lost int
	// BadRejections counts refusals that the fence rule does not explain:
	// a token not below the fence, or a Current that is not the fence.
	// 0.
	BadRejections int

	// Stale lists the stale writes attempted, by value: the writes that
	// reached the store with a token below the highest token it had
	// accepted for the resource (or, after a store error, might have):
	// Rejected plus StaleAccepted, for a store that applies the rule or
	// not.
	Stale []string

	Violations examples

	// final is, per resource, what the store must hold at the end: the
	// last accepted write, or one of the writes that failed after it and
	// may have landed.
	final map[string]finalState
}

func (r ledgerReport) ok() bool { return r.StaleAccepted == 0 && r.Lost == 0 && r.BadRejections == 0 }

// A finalState is what checker A knows of a resource's stored value.
type finalState struct {
	last    ledgerEntry // the last accepted write: the stored value
	written bool
	// maybe are writes and fences the store failed (a network error of a
	// RedisStore) since last, with a token that the fence would let pass:
	// each may have been applied, and may still be, later.
	maybe []ledgerEntry
}

// maybeWrites counts the writes among maybe.
func (s finalState) maybeWrites() int {
	n := 0
	for _, m := range s.maybe {
		if !m.Fence {
			n++
		}
	}
	return n
}

// maxMaybe bounds finalState.maybe: beyond it the oldest are forgotten,
// and a refusal they would explain is reported.
const maxMaybe = 16

// matches reports whether the stored value may be (value, token).
func (s finalState) matches(value string, token fencedlock.Token) bool {
	if s.written && s.last.Value == value && s.last.Token == token {
		return true
	}
	for _, m := range s.maybe {
		if !m.Fence && m.Value == value && m.Token == token {
			return true
		}
	}
	return false
}

// checkLedger runs checker A over a ledger's entries.
func checkLedger(entries []ledgerEntry) ledgerReport {
	type state struct {
		finalState
		fence fencedlock.Token // the highest token accepted, by a write or a fence
	}
	r := ledgerReport{final: map[string]finalState{}}
	states := map[string]*state{}
	for _, e := range entries {
		s := states[e.Resource]
		if s == nil {
			s = &state{}
			states[e.Resource] = s
		}
		if e.Fence {
			r.Fences++
		} else {
			r.Puts++
		}
		switch {
		case e.Accepted:
			if e.Fence {
				r.FencesAccepted++
			} else {
				r.Accepted++
			}
			if e.Token < s.fence {
				r.StaleAccepted++
				if !e.Fence {
					r.Stale = append(r.Stale, e.Value)
				}
				r.Violations.add("%s: accepted %v after token %d had been accepted", e.Resource, e, s.fence)
			}
			if !e.Fence {
				if s.written && e.Token < s.last.Token {
					r.Lost++
					r.Violations.add("%s: %v lost: overwritten by %v", e.Resource, s.last, e)
				}
				s.last, s.written = e, true
			}
			s.fence = max(s.fence, e.Token)
			// A failed write or fence with a lower token can no longer
			// land.
			s.maybe = keepFrom(s.maybe, s.fence)
		case e.Err != "":
			if e.Fence {
				r.FenceErrors++
			} else {
				r.Errors++
			}
			if e.Token >= s.fence {
				s.maybe = append(s.maybe, e)
				if len(s.maybe) > maxMaybe {
					s.maybe = s.maybe[1:]
				}
			}
		default:
			if e.Fence {
				r.FencesRejected++
			} else {
				r.Rejected++
				r.Stale = append(r.Stale, e.Value)
			}
			if e.Token < s.fence && e.Current == s.fence {
				break // the rule, against the known fence
			}
			// A failed write or fence that would pass may have landed
			// since: the refusal tells which, and it is the fence from now
			// on (and, a write, the stored value).
			landed := -1
			for i, m := range s.maybe {
				if m.Token == e.Current && e.Token < m.Token {
					landed = i
				}
			}
			if landed < 0 {
				r.BadRejections++
				r.Violations.add("%s: %v refused, reporting current %d, while the store's fence was %d", e.Resource, e, e.Current, s.fence)
				break
			}
			m := s.maybe[landed]
			if !m.Fence {
				s.last, s.written = m, true
			}
			s.fence = max(s.fence, m.Token)
			s.maybe = keepFrom(append(s.maybe[:landed:landed], s.maybe[landed+1:]...), s.fence)
		}
	}
	for res, s := range states {
		r.final[res] = s.finalState
	}
	return r
}

// keepFrom returns the entries with a token of at least t.
func keepFrom(entries []ledgerEntry, t fencedlock.Token) []ledgerEntry {
	var out []ledgerEntry
	for _, e := range entries {
		if e.Token >= t {
			out = append(out, e)
		}
	}
	return out
}

// checkFinalReads compares the final reads (ops marked Final) with what
// checker A says the store must hold, and returns the mismatches.
func checkFinalReads(r ledgerReport, ops []op) examples {
	var bad examples
	for _, o := range ops {
		if !o.Final {
			continue
		}
		s, ok := r.final[o.Resource]
		switch {
		case o.Outcome == outNotFound && (!ok || (!s.written && s.maybeWrites() == 0)):
		case o.Outcome == outOK && ok && s.matches(o.Value, o.Token):
		default:
			bad.add("%s: read back %s %q token %d at the end; the ledger's last accepted write is %q token %d (written %v, %d failed writes may have landed)",
				o.Resource, o.Outcome, o.Value, o.Token, s.last.Value, s.last.Token, s.written, s.maybeWrites())
		}
	}
	return bad
}

// deliveryReport compares what each client saw of its writes and fences
// with what the store did with them. A write (or fence) that the client
// gave up on (its outcome is unknown) and that the store applied after the
// client's call had returned was delivered late: the nemesis held it in
// the network, or the client's timeout was shorter than the store's
// answer.
type deliveryReport struct {
	Late         int // late deliveries
	LateAccepted int // ... accepted: nobody newer had written meanwhile
	LateRejected int // ... refused as stale: a newer holder had written
	// Mismatches counts writes and fences whose client saw an answer the
	// store did not give: "ok" for one the store refused or never got,
	// "stale" for one it accepted or refused with another current token,
	// or one the store applied twice. 0: the HTTP layer carries the
	// store's answer faithfully.
	Mismatches int
	// Orphans counts writes and fences the store applied that no client
	// recorded. 0: every client ran to the end.
	Orphans int

	Examples examples
}

func (r deliveryReport) ok() bool { return r.Mismatches == 0 && r.Orphans == 0 }

// checkDeliveries matches the store's ledger with the clients' put and
// fence ops: a write by its value (every value is written once), a fence
// by its resource and token (a client fences once per grant).
func checkDeliveries(ops []op, entries []ledgerEntry) deliveryReport {
	var r deliveryReport
	sent := map[string]op{}
	for _, o := range ops {
		if o.Kind == opPut || o.Kind == opFence {
			sent[deliveryKey(o.Kind == opFence, o.Resource, o.Token, o.Value)] = o
		}
	}
	applied := map[string]bool{}
	for _, e := range entries {
		key := deliveryKey(e.Fence, e.Resource, e.Token, e.Value)
		o, ok := sent[key]
		if !ok {
			r.Orphans++
			r.Examples.add("%s: the store got %v, which no client recorded", e.Resource, e)
			continue
		}
		if applied[key] {
			r.Mismatches++
			r.Examples.add("%s: the store got %v twice", e.Resource, e)
			continue
		}
		applied[key] = true
		switch o.Outcome {
		case outOK:
			if !e.Accepted {
				r.Mismatches++
				r.Examples.add("%s: the client saw %v accepted; the store refused it (current %d, error %q)", e.Resource, e, e.Current, e.Err)
			}
		case outStale:
			if e.Accepted || e.Current != o.Current {
				r.Mismatches++
				r.Examples.add("%s: the client saw %v refused with current %d; the store accepted=%v current=%d", e.Resource, e, o.Current, e.Accepted, e.Current)
			}
		default:
			if e.At > o.Return {
				r.Late++
				if e.Accepted {
					r.LateAccepted++
				} else {
					r.LateRejected++
				}
			}
		}
	}
	for key, o := range sent {
		if (o.Outcome == outOK || o.Outcome == outStale) && !applied[key] {
			r.Mismatches++
			r.Examples.add("%s: the client saw %v %s, but the store never got it", o.Resource, o, o.Outcome)
		}
	}
	return r
}

// deliveryKey names a write by its value, a fence by its resource and
// token.
func deliveryKey(fence bool, resource string, token fencedlock.Token, value string) string {
	if fence {
		return fmt.Sprintf("fence %s %d", resource, token)
	}
	return "put " + value
}

// grantReport is checker B, over the grants the clients received.
type grantReport struct {
	Grants int // successful acquires
	// Duplicates counts grants of a resource carrying a token that an
	// earlier grant of it carried: both holders would pass the fence. 0.
	Duplicates int
	// Inversions counts grants whose acquire call started after another
	// grant of the resource had returned to its client, and carry a lower
	// token. Fencing does not need tokens in order (the store refuses the
	// later, lower one: a liveness cost), but a counter lost to a restart,
	// a flush or a failover is raised to the Redis clock, and on one
	// machine the clock does not step back: an inversion means that
	// raise failed, so it fails the scenario. (Seeding lost counters from
	// a constant instead of the clock gives hundreds.)
	Inversions int

	Examples examples
}

// checkGrants runs checker B over the acquire ops.
func checkGrants(ops []op) grantReport {
	var r grantReport
	byRes := map[string][]op{}
	for _, o := range ops {
		if o.Kind == opAcquire && o.Outcome == outOK {
			r.Grants++
			byRes[o.Resource] = append(byRes[o.Resource], o)
		}
	}
	resources := make([]string, 0, len(byRes))
	for res := range byRes {
		resources = append(resources, res)
	}
	sort.Strings(resources)
	for _, res := range resources {
		grants := byRes[res]
		first := map[fencedlock.Token]op{}
		for _, g := range grants {
			if f, dup := first[g.Token]; dup {
				r.Duplicates++
				r.Examples.add("%s: token %d granted twice: to c%d at %s and to c%d at %s", res, g.Token, f.Client, wallTime(f.Return), g.Client, wallTime(g.Return))
				continue
			}
			first[g.Token] = g
		}
		// Sweep the grants in order of their calls, keeping the highest
		// token among the grants that had returned before the call.
		byCall := append([]op(nil), grants...)
		sort.Slice(byCall, func(i, j int) bool { return byCall[i].Call < byCall[j].Call })
		byReturn := append([]op(nil), grants...)
		sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
		var high op
		j := 0
		for _, g := range byCall {
			for ; j < len(byReturn) && byReturn[j].Return < g.Call; j++ {
				if byReturn[j].Token > high.Token {
					high = byReturn[j]
				}
			}
			if g.Token < high.Token {
				r.Inversions++
				r.Examples.add("%s: c%d's acquire, called at %s, got token %d; c%d's had returned token %d at %s", res, g.Client, wallTime(g.Call), g.Token, high.Client, high.Token, wallTime(high.Return))
			}
		}
	}
	return r
}
