package fencedlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/names"
	"github.com/fencedlock/fencedlock/internal/script"
	"github.com/fencedlock/fencedlock/internal/wait"
	"github.com/fencedlock/fencedlock/internal/withdraw"
	"github.com/fencedlock/fencedlock/observe"
)

// Lock is a granted lock on one resource, with the fencing token of its
// grant. Pass Token with every write to the protected resource.
//
// A Lock is held until Release releases it or it is found lost: a Refresh,
// Release or TTL call, or the heartbeat (see WithHeartbeat), finds the key
// gone or another owner's, or its lease ran out by the local clock: no
// Refresh (the heartbeat's or the caller's) succeeded within its TTL, less
// a twentieth, since the last grant or refresh was sent (one sent before
// a Refresh of unknown outcome returned counts only as far as that
// Refresh may have left the lock: see docs/errors.md). Done and Err
// report which. Once a Lock is no longer held, its methods send nothing
// more to Redis, but for one Release of a Lock whose lease ran out by the
// local clock: it deletes the key if it is still this Lock's (a Refresh
// whose answer came too late may have kept it), and returns the loss.
//
// Get a Lock from a Locker. The methods of a nil or zero Lock return
// errors wrapping ErrInvalidArgument (Resource and Token return zero
// values, Done a closed channel).
//
// A Lock is safe for concurrent use by multiple goroutines.
type Lock struct {
	locker   *Locker
	resource string
	keys     [5]string // lock, token counter, queue, queue deadlines, abandon marker of the acquire attempt
	keyArgs  [5]any    // keys, boxed once for script arguments
	channel  string    // where releases that hand the lock to a waiter of this Locker publish
	chanArg  any       // the start of the resource's channels, which the Locker's id ends, boxed once for script arguments
	owner    any       // the Locker's id and 64 random bits in hex, and ':': the start of the lock key's value; boxed once for script arguments
	token    Token     // zero until granted

	// roomMu orders what the Lock tells its Locker's waiters (syncRoom).
	// It is never taken while mu is held; mu, then the Room's mutex, are
	// taken while it is.
	roomMu sync.Mutex

	mu      sync.Mutex    // guards the fields below
	state   leaseState    // moved by stepLocked only
	base    time.Time     // local time before the last successful grant or refresh was sent
	ttl     time.Duration // the TTL the heartbeat refreshes with: the last one asked for (see retune)
	held    time.Duration // the TTL of the grant or refresh sent at base: the lease's
	until   time.Time     // the lock is certainly held until then, by the local clock
	granted time.Time     // local time before the grant was sent
	// What the calls of unknown outcome since the last success sent
	// after them leave (see hold): when the latest of them returned; the
	// earliest end the Refreshes among them may have left the lease with
	// (zero when none); and whether a Release is among them (it may have
	// deleted the lock).
	unsureAt   time.Time
	unsureEnd  time.Time
	unsureGone bool
	releasing  chan struct{}      // made on demand while a Release runs (see releaseEndLocked); closed when it ends
	pending    error              // a loss found while a Release runs (state leaseReleasingLost)
	err        error              // why the Lock ended: nil until its state is released or lost
	done       chan struct{}      // made on demand; closed when the Lock ends
	stop       context.CancelFunc // stops the heartbeat, if one was started
	kick       chan struct{}      // tells the heartbeat that the TTL changed
	expiry     *time.Timer        // ends the Lock at its lease while someone watches and no heartbeat runs (see armExpiryLocked); nil until then
	onEnd      func(error)        // called once when the Lock ends
	announced  bool               // the acquire's success was reported (see WithObserver): so is the end
	inRoom     bool               // counted by the Locker's room as holding the lock for sure (see stepLocked)
	evCtx      context.Context    // the ctx of the Lock's later events: the observer's, from its AcquireEnd; nil until announced
	ranOut     bool               // it ended as its lease ran out by the local clock: the key may still be its own in Redis
	withdrawn  bool               // a Release after it ran out has asked Redis to delete the key
	call       observe.Call       // the call that acquired the Lock, for its events; set before it is shared

	contender contender // what its Acquire's waiting room asks of it
}

// newLock returns an ungranted Lock on resource with a fresh owner nonce:
// the Locker's id and 64 random bits, 32 hex digits, followed by ':', the
// separator between the nonce and the token in the lock key's value.
func (l *Locker) newLock(resource string) (*Lock, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("fencedlock: reading random owner nonce: %w", err)
	}
	var hexed [len(b) * 2]byte
	hex.Encode(hexed[:], b[:])
	return l.lock(resource, l.id, hexed[:]), nil
}

// lockFor returns an ungranted Lock on resource for owner, an owner nonce
// and its ':'.
func (l *Locker) lockFor(resource, owner string) *Lock {
	return l.lock(resource, owner[:len(owner)-1], nil)
}

