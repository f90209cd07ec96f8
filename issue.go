package fencedlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
// from the Redis clock, so a counter lost to a restart or a failover does
// not issue old tokens again (see Advance and AdvanceIssued).
//
// A grant is known by its value: ownerValue must be unique per grant, as
// the random values of github.com/go-redsync/redsync and
// github.com/bsm/redislock are. A library that sets the same value again
// for a new grant gets the old grant's token for it.
//
// IssueToken keeps two keys per lockKey, without expiry, in lockKey's
// Redis Cluster hash slot: the counter, IssuedTokenKey(lockKey), and the
// record of the last grant and its token. A lockKey with a hash tag
// ("locks:{orders}") shares its tag with them. It changes nothing in
// lockKey itself: not its value, not its TTL.
//
// With Redlock over several independent Redis servers (redsync with many
// pools), IssueToken checks and counts on the one server behind the
// Locker's client. It issues tokens to grants that hold lockKey there,
// and refuses the others with ErrLockLost.
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
		return 0, invalidArg("empty owner value for lock key %q", lockKey)
	}
	res, err := issueScript.Run(ctx, l.client, []string{lockKey, counter, record}, ownerValue).Slice()
	if err != nil {
		return 0, scriptErr("issue token for lock key", lockKey, err, counter, record)
	}
	if len(res) == 1 {
		if n, _ := res[0].(int64); n == 0 {
			return 0, fmt.Errorf("%w: lock key %q does not hold the owner value", ErrLockLost, lockKey)
		}
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("fencedlock: issue token for lock key %q: unexpected reply %v", lockKey, res)
	}
	token, err := tokenFromReply(res[1])
	if err != nil {
		return 0, fmt.Errorf("fencedlock: issue token for lock key %q: %w", lockKey, err)
	}
	return token, nil
}

// IssuedTokenKey returns the Redis key of the token counter that
// IssueToken uses for lockKey: "<prefix>:{<tag>}:issued-token:<lockKey>",
// where tag is lockKey's hash tag or, for a key without one, lockKey
// itself. (For a key whose hashed part holds a "}", tag is a number
// chosen to hash to the same slot.)
func (l *Locker) IssuedTokenKey(lockKey string) string {
	return keyFor(l.prefix, slotTag(lockKey), "issued-token:") + lockKey
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
	if strings.IndexByte(l.prefix, '{') >= 0 {
		return "", "", invalidArg("prefix %q holds \"{\": the keys of IssueToken could not share the hash slot of lock key %q", l.prefix, lockKey)
	}
	tag := slotTag(lockKey)
	return keyFor(l.prefix, tag, "issued-token:") + lockKey, keyFor(l.prefix, tag, "issued:") + lockKey, nil
}

// slotTag returns a non-empty hash tag, without "}", that puts a key in
// the Redis Cluster hash slot of key: the part of key that Redis hashes,
// when it holds no "}", else the smallest decimal number hashing to the
// same slot.
func slotTag(key string) string {
	if h := hashedPart(key); strings.IndexByte(h, '}') < 0 {
		return h
	}
	return strconv.FormatUint(uint64(slotNumber(crc16Slot(hashedPart(key)))), 10)
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
