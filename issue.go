package fencedlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/fencedlock/fencedlock/internal/names"
)

// IssueToken issues a fencing token for a lock that another library
// holds: the Redis key lockKey, set to ownerValue by the grant asking.
// It checks that lockKey still holds ownerValue and issues the token in
// one script, so the token belongs to a grant that was live when it was
// issued. When lockKey is missing, holds another value or is not a
// string, it returns an error wrapping ErrLockLost and writes nothing.
//
// The same grant asking again gets the same token. A new grant, which
// sets another value, gets a token higher than every one issued for
// lockKey before. Tokens come from a counter like the Locker's own, seeded
// from the Redis clock, and the counter is never set below the last token
// issued while the record of it is kept. So a lost counter does not issue
// old tokens again; if the record is lost with it (a restart without
// persistence, FLUSHALL), the new tokens are above the old ones unless
// the Redis clock is behind the one that issued them: then stores refuse
// the new writes, and AdvanceIssued raises the counter past the token
// they report. A grant whose record alone is lost gets a new, higher
// token when it asks again.
//
// A grant is known by its value, so ownerValue must be unique per grant,
// or two grants share one token and a store accepts the writes of both.
// The defaults of github.com/go-redsync/redsync (a random value) and
// github.com/bsm/redislock (a random token) are; a fixed value is not:
// redislock's Options.Token, or a redsync WithGenValueFunc that returns,
// say, the host name.
//
// IssueToken keeps two keys per lockKey, which expire once lockKey has
// been idle (see WithIdleExpiry), in lockKey's Redis Cluster hash slot: the counter, IssuedTokenKey(lockKey), and the
// record of the last grant's value and token. A lockKey with a hash tag
// ("locks:{orders}") shares its tag with them. It changes nothing in
// lockKey itself: not its value, not its TTL.
//
// Tokens of IssueToken for one lockKey are comparable with each other
// only: fence one store resource with the tokens of one lock key, not
// with those of another key or of the Locker's own grants too.
//
// With Redlock over several independent Redis servers (redsync with many
// pools), IssueToken checks and counts on the one server behind the
// Locker's client, which must be one of those servers. It issues tokens
// to grants that hold lockKey there, and returns ErrLockLost for a grant
// that holds a majority without it: release and lock again. Writes then
// depend on that one server being up, which gives up the availability
// Redlock is used for.
//
// An empty lockKey or ownerValue, and a Locker whose prefix holds "{"
// (its keys could not share lockKey's slot), return an error wrapping
// ErrInvalidArgument. A counter or record holding what the library did
// not write returns an error wrapping ErrCorrupt, and nothing changes.
func (l *Locker) IssueToken(ctx context.Context, lockKey, ownerValue string) (Token, error) {
	counter, record, err := l.issuedKeys(lockKey)
	if err != nil {
		return 0, err
	}
	if ownerValue == "" {
		return 0, invalidArg("empty owner value for lock key %s", names.Quote(lockKey))
	}
	res, err := bounded(ctx, func(ctx context.Context) ([]any, error) {
		return issueScript.run(ctx, l.client, boxKeys(lockKey, counter, record), ownerValue, l.idleArg).Slice()
	})
	if err != nil {
		return 0, redisErr(ctx, "issue token for lock key", lockKey, err, counter, record)
	}
	if len(res) == 1 {
		if n, _ := res[0].(int64); n == 0 {
			return 0, fmt.Errorf("%w: lock key %s does not hold the owner value", ErrLockLost, names.Quote(lockKey))
		}
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("fencedlock: issue token for lock key %s: unexpected reply %v", names.Quote(lockKey), res)
	}
	token, err := tokenFromReply(res[1])
	if err != nil {
		return 0, fmt.Errorf("fencedlock: issue token for lock key %s: %w", names.Quote(lockKey), err)
	}
	return token, nil
}

// AdvanceIssued raises the counter of the tokens IssueToken issues for
// lockKey, as Advance does for a resource's: the next grant that asks
// gets a token higher than floor. A grant that already has its token
// keeps it. floor must be from 1 to 2^63-2; otherwise the error wraps
// ErrInvalidToken and nothing changes.
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
	h := hashedPart(key)
	if strings.IndexByte(h, '}') < 0 {
		return h
	}
	return strconv.FormatUint(uint64(slotNumber(crc16Slot(h))), 10)
}

// slotNumbers holds, for every hash slot, the smallest number whose
// decimal form hashes to it; it is filled on first use (110k CRCs).
var slotNumbers struct {
	once sync.Once
	n    [16384]uint32
}

func slotNumber(slot uint16) uint32 {
	slotNumbers.once.Do(func() {
		left := len(slotNumbers.n)
		seen := make([]bool, len(slotNumbers.n))
		for n := uint32(0); left > 0; n++ {
			s := crc16Slot(strconv.FormatUint(uint64(n), 10))
			if !seen[s] {
				seen[s] = true
				slotNumbers.n[s] = n
				left--
			}
		}
	})
	return slotNumbers.n[slot]
}