// lock returns an ungranted Lock on resource whose owner nonce is start
// followed by rest. When the Locker's last Lock was for the same resource
// (callers mostly lock one resource over and over), the names of the
// resource (its keys and its Locker's channel), boxed for the scripts,
// are that Lock's, and only the Lock's own (its abandon marker and owner)
// are made, as slices of one string. Else all of them are slices of one
// string, made in one allocation, and the resource's become the Locker's
// last.
func (l *Locker) lock(resource, start string, rest []byte) *Lock {
	k := &Lock{locker: l, resource: resource}
	nonce := len(start) + len(rest)
	if n := l.names.Load(); n != nil && n.resource == resource {
		copy(k.keys[:keyMarker], n.keys[:])
		copy(k.keyArgs[:keyMarker], n.keyArgs[:])
		k.channel, k.chanArg = n.channel, n.chanArg
		var b strings.Builder
		b.Grow(len(n.markerBase) + 2*nonce + 1)
		b.WriteString(n.markerBase)
		markerEnd := writeNonces(&b, start, rest)
		all := b.String()
		k.keys[keyMarker] = all[:markerEnd]
		k.keyArgs[keyMarker] = k.keys[keyMarker]
		k.owner = all[markerEnd:]
		return k
	}
	kinds := [...]string{"lock", "token", "queue", "deadlines", markerKind}
	var b strings.Builder
	b.Grow((len(kinds)+1)*keyBaseLen(l.prefix, resource) + len("locktokenqueuedeadlines"+markerKind+"grants:") + 2*nonce + 1 + len(l.id))
	var ends [len(kinds)]int
	for i, kind := range kinds {
		writeKeyBase(&b, l.prefix, resource)
		b.WriteString(kind)
		ends[i] = b.Len()
	}
	ends[keyMarker] = writeNonces(&b, start, rest)
	ownerEnd := b.Len()
	writeKeyBase(&b, l.prefix, resource)
	b.WriteString("grants:")
	chanArgEnd := b.Len()
	b.WriteString(l.id)
	all := b.String()
	from := 0
	for i, end := range ends {
		k.keys[i], from = all[from:end], end
		k.keyArgs[i] = k.keys[i]
	}
	k.owner = all[from:ownerEnd]
	k.channel = all[ownerEnd:]
	k.chanArg = all[ownerEnd:chanArgEnd]

	n := &resourceNames{resource: resource, markerBase: all[ends[keyMarker-1] : ends[keyMarker]-nonce], channel: k.channel, chanArg: k.chanArg}
	copy(n.keys[:], k.keys[:keyMarker])
	copy(n.keyArgs[:], k.keyArgs[:keyMarker])
	l.names.Store(n)
	return k
}

// writeNonces writes the end of a Lock's abandon marker key, its owner
// nonce (start followed by rest), then its owner: the nonce and ':'. It
// returns where the marker's key ends.
func writeNonces(b *strings.Builder, start string, rest []byte) (markerEnd int) {
	b.WriteString(start)
	b.Write(rest)
	markerEnd = b.Len()
	b.WriteString(start)
	b.Write(rest)
	b.WriteByte(':')
	return markerEnd
}

// resourceNames are the names a Locker's Locks use for a resource: its
// keys but the abandon marker's, and the channel of the Locker's grants;
// the keys and the start of the channels boxed for script arguments.
// Never changed once made.
type resourceNames struct {
	resource   string
	keys       [keyMarker]string
	keyArgs    [keyMarker]any
	markerBase string // the start of the abandon markers' keys, which an owner nonce ends
	channel    string // where releases that hand the lock to a waiter of this Locker publish
	chanArg    any    // the start of the resource's channels, which the Locker's id ends
}

// markerKind starts the kind of an attempt's abandon marker key; its
// owner nonce, without the ':', ends it.
const markerKind = "abandoned:"

// Indexes into Lock.keys.
const (
	keyLock = iota
	keyToken
	keyQueue
	keyDeadlines
	keyMarker
)

// closedChan is the Done channel of Locks that ended before anyone asked.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Resource returns the name of the locked resource.
func (k *Lock) Resource() string {
	if k == nil {
		return ""
	}
	return k.resource
}

// Token returns the fencing token of this grant. It does not change for
// the life of the Lock: Refresh keeps it.
func (k *Lock) Token() Token {
	if k == nil {
		return 0
	}
	return k.token
}

// Done returns a channel that is closed once the Lock is no longer held:
// released by Release, or found lost. Err tells which. It is closed when
// the lease runs out by the local clock, with or without a heartbeat;
// without one, a key that Redis lost before then (deleted, or lost in a
// failover) is found only by a call to Refresh, Release or TTL.
func (k *Lock) Done() <-chan struct{} {
	if k.check() != nil {
		return closedChan
	}
	k.mu.Lock()
	after := k.ranOutLocked()
	ch := k.done
	if ch == nil {
		ch = closedChan
		if !k.state.ended() {
			k.done = make(chan struct{})
			ch = k.done
			var watched afterUnlock
			_, watched = k.stepLocked(evWatched, nil)
			after = after.and(watched)
		}
	}
	k.mu.Unlock()
	after.run(k)
	return ch
}

// Err returns nil while the Lock is held, ErrReleased once Release has
// released it, and an error wrapping ErrLockLost once it was found lost:
// when its lease ran out by the local clock, the error says "the TTL ran
// out". A Lock that Release released never reports ErrLockLost, even when
// a Refresh or the heartbeat raced the Release.
func (k *Lock) Err() error {
	if err := k.check(); err != nil {
		return err
	}
	k.mu.Lock()
	after := k.ranOutLocked()
	err := k.err
	k.mu.Unlock()
	after.run(k)
	return err
}

// ranOutLocked ends the Lock as lost (evRanOut) when its lease has run
// out by the local clock: k.until has passed. That is how a Lock that
// nobody watches, and so has no expiry timer, finds it: at its next call.
// k.mu is held; the caller runs the afterUnlock it returns.
func (k *Lock) ranOutLocked() afterUnlock {
	if k.state.ended() || k.until.IsZero() || time.Now().Before(k.until) {
		return afterUnlock{}
	}
	_, after := k.stepLocked(evRanOut, k.lostErr(ranOutWhy(k.held, nil)))
	return after
}

// ranOutWhy is why a Lock whose lease of ttl ran out is lost, with err,
// the last refresh's error, if any.
func ranOutWhy(ttl time.Duration, err error) string {
	why := "the TTL ran out: no refresh succeeded within the TTL of " + ttl.String() + " by the local clock"
	if err != nil {
		why += ": " + err.Error()
	}
	return why
}

// grant records that Redis granted the Lock, with token, for ttl, the
// grant sent at sent (see hold). It is called once, before the Lock is
// shared: token is not guarded by k.mu.
func (k *Lock) grant(token Token, sent time.Time, ttl time.Duration) {
	k.token = token
	k.ttl = ttl
	k.hold(sent, ttl)
}

