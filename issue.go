package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/names"
	"github.com/fencedlock/fencedlock/internal/script"
	"github.com/fencedlock/fencedlock/internal/slot"
)

// IssueToken issues a fencing token for a lock that another library
// holds: the Redis key lockKey, set to ownerValue by the grant asking. It
// checks that lockKey still holds ownerValue and issues the token in the
// same script, so the token belongs to a grant that was live when it was
// issued. The same grant asking again gets the same token; a new grant
// (another value) gets a token higher than every one issued for lockKey
// before. So ownerValue must be unique per grant, as the random values of
// redsync and redislock are; a fixed value lets two grants share a token.
//
// The Locker keeps the keys that remember the grant's token while lockKey
// holds ownerValue, however long the other library extends it: one
// goroutine of the Locker, running only while such a grant may still hold
// its lock key, checks each about when its lock key would expire. Should
// this process stop first, the keys expire the idle expiry after the
// lock key would have, as last checked, and the grant asking again after
// that gets a new, higher token.
//
// When lockKey is missing, holds another value or is not a string, the
// error wraps ErrLockLost and nothing is written. An empty lockKey or
// ownerValue, or a Locker whose prefix holds "{", returns an error wrapping
// ErrInvalidArgument; a counter or record holding what the library did not
// write, one wrapping ErrCorrupt. Either way nothing changes. IssueToken
// never changes lockKey itself.
//
// Tokens issued for one lockKey compare only with each other. How they are
// counted, the keys IssueToken keeps and its use with Redlock are in
// https://github.com/fencedlock/fencedlock/blob/main/docs/other-locks.md.
func (l *Locker) IssueToken(ctx context.Context, lockKey, ownerValue string) (Token, error) {
	counter, record, err := l.issuedKeys(lockKey)
	if err != nil {
		return 0, err
	}
	if ownerValue == "" {
		return 0, invalidArg("empty owner value for lock key %s", names.Quote(lockKey))
	}
	keys := script.Keys(lockKey, counter, record)
	res, err := call.Bounded(ctx, l.heeds, func(ctx context.Context) ([]any, error) {
		return issueScript.Run(ctx, l.client, keys, ownerValue, l.idleArg).Slice()
	})
	if err != nil {
		return 0, redisErr(ctx, "issue token for lock key", lockKey, err, counter, record)
	}
	r, err := decodeIssue(res)
	if err != nil {
		return 0, fmt.Errorf("fencedlock: issue token for lock key %s: %w", names.Quote(lockKey), err)
	}
	if r.status == issueNotHeld {
		l.issued.forget(lockKey, ownerValue)
		return 0, fmt.Errorf("%w: lock key %s does not hold the owner value", ErrLockLost, names.Quote(lockKey))
	}
	l.keepIssued(lockKey, ownerValue, keys, r.pttl)
	return r.token, nil
}

// The statuses of issue.lua's replies, named as in the script.
const (
	issueNotHeld = 0 // NOT_HELD: the lock key does not hold the owner value
	issueIssued  = 1 // ISSUED: the grant's token
)

// issueReply is a reply of issue.lua, decoded.
type issueReply struct {
	status int64 // issueIssued or issueNotHeld
	token  Token // issued: the grant's token
	pttl   int64 // issued: the lock key's PTTL in milliseconds (-1: no expiry)
}

// decodeIssue decodes a reply of issue.lua: {ISSUED, token, pttl} or
// {NOT_HELD}.
func decodeIssue(res []any) (issueReply, error) {
	var status int64 = -1
	if len(res) > 0 {
		status, _ = res[0].(int64)
	}
	switch {
	case status == issueNotHeld && len(res) == 1:
		return issueReply{status: status}, nil
	case status == issueIssued && len(res) == 3:
		pttl, ok := res[2].(int64)
		if !ok {
			break
		}
		token, err := tokenFromReply(res[1])
		if err != nil {
			return issueReply{}, err
		}
		return issueReply{status: status, token: token, pttl: pttl}, nil
	}
	return issueReply{}, fmt.Errorf("unexpected reply %v", res)
}

