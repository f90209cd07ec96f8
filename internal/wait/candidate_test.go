package wait

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newWaiter returns a waiter for owner as Wait makes them.
func newWaiter(owner string) *waiter {
	return &waiter{owner: owner, ttl: time.Second, life: 3 * time.Second, wake: make(chan struct{}, 1)}
}

// A release's candidate is the first waiter, promised to one release at a
// time. A promised waiter sends no attempt until told; one that is
// sending an attempt, or has a grant or a place it has not taken up, is
// no candidate. What the release did reaches the waiter; once it has
// left, the release is told to undo it, unless the waiter left with a
// lock of its own.
func TestCandidate(t *testing.T) {
	r := New(nil, Log{})
	a, b := newWaiter("a:"), newWaiter("b:")
	q, _ := r.join("res", "ch", a)
	r.join("res", "ch", b)
	var st state
	at := time.Now()

	assert.Equal(t, Candidate{}, r.Candidate("other"), "a resource nobody waits for")
	c := r.Candidate("res")
	assert.Equal(t, "a:", c.Owner)
	assert.Equal(t, time.Second, c.TTL)
	assert.Equal(t, 3*time.Second, c.Life)
	assert.Empty(t, r.Candidate("res").Owner, "promised to two releases")
	_, _, do := r.next(q, a, &st, true)
	assert.Equal(t, hold, do, "a promised waiter sent an attempt")

	// Granted: the waiter takes the grant, measured from the release.
	require.True(t, r.Granted(c, 7, at))
	assert.Len(t, a.wake, 1, "the waiter was not woken")
	<-a.wake
	assert.Empty(t, r.Candidate("res").Owner, "a grant not taken up yet")
	token, from := r.takeGrant(a)
	assert.Equal(t, uint64(7), token)
	assert.Equal(t, at, from)

	// A waiter sending an attempt is no candidate.
	_, _, do = r.next(q, a, &st, false)
	require.Equal(t, attempt, do)
	assert.Empty(t, r.Candidate("res").Owner, "a waiter sending an attempt")
	r.attempted(a, false)

	// Queued: the waiter takes up its place as if refused then.
	c = r.Candidate("res")
	require.True(t, r.Queued(c, 9, at))
	assert.Empty(t, r.Candidate("res").Owner, "a place not taken up yet")
	when, floor, do := r.next(q, a, &st, false)
	assert.Equal(t, queued, do)
	assert.Equal(t, at, when)
	assert.Equal(t, uint64(9), floor)

	// Unsure: the waiter asks Redis, as after an attempt whose answer
	// was lost.
	c = r.Candidate("res")
	require.True(t, r.Unsure(c))
	_, _, do = r.next(q, a, &st, false)
	assert.Equal(t, attempt, do)
	assert.True(t, st.lost)
	r.attempted(a, false)

	// Unused: nothing changes but the promise.
	c = r.Candidate("res")
	r.Unused(c)
	r.Unused(Candidate{}) // none: nothing to do

	// A waiter that left: the release undoes what it did.
	c = r.Candidate("res")
	require.Equal(t, "a:", c.Owner, "an unused candidate stayed promised")
	r.leave(q, a, false)
	assert.False(t, r.Granted(c, 11, at), "the waiter left: the release must release its grant")
	assert.Zero(t, b.granted, "the grant of a waiter that left went to the next")

	// A waiter that left with a lock of its own: nothing to undo.
	c = r.Candidate("res")
	require.Equal(t, "b:", c.Owner)
	r.leave(q, b, true)
	assert.True(t, r.Unsure(c), "the waiter left with its own lock: the release must leave it")
}

// A grant heard of while a waiter is promised, before its release's reply
// is known, is for the place that release gave it when its token is above
// the token that release granted: it is kept, and taken once Queued says
// so, measured from the release. One at or below is not the waiter's.
func TestCandidateGrantHeardEarly(t *testing.T) {
	r := New(nil, Log{})
	a := newWaiter("a:")
	q, _ := r.join("res", "ch", a)
	var st state
	at := time.Now()

	c := r.Candidate("res")
	r.Deliver("res", "a:", 12, time.Time{})
	token, _ := r.takeGrant(a)
	assert.Zero(t, token, "a grant taken before the release's outcome was known")
	require.True(t, r.Queued(c, 9, at))
	token, from := r.takeGrant(a)
	assert.Equal(t, uint64(12), token, "the grant heard early was lost")
	assert.Equal(t, at, from, "the grant must be measured from the release that queued the waiter")
	_, _, do := r.next(q, a, &st, false)
	assert.Equal(t, queued, do)

	c = r.Candidate("res")
	r.Deliver("res", "a:", 5, time.Time{})
	require.True(t, r.Queued(c, 9, at))
	token, _ = r.takeGrant(a)
	assert.Zero(t, token, "a grant made before the release that queued the waiter")
	_, _, do = r.next(q, a, &st, false)
	assert.Equal(t, queued, do)

	b := newWaiter("b:")
	r.leave(q, a, false)
	q, _ = r.join("res", "ch", b)
	c = r.Candidate("res")
	r.Deliver("res", "b:", 14, time.Time{})
	require.True(t, r.Unsure(c))
	token, _ = r.takeGrant(b)
	assert.Zero(t, token, "after a lost reply, the attempt finds out; the early grant is not taken on trust")
	_, _, do = r.next(q, b, &st, false)
	assert.Equal(t, attempt, do)
}