// hold records a grant, or a refresh, of the lock for ttl, sent at sent:
// the lock is held at least until sent+ttl, and certainly (by the
// heartbeat's rule, see certainFor) until sent+certainFor(ttl). A success
// sent before the last one tells nothing new.
//
// One sent before a Refresh or Release of unknown outcome returned (see
// unknown) may have run before that call, which may then have shortened
// the lock or deleted it: the Lock stays uncertain, and its base where it
// was, so that the heartbeat refreshes again at once; only its lease's
// end moves on, as far as both may have left it (not at all after a
// Release). A success sent after every such call ends the uncertainty.
func (k *Lock) hold(sent time.Time, ttl time.Duration) {
	k.mu.Lock()
	if k.granted.IsZero() {
		k.granted = sent
	}
	if !sent.After(k.base) {
		k.mu.Unlock()
		return
	}
	end := sent.Add(certainFor(ttl))
	if !sent.After(k.unsureAt) {
		if !k.unsureGone {
			if !k.unsureEnd.IsZero() && k.unsureEnd.Before(end) {
				end = k.unsureEnd
			}
			if end.After(k.until) {
				k.until = end // a later end needs nothing of the expiry timer
			}
		}
		k.mu.Unlock()
		return
	}
	k.unsureEnd, k.unsureGone = time.Time{}, false
	prev := k.until
	k.base, k.until, k.held = sent, end, ttl
	k.nearerLocked(prev)
	_, after := k.stepLocked(evRenewed, nil)
	k.mu.Unlock()
	after.run(k)
}

// unknown records a Refresh for ttl, sent at sent, whose outcome is
// unknown, known at returned: it may have run in Redis, as late as it
// was last sent (a client may send it again, until it returns). The Lock
// is no longer certainly held until a Refresh sent after returned
// succeeds (see hold), and the Refresh, if it ran, may have shortened the
// lock to sent+ttl (it can only have run later).
func (k *Lock) unknown(sent, returned time.Time, ttl time.Duration) {
	k.mu.Lock()
	k.unsureLocked(returned)
	end := sent.Add(certainFor(ttl))
	if k.unsureEnd.IsZero() || end.Before(k.unsureEnd) {
		k.unsureEnd = end
	}
	if end.Before(k.until) {
		prev := k.until
		k.until = end
		k.nearerLocked(prev)
	}
	_, after := k.stepLocked(evRefreshUnknown, nil)
	k.mu.Unlock()
	after.run(k)
}

// unsureLocked records that a call whose outcome is unknown returned at
// returned: only a success sent after it ends the Lock's uncertainty
// (see hold). k.mu is held.
func (k *Lock) unsureLocked(returned time.Time) {
	if returned.After(k.unsureAt) {
		k.unsureAt = returned
	}
}

// retune sets the TTL the heartbeat refreshes with, and tells the
// heartbeat when it changed. Refresh calls it before it sends, whatever
// its outcome: a refresh of the heartbeat's sent later, with the TTL it
// read before, then leaves the TTL as the caller set it, and the
// heartbeat's next round refreshes with it. k.mu is held.
func (k *Lock) retune(ttl time.Duration) {
	if k.kick != nil && ttl != k.ttl {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
	k.ttl = ttl
}

// stepLocked moves the Lock's state by e (see leaseState.step) and does
// what the transition asks that needs k.mu. why is the event's reason:
// the loss a running Release keeps, or the error the Lock ends with. k.mu
// is held; the caller runs the afterUnlock it returns once it has
// unlocked k.mu.
func (k *Lock) stepLocked(e leaseEvent, why error) (leaseEffects, afterUnlock) {
	next, do := k.state.step(e)
	k.state = next
	var after afterUnlock
	if do&doStopHeartbeat != 0 {
		after.stop, k.stop = k.stop, nil
	}
	if do&doKeepLoss != 0 {
		k.pending = why
	}
	if do&doArmExpiry != 0 {
		k.armExpiryLocked()
	}
	if do&doStopExpiry != 0 && k.expiry != nil {
		k.expiry.Stop()
	}
	if do&doEndRelease != 0 {
		if k.releasing != nil {
			close(k.releasing)
		}
		k.releasing, k.pending = nil, nil
	}
	if do&doEnd != 0 {
		k.err = why
		k.ranOut = e == evRanOut
		if k.done != nil {
			close(k.done)
		}
		after.why, after.onEnd, after.report = why, k.onEnd, k.announced
	}
	// The Locker's waiters for the resource wait for this Lock's release,
	// without asking Redis, while it holds the lock for sure (see
	// wait.Room.Hold): a change of that, or a renewal, is told to them
	// once k.mu is unlocked (syncRoom).
	certain := k.token != 0 && (next == leaseHeld || next == leaseReleasing)
	after.room = certain != k.inRoom || (certain && e == evRenewed)
	k.inRoom = certain
	return do, after
}

// afterUnlock is what a transition leaves to do once k.mu is unlocked.
type afterUnlock struct {
	stop   context.CancelFunc // the heartbeat's, to stop it
	onEnd  func(error)        // to call with why
	report bool               // report the end (see WithObserver)
	why    error              // the reason the Lock ended
	room   bool               // what the Locker's waiters should know changed: the Lock holds the lock for sure or not, or until when (see syncRoom)
}

// testHookSync, when a test sets it, runs with the Lock's resource before
// each syncRoom that a transition asks for, with k.mu unlocked.
var testHookSync atomic.Pointer[func(resource string)]

// and returns what a and b leave to do, for two transitions in a row; the
// second may end the Lock only if the first did not.
func (a afterUnlock) and(b afterUnlock) afterUnlock {
	if b.stop != nil {
		a.stop = b.stop
	}
	if b.why != nil {
		a.onEnd, a.report, a.why = b.onEnd, b.report, b.why
	}
	a.room = a.room || b.room
	return a
}

// run stops the heartbeat, tells the Locker's waiters the Lock's state
// if a transition changed it (syncRoom), then tells of the end: onEnd,
// then the observer.
func (a afterUnlock) run(k *Lock) {
	if a.stop != nil {
		a.stop()
	}
	if a.room {
		if hook := testHookSync.Load(); hook != nil {
			(*hook)(k.resource)
		}
		k.syncRoom()
	}
	if a.onEnd != nil {
		a.onEnd(a.why)
	}
	if a.report {
		k.reportEnd(a.why)
	}
}

// syncRoom tells the Locker's waiters what the Lock is now: holding the
// lock for sure until its lease runs out unless refreshed
// (wait.Room.Hold), or not (wait.Room.Unhold). Transitions call it after
// unlocking k.mu, so two may get here in either order; each tells the
// state it reads here, under roomMu, and the last to run tells the
// Lock's latest state, whichever transition it came from.
func (k *Lock) syncRoom() {
	k.roomMu.Lock()
	defer k.roomMu.Unlock()
	k.mu.Lock()
	certain, until := k.inRoom, k.base.Add(k.held)
	k.mu.Unlock()
	if certain {
		k.locker.room.Hold(k.resource, k.owner.(string), until)
	} else {
		k.locker.room.Unhold(k.resource, k.owner.(string))
	}
}

// ended returns the error for a call on a Lock that is no longer held, or
// nil while it is.
func (k *Lock) ended() error {
	k.mu.Lock()
	after := k.ranOutLocked()
	err := k.err
	k.mu.Unlock()
	after.run(k)
	if errors.Is(err, ErrReleased) {
		return fmt.Errorf("%w: %s (token %d)", ErrReleased, names.Quote(k.resource), k.token)
	}
	return err
}

// onEnded has f called with the Lock's end, once, when it ends (after
// Done is closed and the heartbeat stopped); at once if it has ended
// already. It replaces an f set before.
func (k *Lock) onEnded(f func(error)) {
	k.mu.Lock()
	after := k.ranOutLocked()
	err := k.err
	if err == nil {
		k.onEnd = f
		var watched afterUnlock
		_, watched = k.stepLocked(evWatched, nil)
		after = after.and(watched)
	}
	k.mu.Unlock()
	after.run(k)
	if err != nil {
		f(err)
	}
}

// announce records that the acquire of the Lock was reported (see
// WithObserver), the observer having returned ctx: from then on its
// end is reported too, and its later events get ctx. It returns the
// Lock's end if it has ended already, for the caller to report.
func (k *Lock) announce(ctx context.Context) (ended error) {
	k.mu.Lock()
	k.announced, k.evCtx = true, ctx
	after := k.ranOutLocked()
	if k.err == nil {
		_, watched := k.stepLocked(evWatched, nil)
		after = after.and(watched)
	}
	err := k.err
	k.mu.Unlock()
	after.report = false // the caller reports the end returned
	after.run(k)
	return err
}

// eventCtx returns the ctx of the Lock's events after its acquire (see
// announce): the observer's, or context.Background.
func (k *Lock) eventCtx() context.Context {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.evCtx == nil {
		return context.Background()
	}
	return k.evCtx
}

// grantedAt returns the local time before the grant was sent.
func (k *Lock) grantedAt() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.granted
}

