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
// holds: the Redis key lockKey, set to ownerValue by the grant asking. It
// checks that lockKey still holds ownerValue and issues the token in the
// same script, so the token belongs to a grant that was live when it was
// issued. The same grant asking again gets the same token; a new grant
// (another value) gets a token higher than every one issued for lockKey
// before. So ownerValue must be unique per grant, as the random values of
// redsync and redislock are; a fixed value lets two grants share a token.
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
