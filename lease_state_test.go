package fencedlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every transition of a Lock's life, state by event: the next state and
// the effects. A pair missing from the table, or listed twice, fails.
func TestLeaseTransitions(t *testing.T) {
	const (
		held      = leaseHeld
		uncertain = leaseUncertain
		rel       = leaseReleasing
		relUnc    = leaseReleasingUncertain
		relLost   = leaseReleasingLost
		released  = leaseReleased
		lost      = leaseLost

		begin   = doBeginRelease | doStopHeartbeat
		failed  = doEndRelease | doArmExpiry
		settled = doEndRelease | ending
	)
	table := []struct {
		from leaseState
		on   leaseEvent
		to   leaseState
		do   leaseEffects
	}{
		{held, evRenewed, held, 0},
		{held, evRefreshUnknown, uncertain, 0},
		{held, evGone, lost, ending},
		{held, evRanOut, lost, ending},
		{held, evReleaseCalled, rel, begin},
		{held, evReleased, held, 0},
		{held, evReleaseGone, held, 0},
		{held, evReleaseUnknown, held, 0},
		{held, evReleaseUnsent, held, 0},
		{held, evWatched, held, doArmExpiry},

		{uncertain, evRenewed, held, 0},
		{uncertain, evRefreshUnknown, uncertain, 0},
		{uncertain, evGone, lost, ending},
		{uncertain, evRanOut, lost, ending},
		{uncertain, evReleaseCalled, relUnc, begin},
		{uncertain, evReleased, uncertain, 0},
		{uncertain, evReleaseGone, uncertain, 0},
		{uncertain, evReleaseUnknown, uncertain, 0},
		{uncertain, evReleaseUnsent, uncertain, 0},
		{uncertain, evWatched, uncertain, doArmExpiry},

		{rel, evRenewed, rel, 0},
		{rel, evRefreshUnknown, relUnc, 0},
		{rel, evGone, relLost, doKeepLoss},
		{rel, evRanOut, relLost, doKeepLoss},
		{rel, evReleaseCalled, rel, doWait},
		{rel, evReleased, released, settled},
		{rel, evReleaseGone, lost, settled},
		{rel, evReleaseUnknown, uncertain, failed},
		{rel, evReleaseUnsent, held, failed},
		{rel, evWatched, rel, 0},

		{relUnc, evRenewed, rel, 0},
		{relUnc, evRefreshUnknown, relUnc, 0},
		{relUnc, evGone, relLost, doKeepLoss},
		{relUnc, evRanOut, relLost, doKeepLoss},
		{relUnc, evReleaseCalled, relUnc, doWait},
		{relUnc, evReleased, released, settled},
		{relUnc, evReleaseGone, lost, settled},
		{relUnc, evReleaseUnknown, uncertain, failed},
		{relUnc, evReleaseUnsent, uncertain, failed},
		{relUnc, evWatched, relUnc, 0},

		{relLost, evRenewed, relLost, 0},
		{relLost, evRefreshUnknown, relLost, 0},
		{relLost, evGone, relLost, 0},
		{relLost, evRanOut, relLost, 0},
		{relLost, evReleaseCalled, relLost, doWait},
		{relLost, evReleased, released, settled},
		{relLost, evReleaseGone, lost, settled},
		{relLost, evReleaseUnknown, lost, settled},
		{relLost, evReleaseUnsent, lost, settled},
		{relLost, evWatched, relLost, 0},

		{released, evRenewed, released, 0},
		{released, evRefreshUnknown, released, 0},
		{released, evGone, released, 0},
		{released, evRanOut, released, 0},
		{released, evReleaseCalled, released, 0},
		{released, evReleased, released, 0},
		{released, evReleaseGone, released, 0},
		{released, evReleaseUnknown, released, 0},
		{released, evReleaseUnsent, released, 0},
		{released, evWatched, released, 0},

		{lost, evRenewed, lost, 0},
		{lost, evRefreshUnknown, lost, 0},
		{lost, evGone, lost, 0},
		{lost, evRanOut, lost, 0},
		{lost, evReleaseCalled, lost, 0},
		{lost, evReleased, lost, 0},
		{lost, evReleaseGone, lost, 0},
		{lost, evReleaseUnknown, lost, 0},
		{lost, evReleaseUnsent, lost, 0},
		{lost, evWatched, lost, 0},
	}
	var seen [numLeaseStates][numLeaseEvents]int
	for _, tr := range table {
		seen[tr.from][tr.on]++
		to, do := tr.from.step(tr.on)
		if to != tr.to || do != tr.do {
			t.Errorf("%v on %v: %v, %v; want %v, %v", tr.from, tr.on, to, do, tr.to, tr.do)
		}
	}
	for s := leaseState(0); s < numLeaseStates; s++ {
		for e := leaseEvent(0); e < numLeaseEvents; e++ {
			if seen[s][e] != 1 {
				t.Errorf("%v on %v: %d rows in the table, want 1", s, e, seen[s][e])
			}
		}
	}
}