// attachHeartbeat registers stop as what stops the Lock's heartbeat, and
// returns the channel that tells the heartbeat its TTL changed. It
// returns false, registering nothing, when the Lock has ended.
func (k *Lock) attachHeartbeat(stop context.CancelFunc) (kick <-chan struct{}, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.state.ended() {
		return nil, false
	}
	k.stop, k.kick = stop, make(chan struct{}, 1)
	return k.kick, true
}

// lease returns what the heartbeat needs of the Lock: when the last
// successful grant or refresh was sent, the TTL to refresh with, and the
// deadline until which the lock is certainly held.
func (k *Lock) lease() (base time.Time, ttl time.Duration, deadline time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.base, k.ttl, k.until
}

// Refresh sets the lock's TTL to ttl from now, if this Lock still holds
// it. When Redis answers that it does not (the key expired, was deleted,
// or holds another owner's value or a value of another type) it returns
// an error wrapping ErrLockLost, changes nothing, and the Lock ends as
// lost. When the outcome is unknown (Redis unreachable, no answer before
// ctx ended) the error wraps ErrUnavailable, the Lock is not ended, and it
// counts as held only until the shorter of its last TTL and ttl, until a
// Refresh sent after this one returned succeeds (one sent before may have
// run first). ttl must be at least one millisecond. A heartbeat goes
// on with the new ttl, even when this Refresh fails. On a released Lock
// it returns an error wrapping ErrReleased; once the lease ran out by the
// local clock (see Lock), it sends nothing and returns the loss.
func (k *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := k.check(); err != nil {
		return err
	}
	if _, err := ttlMillis(ttl); err != nil {
		return err
	}
	if err := k.ended(); err != nil {
		return err
	}
	k.mu.Lock()
	k.retune(ttl) // before it is sent: see retune
	k.mu.Unlock()
	sent := time.Now()
	switch err := k.refresh(ctx, ttl); {
	case errors.Is(err, errNotHeld):
		return k.notHeld(ctx, "refresh found the lock gone or taken")
	case err != nil:
		if !call.Unsent(err, k.locker.resends) {
			k.unknown(sent, time.Now(), ttl)
		}
		return err
	}
	k.hold(sent, ttl)
	if err := k.ended(); errors.Is(err, ErrLockLost) {
		return err // its lease ran out, by the local clock, before the reply came
	}
	return nil
}

// errNotHeld is refresh's report that the lock key is gone or another
// owner's.
var errNotHeld = errors.New("lock not held")

// certain reports whether the Lock holds the lock for sure, by the local
// clock: it was granted or refreshed for a TTL that has not nearly run out
// (the heartbeat's rule), and its state is held: nothing found it lost, no
// Release runs, and no Release or Refresh of unknown outcome returned
// after the last success was sent.
func (k *Lock) certain() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.state == leaseHeld && time.Now().Before(k.until)
}

