package safety

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/anishathalye/porcupine"
)

// A scenario's verdict: the checkers run over its history, what fails it,
// and what a failure leaves behind for the post-mortem.

// check runs the checkers over the history and fails the test on a
// violation (in the negative control: on finding none).
func (r *scenarioRun) check(history []op) summary {
	t, sc := r.t, r.sc
	sum := summary{Name: sc.name, Seed: r.seed, Ops: len(history), Faults: r.nem.counts, Negative: sc.negative, Store: sc.store, WorkloadKind: sc.workload}
	sum.Clients = fmt.Sprint(inProcessClients)
	if sc.children > 0 {
		sum.Clients += fmt.Sprintf("+%d", sc.children)
	}
	for _, o := range history {
		switch {
		case o.Kind == opPause:
			sum.Faults["pause"]++
		case o.Kind == opAcquire && o.Outcome == outNotReplicated:
			sum.NotReplicated++
		case o.Kind == opRelease && o.LocalWaiter:
			sum.LocalWaiterReleases++
		case o.Kind == opPut:
			sum.Puts++
			switch o.Outcome {
			case outStale:
				sum.Stale++
			case outUnknown:
				sum.Unknown++
			}
		case o.Kind == opFence:
			sum.Fences++
			if o.Outcome == outStale {
				sum.FencesStale++
			}
		}
	}

	// A: the store's ledger.
	applied := map[string]int64{} // when the store applied each write, by value
	var stale []string            // the stale writes attempted, by value
	if r.ledger == nil {
		// Without a ledger, the clients' refusals are the stale writes
		// attempted that are known.
		for _, o := range history {
			if o.Kind == opPut && o.Outcome == outStale {
				stale = append(stale, o.Value)
			}
		}
	}
	if r.ledger != nil {
		entries := r.ledger.snapshot()
		for _, e := range entries {
			applied[e.Value] = e.At
		}
		lr := checkLedger(entries)
		dr := checkDeliveries(history, entries)
		sum.Ledger, sum.Deliveries = &lr, &dr
		stale = lr.Stale
		// The store must hold, at the end, the last write it accepted.
		if bad := checkFinalReads(lr, history); len(bad) > 0 {
			sum.FinalMismatches = len(bad)
			t.Errorf("the store's final values differ from the ledger's last accepted writes:\n  %s", strings.Join(bad, "\n  "))
		}
		if !sc.negative {
			if !lr.ok() {
				t.Errorf("checker A: the store accepted %d stale writes, lost %d, refused %d wrongly:\n  %s",
					lr.StaleAccepted, lr.Lost, lr.BadRejections, strings.Join(lr.Violations, "\n  "))
			}
		}
		if !dr.ok() {
			t.Errorf("the clients' answers differ from the store's: %d mismatches, %d orphans:\n  %s",
				dr.Mismatches, dr.Orphans, strings.Join(dr.Examples, "\n  "))
		}
	}

	sum.StaleAttempted = len(stale)
	sum.Causes = staleCauses(stale, history, r.nem.events, applied)

	// B: the grants.
	sum.Grants = checkGrants(history)
	if sum.Grants.Duplicates > 0 || sum.Grants.Inversions > 0 {
		t.Errorf("checker B: %d duplicate tokens, %d inversions:\n  %s",
			sum.Grants.Duplicates, sum.Grants.Inversions, strings.Join(sum.Grants.Examples, "\n  "))
	}

	// D: every Lock returned held its grant in Redis.
	sum.Held = checkHeld(history, lockerOf)
	if sum.Held.Violations > 0 {
		t.Errorf("checker D: %d Locks returned while Redis did not hold their grant:\n  %s",
			sum.Held.Violations, strings.Join(sum.Held.Examples, "\n  "))
	}
	if sum.Held.Returned > 0 && sum.Held.Checked == 0 {
		t.Errorf("checker D read the key of none of the %d Locks returned: %v", sum.Held.Returned, sum.Held)
	}

	// C: linearizability of what the clients saw.
	sum.Lin = checkLinearizable(history, r.cfg.checkTimeout, r.vizDir, sc.name)
	if sum.Lin.Viz != "" {
		if sum.Lin.VizErr != nil {
			t.Logf("porcupine visualization: %v", sum.Lin.VizErr)
		} else {
			t.Logf("porcupine visualization: %s", sum.Lin.Viz)
		}
	}
	switch {
	case sc.negative:
	case sum.Lin.Result == porcupine.Illegal:
		t.Errorf("checker C: the clients' history is not linearizable for a fenced register: %v", sum.Lin)
	case sum.Lin.Result == porcupine.Unknown:
		// Checks take milliseconds: a timeout is a problem of its own.
		t.Errorf("checker C: porcupine timed out after %v: linearizability not decided (-safety.check-timeout raises the limit)", r.cfg.checkTimeout)
	}

	// E: the appends, in the append workload.
	if sc.workload != workloadRegister {
		ar := checkAppends(history)
		sum.Appends = &ar
		t.Logf("checker E: %v", ar)
		judged := ar // what fails the scenario
		if ar.Updates == 0 {
			t.Errorf("the workload did nothing: no update")
		}
		if sc.workload == workloadGetPut {
			// Its negative control: without the Fence, a stale holder's
			// write lands between another holder's read and write, is
			// acknowledged, and is overwritten.
			if ar.Lost == 0 {
				t.Errorf("checker E could not fail: with Get then Put, without the Fence, it found no acknowledged append lost: %v", ar)
			} else {
				t.Logf("checker E's negative control caught: %d of %d acknowledged appends lost; first: %s", ar.Lost, ar.Acknowledged, ar.Examples[0])
			}
			judged.Lost = 0 // the other violations still fail it
		}
		if !judged.ok() {
			t.Errorf("checker E: %d acknowledged appends lost, %d items duplicated, %d refused but present, %d foreign, %d resources unread:\n  %s",
				judged.Lost, ar.Duplicated, ar.RefusedPresent, ar.Foreign, ar.Unread, strings.Join(ar.Examples, "\n  "))
		}
	}

	// The negative control must be caught by every checker that can see it.
	if sc.negative {
		lr := sum.Ledger
		if lr.StaleAccepted == 0 || lr.Lost == 0 || sum.Lin.Result != porcupine.Illegal {
			t.Errorf("the suite could not fail: against an unfenced store it found %d stale writes accepted, %d lost, porcupine %v",
				lr.StaleAccepted, lr.Lost, sum.Lin)
		} else {
			t.Logf("negative control caught: %d stale writes accepted, %d lost, porcupine %v; first: %s",
				lr.StaleAccepted, lr.Lost, sum.Lin.Result, lr.Violations[0])
		}
	}

	// The workload must have done what the scenario is about.
	if sum.Grants.Grants == 0 || sum.Puts == 0 {
		t.Errorf("the workload did nothing: %d grants, %d puts", sum.Grants.Grants, sum.Puts)
	}
	// Every kind comes once per round of the nemesis; a quick run's last
	// round may be cut short, so a missing kind is only logged (the
	// report shows the counts), but a scenario without faults fails.
	var injected int
	for _, kind := range sc.faults {
		n := 0
		for k, c := range sum.Faults {
			if k == kind || strings.HasPrefix(k, kind+"-") {
				n += c
			}
		}
		if n == 0 {
			t.Logf("no %s fault was injected", kind)
		}
		injected += n
	}
	if len(sc.faults) > 0 && injected == 0 {
		t.Errorf("no fault was injected")
	}
	r.checkEffects(&sum, history)
	if sc.pauses && sum.Faults["pause"] == 0 {
		t.Errorf("no client paused")
	}
	return sum
}