// The rules the table follows, checked on step itself: an ended Lock
// stays ended; a Lock ends only with every effect of an end (so no timer
// or heartbeat outlives it); a Release's channel is made when one begins
// and closed when it is over; a loss is kept only when it comes during a
// Release; an expiry is armed only when a Release failed, or for a
// watcher of a Lock that no Release runs on.
func TestLeaseTransitionRules(t *testing.T) {
	for s := leaseState(0); s < numLeaseStates; s++ {
		for e := leaseEvent(0); e < numLeaseEvents; e++ {
			to, do := s.step(e)
			if s.ended() && (to != s || do != 0) {
				t.Errorf("ended %v on %v: %v, %v", s, e, to, do)
			}
			if ends := to.ended() && !s.ended(); ends != (do&doEnd != 0) || ends && do&ending != ending {
				t.Errorf("%v on %v: %v with %v: an end and its effects do not go together", s, e, to, do)
			}
			if begins := !s.releasing() && to.releasing(); begins != (do&doBeginRelease != 0) || begins && do&doStopHeartbeat == 0 {
				t.Errorf("%v on %v: %v with %v: a Release begins with its channel and stops the heartbeat", s, e, to, do)
			}
			if over := s.releasing() && !to.releasing(); over != (do&doEndRelease != 0) {
				t.Errorf("%v on %v: %v with %v: a Release is over exactly when its channel is closed", s, e, to, do)
			}
			if keeps := s != leaseReleasingLost && to == leaseReleasingLost; keeps != (do&doKeepLoss != 0) {
				t.Errorf("%v on %v: %v with %v: a loss is kept exactly when one comes during a Release", s, e, to, do)
			}
			if do&doArmExpiry != 0 && (e != evReleaseUnknown && e != evReleaseUnsent && e != evWatched || to.ended() || to.releasing()) {
				t.Errorf("%v on %v: %v with %v: only a failed Release, or a watcher, arms the expiry", s, e, to, do)
			}
			if e == evWatched && to != s {
				t.Errorf("%v on %v: %v: a watcher changes no state", s, e, to)
			}
			if do&doWait != 0 && (e != evReleaseCalled || to != s || !s.releasing()) {
				t.Errorf("%v on %v: %v with %v: only a Release called while one runs waits", s, e, to, do)
			}
		}
	}
}

func TestLeaseNames(t *testing.T) {
	names := map[string]bool{}
	for s := leaseState(0); s < numLeaseStates; s++ {
		names[s.String()] = true
	}
	assert.Len(t, names, int(numLeaseStates), "states with the same name")
	assert.Equal(t, "leaseState(7)", numLeaseStates.String())
	names = map[string]bool{}
	for e := leaseEvent(0); e < numLeaseEvents; e++ {
		names[e.String()] = true
	}
	assert.Len(t, names, int(numLeaseEvents), "events with the same name")
	assert.Equal(t, "leaseEvent(10)", numLeaseEvents.String())
	assert.Equal(t, "none", leaseEffects(0).String())
	assert.Equal(t, "stop heartbeat+stop expiry+end", ending.String())
	assert.Equal(t, "wait+leaseEffects(256)", (doWait | 1<<8).String())
}