// AdvanceIssued raises the counter of the tokens IssueToken issues for
// lockKey, as Advance does for a resource's: the next grant that asks
// gets a token higher than floor. A grant that already has its token
// keeps it. floor must be from 1 to 2^63-2; otherwise the error wraps
// ErrInvalidToken and nothing changes. Its other errors are those of
// Advance, with the same state after them.
func (l *Locker) AdvanceIssued(ctx context.Context, lockKey string, floor Token) error {
	counter, _, err := l.issuedKeys(lockKey)
	if err != nil {
		return err
	}
	return l.advance(ctx, "lock key", lockKey, counter, floor)
}

// issuedKeys returns IssueToken's counter and grant record for lockKey.
func (l *Locker) issuedKeys(lockKey string) (counter, record string, err error) {
	if err := l.ready(); err != nil {
		return "", "", err
	}
	if lockKey == "" {
		return "", "", invalidArg("empty lock key")
	}
	if len(lockKey) > MaxResourceLen {
		return "", "", invalidArg("lock key %s is longer than MaxResourceLen (%d bytes)", names.Quote(lockKey), MaxResourceLen)
	}
	if strings.IndexByte(l.prefix, '{') >= 0 {
		return "", "", invalidArg("prefix %s holds \"{\": the keys of IssueToken could not share the hash slot of lock key %s", names.Quote(l.prefix), names.Quote(lockKey))
	}
	tag := slotTag(lockKey)
	return issuedKey(l.prefix, "issued-token", tag, lockKey), issuedKey(l.prefix, "issued", tag, lockKey), nil
}

// issuedKey returns "<prefix>:<kind>:{<tag>}:<lockKey>", without
// "<prefix>:" for the empty prefix.
func issuedKey(prefix, kind, tag, lockKey string) string {
	k := kind + ":{" + tag + "}:" + lockKey
	if prefix == "" {
		return k
	}
	return prefix + ":" + k
}

// slotTag returns a non-empty hash tag, without "}", that puts a key in
// the Redis Cluster hash slot of key: the part of key that Redis hashes,
// when it holds no "}", else the smallest decimal number hashing to the
// same slot.
func slotTag(key string) string {
	h := slot.Hashed(key)
	if strings.IndexByte(h, '}') < 0 {
		return h
	}
	return strconv.FormatUint(uint64(slotNumber(slot.CRC(h))), 10)
}

// slotNumbers holds, for every hash slot, the smallest number whose
// decimal form hashes to it; it is filled on first use (110k CRCs).
var slotNumbers struct {
	once sync.Once
	n    [16384]uint32
}

func slotNumber(n16 uint16) uint32 {
	slotNumbers.once.Do(func() {
		left := len(slotNumbers.n)
		seen := make([]bool, len(slotNumbers.n))
		for n := uint32(0); left > 0; n++ {
			s := slot.CRC(strconv.FormatUint(uint64(n), 10))
			if !seen[s] {
				seen[s] = true
				slotNumbers.n[s] = n
				left--
			}
		}
	})
	return slotNumbers.n[n16]
}

// The keys of an issued token expire the idle expiry after the grant's
// lock key would, as far as the last IssueToken saw. Another library
// extends its lock key without a word to them, so the Locker that issued
// the token keeps them: it remembers the grant while its lock key may
// still hold it, and one goroutine per Locker, running only while it
// remembers one, checks each grant with keep_issued.lua about when its
// lock key would expire. While the lock key holds the grant's value, the
// check extends the keys to its TTL plus the idle expiry; once it does
// not, the grant is forgotten, and its keys expire on their own.