// refresh runs the refresh script once.
func (k *Lock) refresh(ctx context.Context, ttl time.Duration) error {
	n, err := call.Bounded(ctx, k.locker.heeds, func(ctx context.Context) (int64, error) {
		return refreshScript.Run(ctx, k.locker.client, k.keyArgs[:keyQueue], k.owner, ttl.Milliseconds(), k.locker.idleArg).Int64()
	})
	if err != nil {
		return redisErr(ctx, "refresh", k.resource, err, k.keys[keyLock])
	}
	r, err := decodeRefresh(n)
	if err != nil {
		return fmt.Errorf("fencedlock: refresh %s: %w", names.Quote(k.resource), err)
	}
	if r != refreshHeld {
		return errNotHeld
	}
	return nil
}

// Release releases the lock if this Lock still holds it: the first live
// waiter queued for it gets it at once, with a fresh token, or else the
// key is deleted. The Lock then ends, and Err returns ErrReleased.
//
// When Redis answers that the Lock no longer holds the lock, Release
// returns an error wrapping ErrLockLost and changes nothing: a late
// Release never frees another owner's lock. When the outcome is unknown
// (Redis unreachable, no answer before ctx ended), the error wraps
// ErrUnavailable, the Lock is not ended but no longer counts as certainly
// held, and Release may be called again. A Release after Release sends
// nothing and returns an error wrapping ErrReleased; after the Lock ended
// as lost, its loss (when its lease ran out by the local clock, the first
// such Release first deletes the key if Redis still holds it for this
// Lock: see Lock). A Release whose lost reply made the client send it
// twice reports ErrLockLost although it released the lock: either way
// this Lock no longer holds it.
//
// Release stops the heartbeat first, even when it then fails. It is
// bounded by ctx; to release once ctx is done (in a deferred cleanup),
// pass a short detached context:
// context.WithTimeout(context.WithoutCancel(ctx), time.Second).
func (k *Lock) Release(ctx context.Context) error {
	if err := k.check(); err != nil {
		return err
	}
	if !k.locker.watched() {
		return k.releaseLock(ctx)
	}
	k.mu.Lock()
	announced := k.announced
	k.mu.Unlock()
	if !announced {
		return k.releaseLock(ctx)
	}
	start := time.Now()
	ctx = k.locker.emit(ctx, observe.Event{Kind: observe.ReleaseStart, Resource: k.resource, Token: uint64(k.token)})
	err := k.releaseLock(ctx)
	k.locker.emit(ctx, observe.Event{Kind: observe.ReleaseEnd, Resource: k.resource, Token: uint64(k.token), Duration: time.Since(start), Err: err})
	return err
}

// releaseLock is Release, unobserved.
func (k *Lock) releaseLock(ctx context.Context) error {
	// A Lock that has ended says so, whatever ctx: as Refresh and TTL do.
	if err := k.ended(); err != nil {
		k.withdrawRanOut(ctx)
		return err
	}
	if err := call.Err(ctx); err != nil {
		return fmt.Errorf("fencedlock: release %s: nothing sent, the context had ended: %w", names.Quote(k.resource), err)
	}
	if err := k.beginRelease(ctx); err != nil {
		return err
	}
	// The Locker's next waiter for the resource, if it has one, waits
	// for this release, which hands it the lock or queues it.
	next := k.locker.room.Candidate(k.resource)
	keys := k.keyArgs[:keyMarker]
	if next.Owner != "" {
		// The candidate's abandon marker: see leftBehind.
		keys = append(make([]any, 0, keyMarker+1), keys...)
		keys = append(keys, keyFor(k.locker.prefix, k.resource, markerKind+next.Owner[:len(next.Owner)-1]))
	}
	sent := time.Now()
	r, err := k.release(ctx, keys, "", "", next)
	k.handedOver(ctx, r, err, sent, next)
	return k.finishRelease(r.held, err, time.Now())
}

// withdrawRanOut deletes the key of a Lock whose lease ran out by the
// local clock, once, and only with a ctx that has not ended: Redis may
// keep the key (a Refresh answered too late), and it is deleted, or
// handed to a waiter, if it is still this owner's. Its outcome changes
// nothing of the Lock's. Release runs it, and so does package election
// (through package withdraw) for a term it lost.
func (k *Lock) withdrawRanOut(ctx context.Context) {
	if call.Ended(ctx) != nil || !k.withdrawOnce() {
		return
	}
	sent := time.Now()
	r, rerr := k.release(ctx, k.keyArgs[:keyMarker], "", "", wait.Candidate{})
	k.handedOver(ctx, r, rerr, sent, wait.Candidate{})
}

func init() {
	withdraw.RanOut = func(ctx context.Context, lock any) {
		if k, ok := lock.(*Lock); ok && k.check() == nil {
			k.withdrawRanOut(ctx)
		}
	}
}

// withdrawOnce reports whether the Lock ended as its lease ran out by the
// local clock and no Release has asked Redis to delete its key since;
// then the caller does.
func (k *Lock) withdrawOnce() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ranOut || k.withdrawn {
		return false
	}
	k.withdrawn = true
	return true
}

// beginRelease makes the caller the Lock's running Release, and stops the
// heartbeat. One Release runs at a time: while another runs, it waits for
// it to end (while ctx lasts), then tries again. It returns the Lock's end
// once it has ended, or why it stopped waiting.
func (k *Lock) beginRelease(ctx context.Context) error {
	for {
		k.mu.Lock()
		do, after := k.stepLocked(evReleaseCalled, nil)
		var running chan struct{}
		if do&doWait != 0 {
			running = k.releaseEndLocked()
		}
		k.mu.Unlock()
		after.run(k)
		switch {
		case do&doBeginRelease != 0:
			return nil
		case do&doWait == 0:
			return k.ended()
		}
		if err := k.awaitRelease(ctx, running); err != nil {
			return err
		}
	}
}

// releaseEndLocked returns a channel closed when the running Release
// ends, made by the first caller that waits for it: most Releases run with
// nobody waiting. k.mu is held, and a Release runs.
func (k *Lock) releaseEndLocked() chan struct{} {
	if k.releasing == nil {
		k.releasing = make(chan struct{})
	}
	return k.releasing
}