// checkEffects measures what each fault of the scenario did, for the
// report. A fault with no effect at all (no counter lost to a restart or
// a flush, no failover that lost grants, no held write delivered, no
// process stopped while it held a lock) fails the scenario in the long
// mode, and is logged in the quick mode, whose few seconds may not
// suffice.
func (r *scenarioRun) checkEffects(sum *summary, history []op) {
	eff := r.nem.eff
	var parts []string
	zero := func(fault, what string) {
		if r.cfg.long {
			r.t.Errorf("the %s fault had no effect: %s", fault, what)
		} else {
			r.t.Logf("the %s fault had no effect: %s (quick mode: not a failure)", fault, what)
		}
	}
	for _, f := range r.sc.faults {
		switch f {
		case faultRestart, faultFlushAll:
			parts = append(parts, fmt.Sprintf("%s: %d counters lost in %d/%d (empty after each)", f, eff.KeysLost[f], eff.LossyFaults[f], r.nem.counts[f]))
			if eff.KeysLost[f] == 0 {
				zero(f, "no token counter was lost")
			}
		case faultFailover:
			parts = append(parts, fmt.Sprintf("failover: %d/%d lost grants", eff.FailoversLost, eff.Failovers))
			if eff.FailoversLost == 0 {
				zero(f, "no promoted replica had missed a grant")
			}
		case faultKillMaster:
			parts = append(parts, fmt.Sprintf("kill-master: %d/%d lost grants (replicas cut off before %d of the kills)", eff.FailoversLost, eff.Failovers, eff.FailoversCut))
			if eff.FailoversLost == 0 {
				zero(f, "no promoted replica had missed a grant")
			}
		case faultLateWrite:
			parts = append(parts, fmt.Sprintf("late-write: %d/%d held requests delivered", eff.HoldsDelivered, eff.HoldsAsked))
			if eff.HoldsDelivered == 0 {
				zero(f, "no held request was delivered")
			}
		case faultSigstop:
			stops, holding := stopsWhileHolding(history, r.nem.events)
			parts = append(parts, fmt.Sprintf("sigstop: %d/%d while holding", holding, stops))
			if holding == 0 {
				zero(f, "no child was stopped while it held a lock")
			}
		case faultProxy:
			parts = append(parts, fmt.Sprintf("proxy: %d stale writes after a late grant", sum.Causes[causeLateGrant]))
		case faultLateReply:
			var each []string
			done := 0
			for _, call := range []string{lateRelease, lateRefresh} {
				results := eff.LateReplies[call]
				late, local, peer := 0, 0, 0
				for _, res := range results {
					if res.Late && res.Again {
						late++
					}
					if res.Again && res.Local {
						local++
					}
					if res.Again && res.Peer {
						peer++
					}
				}
				done += late
				each = append(each, fmt.Sprintf("%s %d/%d timed out and called again (own waiter %d, other Locker's %d)", call, late, len(results), local, peer))
			}
			parts = append(parts, "late-reply: "+strings.Join(each, ", "))
			if done == 0 {
				zero(f, "no Release or Refresh timed out on a late reply and was called again")
			}
		case faultStall:
			waited, overran, returned := stallEffects(history, r.nem.events)
			parts = append(parts, fmt.Sprintf("stall: %d waiting acquires reached their deadline in a stall (%d returned over %v late), %d Locks returned during one",
				waited, overran, deadlineSlack, returned))
			if waited == 0 {
				zero(f, "no waiting acquire reached its deadline while the lock network was stalled")
			}
		}
	}
	sum.Effects = strings.Join(parts, "; ")
}