// While a Lock of the Locker holds the resource, the first waiter not
// queued in Redis sends no attempt, but for its timer's, until the last
// such Lock ends, or runs out unless refreshed; a waiter queued in Redis
// still renews its place.
func TestHoldBack(t *testing.T) {
	r := New(nil, Log{})
	w := newWaiter("w:")
	q, _ := r.join("res", "ch", w)
	var st state
	step := func(fired bool) (time.Time, step) {
		t.Helper()
		at, _, do := r.next(q, w, &st, fired)
		if do == attempt {
			r.attempted(w, false)
		}
		return at, do
	}
	_, do := step(false)
	assert.Equal(t, attempt, do, "nothing holds the resource")

	until := time.Now().Add(time.Hour)
	r.Hold("res", "a", until)
	r.Hold("other", "a", until)
	at, do := step(false)
	assert.Equal(t, hold, do)
	assert.Equal(t, until, at, "the waiter must look again once the Lock has run out")
	assert.True(t, r.heard(q), "a waiter held back has heard that the lock is held")
	assert.True(t, r.FirstHeldBack("res"))
	_, do = step(true)
	assert.Equal(t, attempt, do, "the timer must try all the same")

	later := until.Add(time.Hour)
	r.Hold("res", "a", later)
	at, _ = step(false)
	assert.Equal(t, later, at, "a refresh extends the hold")
	r.Hold("res", "a", until)
	at, _ = step(false)
	assert.Equal(t, until, at, "a refresh for a shorter TTL must bring the end of the hold nearer")

	st.refused = time.Now()
	_, do = step(false)
	assert.Equal(t, attempt, do, "a waiter queued in Redis must renew its place")
	st.refused = time.Time{}

	// Two Locks: the waiter asks once the last one ends.
	r.Hold("res", "b", until)
	r.Unhold("res", "a")
	_, do = step(false)
	assert.Equal(t, hold, do, "one of two Locks ended")
	select {
	case <-w.wake:
	default:
	}
	r.Unhold("res", "b")
	assert.Len(t, w.wake, 1, "the end of the last Lock did not wake the waiter")
	_, do = step(false)
	assert.Equal(t, attempt, do)
	r.Unhold("res", "b") // a Lock forgotten already: nothing to count

	// A Lock that ran out unless refreshed holds nothing back.
	r.Hold("res", "a", time.Now().Add(-time.Millisecond))
	_, do = step(false)
	assert.Equal(t, attempt, do, "a Lock that ran out held the waiter back")

	// A Lock that ran out, never released, holds nothing back once
	// another Lock taken since has ended; and its late end does not end
	// the hold of another.
	r.Hold("res", "a", time.Now().Add(20*time.Millisecond))
	time.Sleep(30 * time.Millisecond)
	r.Hold("res", "b", until)
	r.Unhold("res", "b")
	_, do = step(false)
	assert.Equal(t, attempt, do, "a Lock that ran out, never released, held the waiter back after another ended")
	r.Hold("res", "c", until)
	r.Unhold("res", "a")
	_, do = step(false)
	assert.Equal(t, hold, do, "the late end of a Lock that ran out ended the hold of another")
	r.Unhold("res", "c")

	// Locks never released are dropped as more are held.
	for i := 0; i < 3*minSweep; i++ {
		r.Hold("gone-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "a", time.Now().Add(-time.Millisecond))
	}
	held := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.holding)
	}
	assert.LessOrEqual(t, held(), 2*minSweep, "Locks that ran out are kept for ever")

	// So are the resources whose Locks were released.
	for i := 0; i < 3*minSweep; i++ {
		res := "done-" + strconv.Itoa(i)
		r.Hold(res, "a", until)
		r.Unhold(res, "a")
	}
	assert.LessOrEqual(t, held(), 2*minSweep, "resources whose Locks were released are kept for ever")
}

// heldBack returns a Room whose first waiter for "res", w, of queue q,
// was held back at its last step (st) by the Lock "a:", which holds the
// resource until an hour from now.
func heldBack(t *testing.T) (r *Room, q *queue, w *waiter, st *state, until time.Time) {
	t.Helper()
	r = New(nil, Log{})
	w = newWaiter("w:")
	q, _ = r.join("res", "ch", w)
	st = &state{}
	until = time.Now().Add(time.Hour)
	r.Hold("res", "a:", until)
	at, _, do := r.next(q, w, st, false)
	require.Equal(t, hold, do)
	require.Equal(t, until, at)
	return r, q, w, st, until
}

// The end of the Locker's last Lock on a resource wakes its first waiter
// only if that waiter was held back: one that a release already queued in
// Redis waits for its grant, and a wake-up would only make it poll.
func TestUnholdWakesOnlyAWaiterHeldBack(t *testing.T) {
	r, q, w, st, until := heldBack(t)
	r.Unhold("res", "a:")
	assert.Len(t, w.wake, 1, "the waiter held back was not woken")
	<-w.wake

	r.Hold("res", "b:", until)
	c := r.Candidate("res")
	require.True(t, r.Queued(c, 5, time.Now()))
	<-w.wake // the release's outcome
	_, _, do := r.next(q, w, st, false)
	require.Equal(t, queued, do)
	r.Unhold("res", "b:")
	assert.Empty(t, w.wake, "a waiter the release queued was woken: it would poll")
}

// A refresh for a shorter TTL brings the end of the hold nearer: the
// waiter held back is woken to look again at it; a longer one wakes
// nobody.
func TestHoldSoonerWakesAWaiterHeldBack(t *testing.T) {
	r, q, w, st, until := heldBack(t)
	r.Hold("res", "a:", until.Add(time.Hour))
	assert.Empty(t, w.wake, "a longer hold woke the waiter")

	sooner := time.Now().Add(time.Minute)
	r.Hold("res", "a:", sooner)
	require.Len(t, w.wake, 1, "the waiter held back was not woken by the nearer end")
	<-w.wake
	at, _, do := r.next(q, w, st, false)
	require.Equal(t, hold, do)
	assert.Equal(t, sooner, at, "the waiter must look again at the nearer end")
}