// awaitRelease waits until running, the channel of another Release of
// the Lock, is closed, or until ctx ends: then it returns why.
func (k *Lock) awaitRelease(ctx context.Context, running <-chan struct{}) error {
	select {
	case <-running:
		return nil
	case <-ctx.Done():
	}
	if call.Cause(ctx) != nil {
		return fmt.Errorf("fencedlock: release %s: stopped while another Release of this Lock had no answer: %w", names.Quote(k.resource), call.Err(ctx))
	}
	return fmt.Errorf("%w: release %s: another Release of this Lock had no answer before the context ended: %w", ErrUnavailable, names.Quote(k.resource), ctx.Err())
}

// finishRelease applies the outcome of the running Release, whose script
// call returned held and err at returned, and returns Release's error.
// The Lock ends, when it does, in the same step as the Release stops
// running, so that a Refresh that raced it and found the key gone (see
// notHeld) sees how it ended.
func (k *Lock) finishRelease(held bool, err error, returned time.Time) error {
	var e leaseEvent
	var why error // the reason the Lock ends, if this ends it
	switch {
	case err == nil && held:
		e, why = evReleased, ErrReleased
	case err == nil:
		err = k.lostErr("release found the lock gone or taken")
		e, why = evReleaseGone, err
	case call.Unsent(err, k.locker.resends):
		e = evReleaseUnsent
	default:
		e = evReleaseUnknown
	}
	k.mu.Lock()
	if why == nil {
		why = k.pending // a failed Release ends the Lock only for a loss found while it ran
	}
	if e == evReleaseUnknown {
		k.unsureLocked(returned)
		k.unsureGone = true
	}
	_, after := k.stepLocked(e, why)
	k.mu.Unlock()
	after.run(k)
	return err
}

// handedOver tells the waiters of this Locker what a release of k, sent
// at sent, did for them: the grant it made to one, or the place it gave
// next, its candidate (see wait.Room.Candidate), in the Redis queue. r
// and err are what the release returned.
func (k *Lock) handedOver(ctx context.Context, r releaseReply, err error, sent time.Time, next wait.Candidate) {
	l := k.locker
	if next.Owner != "" {
		var stays bool // next still waits, or left with a lock of its own
		unsure := false
		switch {
		case err != nil && call.Unsent(err, l.resends):
			l.room.Unused(next)
			stays = true
		case err != nil:
			stays, unsure = l.room.Unsure(next), true
		case r.owner == next.Owner:
			stays = l.room.Granted(next, uint64(r.token), sent)
		case r.queued:
			stays = l.room.Queued(next, uint64(r.token), sent)
		default:
			l.room.Unused(next)
			stays = true
		}
		if !stays {
			l.leftBehind(ctx, k.resource, next, unsure)
		}
	}
	if r.owner == "" {
		return
	}
	switch {
	case r.owner == next.Owner:
	case r.owner[:lockerIDLen] == l.id:
		// A waiter of this Locker: the reply tells it, whether or not
		// the grant was published too (see lua/release.lua).
		l.room.Deliver(k.resource, r.owner, uint64(r.token), sent)
	}
	if r.told == releaseUnpublished {
		l.room.PubSubRefused("PUBLISH of a hand-over on "+k.chanArg.(string)+r.owner[:lockerIDLen], nil, script.ACLDocs)
	}
	if l.watched() {
		l.emit(ctx, observe.Event{Kind: observe.HandOver, Resource: k.resource, Token: uint64(r.token)})
	}
}

// leftBehind undoes, in the background, what a release may have done for
// next, a waiter of this Locker that left before it heard: it takes its
// place out of the Redis queue, and hands on the lock it may have been
// granted. unsure says that the release's reply was lost: the release
// may not have run yet, so the cleanup also sets next's abandon marker,
// which makes the release, should it arrive later, give next nothing.
func (l *Locker) leftBehind(ctx context.Context, resource string, next wait.Candidate, unsure bool) {
	k := l.lockFor(resource, next.Owner)
	ms := next.TTL.Milliseconds()
	var markerMS int64
	if unsure {
		// At most the longest time.Duration: ms came from one.
		markerMS = min(ms+abandonMarkerTTL.Milliseconds(), math.MaxInt64/int64(time.Millisecond))
	}
	err := l.cleanups.Run(ctx, resource, "hand on what a release gave a waiter that left", next.Life+call.Timeout, func(ctx context.Context) error {
		return k.withdraw(ctx, ms, next.Life, markerMS)
	})
	if err != nil && !errors.Is(err, call.ErrPending) {
		l.warn("fencedlock: a waiter left as a release handed it the lock; it may stay locked until its TTL ends", resource, "err", err)
	}
}

// release runs the release script (see lua/release.lua) as k's owner,
// with next, the Locker's next waiter, as its candidate (none for a
// waiter that gives up).
func (k *Lock) release(ctx context.Context, keys []any, entry string, markerMS any, next wait.Candidate) (releaseReply, error) {
	var candidate, life any = "", ""
	if next.Owner != "" {
		candidate = next.Owner + strconv.FormatInt(next.TTL.Milliseconds(), 10)
		life = next.Life.Milliseconds()
	}
	res, err := call.BoundedOn(ctx, k.locker.heeds, releaseCall{k, keys, entry, markerMS, candidate, life}, runRelease)
	if err != nil {
		return releaseReply{}, redisErr(ctx, "release", k.resource, err, k.keys[keyLock], k.keys[keyQueue], k.keys[keyDeadlines])
	}
	r, err := decodeRelease(res)
	if err != nil {
		return releaseReply{}, fmt.Errorf("fencedlock: release %s: %w", names.Quote(k.resource), err)
	}
	return r, nil
}

// releaseCall is what a release sends besides the Lock's owner and
// channels (see Lock.release).
type releaseCall struct {
	k                                *Lock
	keys                             []any
	entry, markerMS, candidate, life any
}