// vizDir returns the directory for porcupine's visualization of an
// Illegal history: the report's directory, or else, for a scenario that
// must pass, a new temporary directory that is kept for the post-mortem.
// The negative control's visualization is written only with a report.
func (r *scenarioRun) vizDir() string {
	if r.cfg.report != "" {
		return filepath.Dir(r.cfg.report)
	}
	if r.sc.negative {
		return ""
	}
	return r.failureDir()
}

// failureDir returns a directory kept after the test, for what a failing
// scenario leaves behind: the report's directory, or else a temporary
// directory made on first use. It returns "" if none can be made.
func (r *scenarioRun) failureDir() string {
	if r.cfg.report != "" {
		return filepath.Dir(r.cfg.report)
	}
	if r.keepDir == "" {
		dir, err := os.MkdirTemp("", "fencedlock-safety-")
		if err != nil {
			r.t.Logf("no directory for the post-mortem: %v", err)
			return ""
		}
		r.keepDir = dir
	}
	return r.keepDir
}

// saveHistory writes the history and the ledger of a failing scenario,
// or of every scenario when there is a report, for the post-mortem.
func (r *scenarioRun) saveHistory(history []op) {
	dir := r.failureDir()
	if dir == "" {
		return
	}
	path := filepath.Join(dir, r.sc.name+"-history.jsonl")
	if err := writeOps(path, history); err != nil {
		r.t.Logf("saving the history: %v", err)
		return
	}
	r.t.Logf("history saved to %s", path)
	if r.ledger != nil {
		var b strings.Builder
		for _, e := range r.ledger.snapshot() {
			kind := "put"
			if e.Fence {
				kind = "fence"
			}
			fmt.Fprintf(&b, "%s %s %s token=%d value=%q accepted=%v current=%d err=%q\n", wallTime(e.At), kind, e.Resource, e.Token, e.Value, e.Accepted, e.Current, e.Err)
		}
		lpath := filepath.Join(dir, r.sc.name+"-ledger.txt")
		if err := os.WriteFile(lpath, []byte(b.String()), 0o644); err == nil {
			r.t.Logf("ledger saved to %s", lpath)
		}
	}
}
