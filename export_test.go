package fencedlock

import (
	"time"

	"github.com/fencedlock/fencedlock/internal/slot"
	"github.com/fencedlock/fencedlock/internal/wait"
)

// SetSubscriptionLinger sets how long an idle channel stays subscribed
// and returns a function restoring the old value. Tests set it before
// they start Lockers, never while one is waiting.
func SetSubscriptionLinger(d time.Duration) (restore func()) {
	old := wait.Linger
	wait.Linger = d
	return func() { wait.Linger = old }
}

// SetSyncHook makes f run, with the Lock's resource, after each
// transition that changed what a Lock's Locker's waiters should know and
// before the Lock tells them its state (syncRoom), and returns a function
// restoring the old hook. Tests set it while no Lock of theirs is granted
// or refreshed.
func SetSyncHook(f func(resource string)) (restore func()) {
	old := testHookSync.Swap(&f)
	return func() { testHookSync.Store(old) }
}

// HashSlot is the hash slot of a key, for comparing with CLUSTER KEYSLOT.
var HashSlot = slot.Of

// IssuedRecordKey returns the key of IssueToken's grant record.
func (l *Locker) IssuedRecordKey(lockKey string) string {
	return issuedKey(l.prefix, "issued", slotTag(lockKey), lockKey)
}

// WaiterRefused reports whether the first of l's waiters for resource has
// heard the answer to a refused attempt.
func (l *Locker) WaiterRefused(resource string) bool { return l.room.FirstRefused(resource) }

// WaiterHeldBack reports whether the first of l's waiters for resource
// waits, without an attempt in Redis, for the release of a Lock of l.
func (l *Locker) WaiterHeldBack(resource string) bool { return l.room.FirstHeldBack(resource) }

// LockKey returns the key of resource's lock.
func (l *Locker) LockKey(resource string) string { return l.key(resource, "lock") }

// TokenKey returns the key of resource's token counter.
func (l *Locker) TokenKey(resource string) string { return l.key(resource, "token") }

// IssuedTokenKey returns the key of the counter IssueToken uses for
// lockKey.
func (l *Locker) IssuedTokenKey(lockKey string) string {
	return issuedKey(l.prefix, "issued-token", slotTag(lockKey), lockKey)
}

// Key returns the key of resource's value and token.
func (s *RedisStore) Key(resource string) string { return keyFor(s.prefix, resource, "value") }

// SetIssuedKeeping sets how often a Locker's goroutine that keeps the
// keys of issued tokens wakes, and the longest time between two checks of
// one grant, for the Lockers that issue their first token afterwards, and
// returns a function restoring the old values.
func SetIssuedKeeping(tick, maxGap time.Duration) (restore func()) {
	oldTick, oldGap := issuedKeepTick, issuedKeepMaxGap
	issuedKeepTick, issuedKeepMaxGap = tick, maxGap
	return func() { issuedKeepTick, issuedKeepMaxGap = oldTick, oldGap }
}

// KeptIssuedGrants returns how many grants l keeps the token keys of.
func (l *Locker) KeptIssuedGrants() int {
	l.issued.mu.Lock()
	defer l.issued.mu.Unlock()
	return len(l.issued.grants)
}

// GrantsChannel returns the channel on which l's waiters for resource
// hear of the grants that other Lockers' releases hand them.
func (l *Locker) GrantsChannel(resource string) string {
	return l.lockFor(resource, l.id+":").channel
}