// runRelease runs the release script for r, one round trip (see
// call.BoundedOn).
func runRelease(ctx context.Context, r releaseCall) (any, error) {
	k := r.k
	return releaseScript.Run(ctx, k.locker.client, r.keys, k.owner, k.chanArg, r.entry, r.markerMS, k.locker.idleArg, r.candidate, r.life, k.locker.room.Publish()).Result()
}

// withdraw withdraws an acquire attempt for ms milliseconds, or a wait: it
// leaves the queue if queued (place is how long its place there may
// still be handed the lock, 0 when not queued), releases (handing on) a
// lock granted to the attempt meanwhile, and, with markerMS above zero,
// sets the attempt's abandon marker for that long. An error that means
// "not now" (see call.NotNow) is tried again, after a pause that grows, while
// ctx lasts, and at the latest right after place has passed: a release
// may hand the place the lock until then, and a try after it passes that
// lock on. The release script does the same whether it runs once or
// again. Callers run it through Locker.giveUp, as a cleanup.
func (k *Lock) withdraw(ctx context.Context, ms int64, place time.Duration, markerMS int64) error {
	entry, marker := "", any("")
	if place > 0 {
		entry = k.owner.(string) + strconv.FormatInt(ms, 10)
	}
	if markerMS > 0 {
		marker = markerMS
	}
	// The attempts that renewed the place were sent before giveUp
	// began: a place they renewed lapses in Redis before lapse (a copy
	// of a lost one arriving later is refused by the marker, once set).
	lapse := time.Now().Add(place)
	pause := wait.MinReconnectPause
	for {
		sent := time.Now()
		r, err := k.release(ctx, k.keyArgs[:], entry, marker, wait.Candidate{})
		k.handedOver(ctx, r, err, sent, wait.Candidate{})
		if err == nil || !k.locker.notNow(err) || call.Ended(ctx) != nil {
			return err
		}
		d := pause
		if left := time.Until(lapse); left > 0 {
			d = min(d, left+wait.MinReconnectPause)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, wait.MaxReconnectPause)
	}
}

// TTL returns the lock's remaining time to live in Redis, if this Lock
// still holds it. When Redis answers that it does not, it returns an
// error wrapping ErrLockLost, and the Lock ends as lost; when Redis
// cannot answer, an error wrapping ErrUnavailable. It is a measurement,
// not a safety check: the lock can expire right after it returns. Only
// the store's token check is safe.
func (k *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if err := k.check(); err != nil {
		return 0, err
	}
	if err := k.ended(); err != nil {
		return 0, err
	}
	res, err := call.Bounded(ctx, k.locker.heeds, func(ctx context.Context) ([]any, error) {
		return pttlScript.Run(ctx, k.locker.client, k.keyArgs[:1], k.owner).Slice()
	})
	if err != nil {
		return 0, redisErr(ctx, "ttl", k.resource, err, k.keys[keyLock])
	}
	r, err := decodePTTL(res)
	if err != nil {
		return 0, fmt.Errorf("fencedlock: ttl %s: %w", names.Quote(k.resource), err)
	}
	if r.status == pttlNotOwner {
		return 0, k.notHeld(ctx, "the lock is gone or taken")
	}
	if r.pttl < 0 {
		return 0, fmt.Errorf("%w: ttl %s: lock key %s has no expiry (pttl %d)", ErrCorrupt, names.Quote(k.resource), names.Quote(k.keys[keyLock]), r.pttl)
	}
	return time.Duration(r.pttl) * time.Millisecond, nil
}

func (k *Lock) check() error {
	if k == nil || k.locker == nil || k.locker.client == nil {
		return invalidArg("nil or zero Lock: use one returned by a Locker")
	}
	return nil
}

// lost ends the Lock as lost, Redis having answered that it does not
// hold the key, for the reason why; it returns the error it ended with
// (an earlier end's, if it had already ended). While a Release runs, the
// Lock does not end: the loss is kept for the Release, which ends the
// Lock as released if it released it (a Refresh or heartbeat that raced
// it found the key it had just deleted), and as lost if not.
func (k *Lock) lost(why string) error { return k.lose(evGone, why) }

// ranOutIfDue ends the Lock as lost, for the reason why, when its lease
// has run out by the local clock before a Refresh succeeded; it reports
// whether the Lock has ended (by this or before). The heartbeat calls it
// with a view of the lease that may be older than a Refresh of the
// caller's: the lease as it is now decides.
func (k *Lock) ranOutIfDue(why string) bool {
	k.mu.Lock()
	if !k.state.ended() && time.Now().Before(k.until) {
		k.mu.Unlock()
		return false
	}
	_, after := k.stepLocked(evRanOut, k.lostErr(why))
	k.mu.Unlock()
	after.run(k)
	return true
}

// lose steps the Lock by e, an event that finds it lost for the reason
// why: see lost.
func (k *Lock) lose(e leaseEvent, why string) error {
	err := k.lostErr(why)
	k.mu.Lock()
	_, after := k.stepLocked(e, err)
	k.mu.Unlock()
	after.run(k)
	if ended := k.ended(); ended != nil {
		return ended
	}
	return err
}

// armExpiryLocked ends the Lock as lost once its lease runs out by the
// local clock (k.until), when someone watches its end and no heartbeat
// runs (the heartbeat ends it then itself). A Lock that nobody watches
// gets no timer: its calls find that its lease ran out (see
// ranOutLocked). k.mu is held.
func (k *Lock) armExpiryLocked() {
	if k.stop != nil || k.done == nil && k.onEnd == nil && !k.announced {
		return
	}
	d := time.Until(k.until)
	if k.expiry == nil {
		k.expiry = time.AfterFunc(d, k.expire)
		return
	}
	k.expiry.Reset(d)
}

// nearerLocked moves the expiry timer, if one is armed, to k.until when
// that came nearer than prev, where it was armed for: a Refresh for a
// shorter TTL, successful or with an unknown outcome, brings the lease's
// end nearer (a later end needs nothing: expire waits again). k.mu is
// held.
func (k *Lock) nearerLocked(prev time.Time) {
	if k.expiry != nil && !k.state.ended() && k.until.Before(prev) {
		k.expiry.Reset(time.Until(k.until))
	}
}

