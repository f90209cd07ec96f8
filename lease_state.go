package fencedlock

import "strconv"

// leaseState is where a Lock is in its life. A granted Lock is held (the
// zero value); it ends released or lost, and then stays so. Only
// leaseState.step moves it, and only Lock.stepLocked calls step.
type leaseState uint8

const (
	leaseHeld               leaseState = iota // held for sure until its lease runs out by the local clock
	leaseUncertain                            // a Refresh or Release that returned after the last success was sent had no known outcome
	leaseReleasing                            // a Release runs; the Lock was held for sure when it began, or a Refresh succeeded since
	leaseReleasingUncertain                   // a Release runs; a Refresh or Release that returned after the last success was sent had no known outcome
	leaseReleasingLost                        // a Release runs, and a loss was found meanwhile: it ends the Lock if the Release fails
	leaseReleased                             // Release released it: final
	leaseLost                                 // found lost: final

	numLeaseStates
)

var leaseStateNames = [numLeaseStates]string{"held", "uncertain", "releasing", "releasing (uncertain)", "releasing (lost)", "released", "lost"}

func (s leaseState) String() string {
	if s < numLeaseStates {
		return leaseStateNames[s]
	}
	return "leaseState(" + strconv.Itoa(int(s)) + ")"
}

// ended reports whether the Lock is no longer held: released or lost.
func (s leaseState) ended() bool { return s == leaseReleased || s == leaseLost }

// releasing reports whether a Release runs.
func (s leaseState) releasing() bool {
	return s == leaseReleasing || s == leaseReleasingUncertain || s == leaseReleasingLost
}

// leaseEvent is what happens to a Lock: what Redis answered one of its
// calls, what the local clock says, or a call of Release.
type leaseEvent uint8

const (
	evRenewed        leaseEvent = iota // a grant or a Refresh succeeded, sent after the last one that did and after every call of unknown outcome returned
	evRefreshUnknown                   // a Refresh had no known outcome: it may have run, with its TTL
	evGone                             // Redis answered a Refresh, TTL or the heartbeat that the Lock does not hold the key
	evRanOut                           // the lease ran out by the local clock, no Refresh having succeeded
	evReleaseCalled                    // Release was called
	evReleased                         // the running Release released the lock
	evReleaseGone                      // the running Release found the key gone or another owner's
	evReleaseUnknown                   // the running Release had no known outcome: it may have run
	evReleaseUnsent                    // the running Release was never sent to Redis
	evWatched                          // someone watches the Lock's end: Done was called, an onEnded function set, or its acquire reported to an observer

	numLeaseEvents
)

var leaseEventNames = [numLeaseEvents]string{"renewed", "refresh unknown", "gone", "ran out", "release called", "released", "release gone", "release unknown", "release unsent", "watched"}

func (e leaseEvent) String() string {
	if e < numLeaseEvents {
		return leaseEventNames[e]
	}
	return "leaseEvent(" + strconv.Itoa(int(e)) + ")"
}

// leaseEffects is what a transition asks the Lock to do, as a set of
// bits: Lock.stepLocked carries them out.
type leaseEffects uint16

const (
	doWait          leaseEffects = 1 << iota // another Release runs: wait until it ends, then call again
	doBeginRelease                           // this Release runs now (a caller that waits for its end makes the channel: see Lock.releaseEndLocked)
	doStopHeartbeat                          // stop the heartbeat, if one runs
	doKeepLoss                               // keep the event's loss for the running Release
	doArmExpiry                              // when someone watches and no heartbeat runs: end the Lock when its lease runs out by the local clock
	doEndRelease                             // the running Release is over: close its channel, forget the kept loss
	doStopExpiry                             // stop the timer of doArmExpiry, if armed
	doEnd                                    // end the Lock for the event's reason: set Err, close Done, call onEnd, report the end
)

// ending is what every transition to released or lost does: no timer and
// no goroutine of the Lock outlives it.
const ending = doEnd | doStopHeartbeat | doStopExpiry

var leaseEffectNames = [...]string{"wait", "begin release", "stop heartbeat", "keep loss", "arm expiry", "end release", "stop expiry", "end"}

func (f leaseEffects) String() string {
	if f == 0 {
		return "none"
	}
	s := ""
	for i, name := range leaseEffectNames {
		if f&(1<<i) != 0 {
			if s != "" {
				s += "+"
			}
			s += name
		}
	}
	if rest := f &^ (1<<len(leaseEffectNames) - 1); rest != 0 {
		s += "+leaseEffects(" + strconv.Itoa(int(rest)) + ")"
	}
	return s
}

// step is the one transition function of a Lock's life: the state after
// e, and what the Lock must do for it. It does no I/O and takes no lock;
// an event that does not apply to s leaves it as it is, with no effect.
//
// An ended Lock stays ended. A Lock that someone watches while no Release
// runs arms its expiry, which ends it when its lease runs out (unless a
// heartbeat runs to do that); a Lock nobody watches finds that at its
// next call. A loss found while a Release runs waits for
// its outcome: a Release that released the lock ends it released (the loss
// was the Release's own doing), one that failed ends it lost. A Release
// that failed leaves the Lock held, or uncertain when it may have run,
// with its heartbeat stopped.
func (s leaseState) step(e leaseEvent) (leaseState, leaseEffects) {
	if s.ended() {
		return s, 0
	}
	switch e {
	case evRenewed:
		switch s {
		case leaseUncertain:
			return leaseHeld, 0
		case leaseReleasingUncertain:
			return leaseReleasing, 0
		}
	case evRefreshUnknown:
		switch s {
		case leaseHeld:
			return leaseUncertain, 0
		case leaseReleasing:
			return leaseReleasingUncertain, 0
		}
	case evGone, evRanOut:
		switch s {
		case leaseHeld, leaseUncertain:
			return leaseLost, ending
		case leaseReleasing, leaseReleasingUncertain:
			return leaseReleasingLost, doKeepLoss
		}
	case evReleaseCalled:
		switch s {
		case leaseHeld:
			return leaseReleasing, doBeginRelease | doStopHeartbeat
		case leaseUncertain:
			return leaseReleasingUncertain, doBeginRelease | doStopHeartbeat
		}
		return s, doWait
	case evReleased:
		if s.releasing() {
			return leaseReleased, doEndRelease | ending
		}
	case evReleaseGone:
		if s.releasing() {
			return leaseLost, doEndRelease | ending
		}
	case evReleaseUnknown, evReleaseUnsent:
		switch {
		case s == leaseReleasingLost:
			return leaseLost, doEndRelease | ending
		case s == leaseReleasing && e == evReleaseUnsent:
			return leaseHeld, doEndRelease | doArmExpiry
		case s.releasing():
			return leaseUncertain, doEndRelease | doArmExpiry
		}
	case evWatched:
		if s == leaseHeld || s == leaseUncertain {
			return s, doArmExpiry
		}
	}
	return s, 0
}