var (
	// issuedKeepTick is how often the keeping goroutine looks for
	// grants due for a check: at most a third of the idle expiry.
	issuedKeepTick = time.Second
	// issuedKeepMaxGap bounds the time between two checks of a grant,
	// which is its lock key's TTL when shorter, and a third of the idle
	// expiry at most: a grant whose lock key is deleted is forgotten
	// within it.
	issuedKeepMaxGap = time.Minute
)

const (
	// issuedKeepBatch is how many grants one pipeline checks at most.
	issuedKeepBatch = 256
	// issuedKeepTimeout bounds one pipeline of checks.
	issuedKeepTimeout = 5 * time.Second
)

// issuedGrants is what a Locker remembers of the grants whose token's
// keys it keeps. Its zero value remembers none.
type issuedGrants struct {
	mu      sync.Mutex              // guards the fields below
	grants  map[string]*issuedGrant // by lock key: the last grant that asked
	running bool                    // the keeping goroutine runs
	tick    time.Duration           // the goroutine's tick, set with grants
	maxGap  time.Duration           // longest time between checks, set with grants
}

// issuedGrant is a grant whose token's keys the Locker keeps.
type issuedGrant struct {
	value string
	keys  []any     // lock key, counter, record, boxed
	next  time.Time // when to check it next
	until time.Time // when its keys expire unless kept, as far as the Locker knows
}

// keepIssued remembers the grant of lockKey with value, whose token's
// keys (boxed in keys) IssueToken has just set to last pttl (the lock
// key's PTTL in milliseconds, -1 for none) plus the idle expiry, and
// starts the keeping goroutine if it is not running. Keys kept for ever
// need no keeping: then it forgets lockKey's grant.
func (l *Locker) keepIssued(lockKey, value string, keys []any, pttl int64) {
	k := &l.issued
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.idle == 0 || pttl < 0 {
		delete(k.grants, lockKey)
		return
	}
	if k.grants == nil {
		k.grants = make(map[string]*issuedGrant)
		k.tick, k.maxGap = min(issuedKeepTick, l.idle/3), issuedKeepMaxGap
	}
	g := k.grants[lockKey]
	if g == nil || g.value != value {
		g = &issuedGrant{value: value, keys: keys}
		k.grants[lockKey] = g
	}
	k.kept(g, time.Now(), pttl, l.idle)
	if !k.running {
		k.running = true
		go l.keepIssuedKeys(k.tick)
	}
}

// kept sets when g is checked next and when its keys expire, after its
// keys were set at now to last pttl milliseconds plus idle. k.mu is held.
func (k *issuedGrants) kept(g *issuedGrant, now time.Time, pttl int64, idle time.Duration) {
	ttl := time.Duration(pttl) * time.Millisecond
	g.next = now.Add(min(ttl, idle/3, k.maxGap))
	g.until = now.Add(ttl + idle)
}

// forget forgets the grant of lockKey if it is the one with value.
func (k *issuedGrants) forget(lockKey, value string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if g := k.grants[lockKey]; g != nil && g.value == value {
		delete(k.grants, lockKey)
	}
}

// dueGrant is a grant due for a check.
type dueGrant struct {
	lockKey, value string
	keys           []any
}

// due returns the grants due for a check at now; ok is false, and the
// goroutine must end, when there are none left to keep.
func (k *issuedGrants) due(now time.Time) (due []dueGrant, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.grants) == 0 {
		k.running = false
		return nil, false
	}
	for key, g := range k.grants {
		if !g.next.After(now) {
			due = append(due, dueGrant{key, g.value, g.keys})
		}
	}
	return due, true
}

// keepIssuedKeys is the keeping goroutine: every tick it checks the
// grants due, and it ends when none are left.
func (l *Locker) keepIssuedKeys(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for range t.C {
		due, ok := l.issued.due(time.Now())
		if !ok {
			return
		}
		for len(due) > 0 {
			n := min(len(due), issuedKeepBatch)
			l.checkIssued(due[:n])
			due = due[n:]
		}
	}
}

