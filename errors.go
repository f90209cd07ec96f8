package fencedlock

import (
	"errors"
	"fmt"

	"github.com/fencedlock/fencedlock/internal/names"
)

// Sentinel errors. Compare with errors.Is: the library wraps them with
// detail (the resource, the argument, the cause). The few errors that
// wrap none are listed in
// https://github.com/fencedlock/fencedlock/blob/main/docs/errors.md.
var (
	// ErrNotAcquired means Redis answered that another owner holds the
	// lock (or that it is free but promised to a queued waiter).
	// TryAcquire returns it at once; Acquire returns it wrapped together
	// with the context's error when the context ends while the last answer
	// said so. A context done before the call also returns it, with the
	// context's error. It is never returned for an unreachable Redis: see
	// ErrUnavailable.
	ErrNotAcquired = errors.New("fencedlock: lock not acquired")

	// ErrLockLost means Redis answered that this Lock no longer holds its
	// key (it expired or was taken over), or that the lease ran out by the
	// local clock before a refresh succeeded. Nothing was changed in Redis
	// (but for a Release whose lost reply the client retried: see
	// Lock.Release). Writes made with its token may still be accepted by a
	// store until a newer token is used; stop working and acquire again.
	// It is never returned for an unreachable Redis, nor for a Lock that
	// Release released.
	ErrLockLost = errors.New("fencedlock: lock lost")

	// ErrReleased is what Lock.Err returns once Release has released the
	// lock. Calls on a released Lock return errors wrapping it, and not
	// ErrLockLost.
	ErrReleased = errors.New("fencedlock: lock released")

	// ErrStaleToken means a store refused a write, or the fence of a read
	// (Store.Fence, Update), because it has seen a higher token for the
	// resource: the caller lost its lock. It should acquire again (getting
	// a higher token), re-read the resource and retry. Over HTTP this is
	// 409 Conflict. A *StaleTokenError carrying the tokens matches it with
	// errors.Is.
	ErrStaleToken = errors.New("fencedlock: stale fencing token")

	// ErrNotFound means a store holds no value for the resource.
	ErrNotFound = errors.New("fencedlock: resource not found")

	// ErrInvalidToken means a token is zero, malformed, or out of the range
	// a store can compare exactly. Over HTTP this is 400 Bad Request.
	ErrInvalidToken = errors.New("fencedlock: invalid token")

	// ErrInvalidArgument means a caller passed an argument that cannot be
	// used: an empty resource, a TTL below one millisecond, a nil client.
	// The wrapping error names the argument.
	ErrInvalidArgument = errors.New("fencedlock: invalid argument")

	// ErrCorrupt means a key where the library keeps its state holds what
	// the library cannot use: a value it did not write (a token counter
	// that is not a decimal integer, a key of another Redis type), or a
	// token counter at 2^63-1 that can grant no higher token. The wrapping
	// error names the key. The library changes nothing when it finds one.
	// Repair the key by hand; deleting a token counter re-seeds it from the
	// Redis clock, which may be below tokens already granted (see
	// Locker.Advance).
	ErrCorrupt = errors.New("fencedlock: corrupt state in redis")

	// ErrNotReplicated means an acquire of a Locker made with WithReplicas
	// got its lock, but fewer replicas than asked confirmed the grant in
	// time. The acquire released the lock (the error says if that failed).
	// Redis still works; its replicas are behind or disconnected. Try
	// again later.
	ErrNotReplicated = errors.New("fencedlock: grant not confirmed by replicas")

	// ErrUnavailable means the backend could not answer: Redis (or a
	// store's database) could not be reached, did not answer before the
	// context ended, or answered with an error that is not about the lock
	// (LOADING, OOM, READONLY, NOAUTH, BUSY, CLUSTERDOWN, ...). The wrapping
	// error also wraps the cause: a *net.OpError, a redis.Error, the
	// context's error. It says nothing about who holds the lock: retry
	// later, and treat the backend as down, not the lock as taken.
	ErrUnavailable = errors.New("fencedlock: backend unavailable")
)

// MaxResourceLen is the longest resource name, in bytes, that the Locker,
// IssueToken (for lock keys), every store and fencehttp accept. A longer
// name is refused with an error wrapping ErrInvalidArgument before
// anything is sent. Error messages quote at most a short prefix of a name.
const MaxResourceLen = 1024

// The internal packages check names against the same bound: this does not
// compile unless they agree.
var _ = [1]struct{}{}[MaxResourceLen-names.Max]

// StaleTokenError is returned by a store that refused a Put or a Fence
// because Token is lower than Current, the resource's fence: the highest
// token the store has seen for it. errors.Is(err, ErrStaleToken) reports
// true for it.
//
// The writer lost its lock: acquire again, re-read, retry. If Current is
// higher than any token the Locker hands out (its counter was lost and the
// Redis clock is behind), call Locker.Advance with Current first.
type StaleTokenError struct {
	Resource string
	Token    Token // the rejected token
	Current  Token // the store's fence
}

// Error reports the resource and both tokens.
func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fencedlock: stale fencing token %d for resource %s: store holds %d", e.Token, names.Quote(e.Resource), e.Current)
}

// Is reports whether target is ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

func invalidArg(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