// expire is the function of the expiry timer: it ends the Lock as lost,
// unless a Refresh has moved its lease on, when it waits again.
func (k *Lock) expire() {
	k.mu.Lock()
	if left := time.Until(k.until); left > 0 && !k.state.ended() {
		k.expiry.Reset(left)
		k.mu.Unlock()
		return
	}
	// Ended here, under the same k.mu as the check: a Refresh that
	// succeeds after the check cannot be overruled by it.
	after := k.ranOutLocked()
	k.mu.Unlock()
	after.run(k)
}

// lostErr is the error of a Lock lost for the reason why.
func (k *Lock) lostErr(why string) error {
	return fmt.Errorf("%w: %s (token %d): %s", ErrLockLost, names.Quote(k.resource), k.token, why)
}

// notHeld is lost for a call that Redis answered that the Lock does not
// hold the lock. When a Release is running, the answer may be its doing:
// it waits for the Release (while ctx lasts) and returns ErrReleased if
// it released the lock.
func (k *Lock) notHeld(ctx context.Context, why string) error {
	var releasing chan struct{}
	k.mu.Lock()
	if k.state.releasing() {
		releasing = k.releaseEndLocked()
	}
	k.mu.Unlock()
	if releasing != nil {
		select {
		case <-releasing:
		case <-ctx.Done():
		}
	}
	return k.lost(why)
}

// String describes the lock for logs: resource and token, not the owner
// nonce.
func (k *Lock) String() string {
	if k == nil {
		return "fencedlock.Lock(nil)"
	}
	return "fencedlock.Lock{" + names.Quote(k.resource) + " token " + k.token.String() + "}"
}

// The replies of the scripts a Lock runs on its lock (lease.go calls
// them): refresh.lua, pttl.lua and release.lua, decoded. Their statuses
// are named as in the scripts.

// refreshReply is the reply of refresh.lua: refreshHeld or
// refreshNotHeld.
type refreshReply int64

const (
	refreshNotHeld refreshReply = 0 // NOT_HELD: the lock key is gone, another's or of another type
	refreshHeld    refreshReply = 1 // HELD: the lock is the caller's, extended
)

// decodeRefresh decodes the reply of refresh.lua: HELD or NOT_HELD.
func decodeRefresh(n int64) (refreshReply, error) {
	if r := refreshReply(n); r == refreshHeld || r == refreshNotHeld {
		return r, nil
	}
	return 0, fmt.Errorf("unexpected reply %d", n)
}

// The statuses of pttl.lua's replies.
const (
	pttlNotOwner = 0 // NOT_OWNER: the lock key is gone, another's or of another type
	pttlOwned    = 1 // OWNED: the lock is the caller's
)

// pttlReply is a reply of pttl.lua, decoded.
type pttlReply struct {
	status int64 // pttlOwned or pttlNotOwner
	pttl   int64 // owned: the lock key's PTTL in milliseconds (-1: no expiry)
}

// decodePTTL decodes a reply of pttl.lua: {OWNED, pttl} or
// {NOT_OWNER}.
func decodePTTL(res []any) (pttlReply, error) {
	var status int64 = -1
	if len(res) > 0 {
		status, _ = res[0].(int64)
	}
	switch {
	case status == pttlOwned && len(res) == 2:
		if pttl, ok := res[1].(int64); ok {
			return pttlReply{status: status, pttl: pttl}, nil
		}
	case status == pttlNotOwner && len(res) == 1:
		return pttlReply{status: status}, nil
	}
	return pttlReply{}, fmt.Errorf("unexpected reply %v", res)
}

// The values of the flags of release.lua's replies.
const (
	releaseNotHeld     = 0 // NOT_HELD: the caller did not hold the lock
	releaseHeld        = 1 // HELD: the caller held the lock
	releaseUnpublished = 0 // UNPUBLISHED: Redis refused the hand-over's message
	releasePublished   = 1 // PUBLISHED: the hand-over's message was published
	releaseInReply     = 2 // IN_REPLY: the hand-over went to the candidate, nobody being queued, and was not published
	releaseQueued      = 1 // QUEUED: the candidate took its place at the back of the queue
)

// lockerIDLen is the length of a Locker's id, the start of its owner
// nonces.
const lockerIDLen = 16

// releaseReply is a reply of release.lua, decoded.
type releaseReply struct {
	held bool // HELD: the caller held the lock (and no longer does)
	// The hand-over, if the lock was handed to a waiter: its owner
	// (nonce and ':', "" when there was none) and token.
	owner string
	token Token
	// told is how the waiter hears of it: releasePublished,
	// releaseUnpublished or releaseInReply.
	told int64
	// queued says that the candidate took its place at the back of the
	// queue.
	queued bool
}

// decodeRelease decodes a reply of release.lua: held, or {held, owner,
// token, told, queued}.
func decodeRelease(reply any) (releaseReply, error) {
	res, ok := reply.([]any)
	held := reply
	if ok && len(res) == 5 {
		held = res[0]
	} else if ok {
		return releaseReply{}, fmt.Errorf("unexpected reply %v", reply)
	}
	var r releaseReply
	switch n, isInt := held.(int64); {
	case isInt && n == releaseHeld:
		r.held = true
	case isInt && n == releaseNotHeld:
	default:
		return releaseReply{}, fmt.Errorf("unexpected reply %v", reply)
	}
	if !ok {
		return r, nil
	}
	owner, _ := res[1].(string)
	token, err := tokenFromReply(res[2])
	told, ok1 := res[3].(int64)
	queued, ok2 := res[4].(int64)
	if err != nil || len(owner) <= lockerIDLen || !ok1 || !ok2 ||
		(told != releasePublished && told != releaseUnpublished && told != releaseInReply) ||
		(queued != releaseQueued && queued != 0) {
		return releaseReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	r.owner, r.token, r.told, r.queued = owner, token, told, queued == releaseQueued
	return r, nil
}