// checkIssued runs keep_issued.lua for each grant of batch, in one
// pipeline, and acts on the replies: a grant over is forgotten, one
// still holding its lock key is checked again later, and one that could
// not be checked is tried again at the next tick while its keys last,
// then forgotten with a warning. A closed client forgets them all.
func (l *Locker) checkIssued(batch []dueGrant) {
	ctx, cancel := context.WithTimeout(context.Background(), issuedKeepTimeout)
	defer cancel()
	cmds, err := call.Bounded(ctx, l.heeds, func(ctx context.Context) ([]*redis.Cmd, error) {
		pipe := l.client.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, g := range batch {
			cmds[i] = keepIssuedScript.Run(ctx, pipe, g.keys, g.value, l.idleArg)
		}
		_, execErr := pipe.Exec(ctx)
		for i, g := range batch {
			err := cmds[i].Err()
			switch {
			case err != nil && redis.HasErrorPrefix(err, "NOSCRIPT"):
				cmds[i] = keepIssuedScript.Run(ctx, l.client, g.keys, g.value, l.idleArg)
			case err == nil && cmds[i].Val() == nil && execErr != nil:
				// not sent: go-redis sets the error of a pipeline that
				// could not get a connection on none of its commands
				cmds[i].SetErr(execErr)
			}
		}
		return cmds, nil
	})
	now := time.Now()
	k := &l.issued
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, d := range batch {
		g := k.grants[d.lockKey]
		if g == nil || g.value != d.value {
			continue // forgotten, or another grant of the lock key asked since
		}
		cerr := err
		if cerr == nil {
			var pttl int64
			if pttl, cerr = keptFor(cmds[i]); cerr == nil {
				if pttl < 0 { // the grant is over, or its keys are kept for ever
					delete(k.grants, d.lockKey)
				} else {
					k.kept(g, now, pttl, l.idle)
				}
				continue
			}
		}
		if errors.Is(cerr, redis.ErrClosed) {
			k.grants = nil
			return
		}
		if now.After(g.until) {
			delete(k.grants, d.lockKey)
			l.warn("fencedlock: the keys of an issued token were not kept: the grant may get another token", d.lockKey, "err", cerr)
			continue
		}
		g.next = now.Add(k.tick)
	}
}

// keptFor returns what keep_issued.lua answered in cmd: the lock key's
// PTTL in milliseconds, -1 when its keys need no more keeping (the
// grant is over, or the lock key has no expiry), or the error.
func keptFor(cmd *redis.Cmd) (int64, error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, err
	}
	r, err := decodeKeepIssued(res)
	if err != nil {
		return 0, fmt.Errorf("fencedlock: keep the keys of an issued token: %w", err)
	}
	if r.status == keepIssuedOver {
		return -1, nil
	}
	return r.pttl, nil
}

// The statuses of keep_issued.lua's replies, named as in the script.
const (
	keepIssuedOver = 0 // OVER: the grant no longer holds its lock key
	keepIssuedKept = 1 // KEPT: the keys are kept as long as the lock key
)

// keepIssuedReply is a reply of keep_issued.lua, decoded.
type keepIssuedReply struct {
	status int64 // keepIssuedKept or keepIssuedOver
	pttl   int64 // kept: the lock key's PTTL in milliseconds (-1: no expiry)
}

// decodeKeepIssued decodes a reply of keep_issued.lua: {KEPT, pttl} or
// {OVER}.
func decodeKeepIssued(res []any) (keepIssuedReply, error) {
	var status int64 = -1
	if len(res) > 0 {
		status, _ = res[0].(int64)
	}
	switch {
	case status == keepIssuedOver && len(res) == 1:
		return keepIssuedReply{status: status}, nil
	case status == keepIssuedKept && len(res) == 2:
		if pttl, ok := res[1].(int64); ok {
			return keepIssuedReply{status: status, pttl: pttl}, nil
		}
	}
	return keepIssuedReply{}, fmt.Errorf("unexpected reply %v", res)
}
