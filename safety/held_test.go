package safety

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
)

// Checker D: a Lock that Acquire or TryAcquire returns holds its grant in
// Redis at that moment: Redis ran the grant and its answer came back. A
// Lock handed over on a local belief alone (before Redis answered) may
// carry a token that Redis never gave it, while another owner holds the
// lock: the fence still refuses the lower of the two tokens, so checkers
// A to C see nothing, but the library broke its rule "only real grants".
//
// Right after a lock call returns a Lock, the client reads the lock key
// ("<owner nonce>:<token>") through a direct connection to
// the current lock Redis that bypasses the fault proxies, and records what
// it found in the acquire op. A grant overwrites any earlier holder and
// every later grant carries a higher token (one Redis: the counter only
// rises; lost and raised to the clock after a restart or a flush, it still
// rises), so the key may be gone (expired, released, flushed, restarted)
// or hold a higher token (a later grant), but never a LOWER token than the
// returned Lock's: that is a violation. The same token under two owners
// is one too. (The Lock's own owner nonce is not exported, so the suite
// compares the owners seen for one token across the checks.)
//
// Topologies: on one node and on the cluster the direct connection
// reaches the master of the key (no proxy, no failover). In a failover
// the master changes: a read is made only if no promotion (nor, under
// Sentinel, a kill of the master) happened between the lock call and the
// read (failoverRig.epoch, sentinelRig.epoch); otherwise it is skipped,
// as the grant may have run on the old master.

// A keyRead names what the direct read of a returned Lock's key found.
type keyRead string

const (
	keyFound   keyRead = "found"   // the key holds a value: KeyValue
	keyMissing keyRead = "missing" // no key: expired, released, flushed or restarted
	keyError   keyRead = "error"   // the read failed (a restart in progress); KeyValue is the error
	keySkipped keyRead = "skipped" // a failover happened since the lock call: not comparable
)

// checkReadFor bounds the direct read of a lock key.
const checkReadFor = 300 * time.Millisecond

// A keyReader reads lock keys on the current lock Redis without the fault
// proxies. epoch is taken before a lock call and passed to read: a reader
// whose Redis may have changed since (a failover) skips the read. It is
// safe for concurrent use.
type keyReader interface {
	epoch() uint64
	read(ctx context.Context, key string, epoch uint64) (string, keyRead, error)
}

// directKeys reads keys through a client that reaches the lock Redis
// directly: one node, or a cluster.
type directKeys struct{ client redis.UniversalClient }

func (d directKeys) epoch() uint64 { return 0 }

func (d directKeys) read(ctx context.Context, key string, _ uint64) (string, keyRead, error) {
	return getKey(ctx, d.client, key)
}

func getKey(ctx context.Context, c redis.Cmdable, key string) (string, keyRead, error) {
	v, err := c.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", keyMissing, nil
	case err != nil:
		return "", keyError, err
	}
	return v, keyFound, nil
}

// checkKey reads the key of lock, which a lock call begun at epoch has
// just returned, and records what it found in o.
func checkKey(keys keyReader, locker *fencedlock.Locker, lock *fencedlock.Lock, epoch uint64, o *op) {
	if keys == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkReadFor)
	defer cancel()
	v, kr, err := keys.read(ctx, mustKey(locker.Key(lock.Resource(), "lock")), epoch)
	o.KeyRead, o.KeyValue = kr, v
	if err != nil {
		o.KeyValue = err.Error()
	}
}

// parseLockValue splits a lock key's value, "<32 hex>:<decimal token>".
func parseLockValue(v string) (owner string, token fencedlock.Token, ok bool) {
	i := strings.LastIndexByte(v, ':')
	if i != 32 {
		return "", 0, false
	}
	t, err := fencedlock.ParseToken(v[i+1:])
	if err != nil {
		return "", 0, false
	}
	return v[:i], t, true
}

// heldReport is checker D, over the Locks the lock calls returned.
type heldReport struct {
	Returned int // acquires that returned a Lock
	Checked  int // ... whose key was read: found or missing
	Held     int // ... found holding the Lock's token
	Later    int // ... found holding a higher token: a later grant
	Missing  int // ... found no key
	Errors   int // reads that failed
	Skipped  int // reads skipped: a failover came between the call and the read
	// Violations counts Locks whose key held a lower token (the Lock was
	// returned while another owner held the lock in Redis), a value that
	// is not a lock value, or the Lock's token under another owner than
	// another check saw. 0.
	Violations int
	// Of the lower tokens: Own, held by a goroutine of the same Locker
	// (a hand-over returned before Redis ran the grant), Other, by another
	// Locker or process, or by a grant no client saw returned.
	Own, Other int
	Examples   examples
}

// checkHeld runs checker D over the acquire ops. lockerOf maps a client
// id to its Locker, to tell the lower tokens apart.
func checkHeld(ops []op, lockerOf func(client int) int) heldReport {
	var r heldReport
	type grant struct {
		resource string
		token    fencedlock.Token
	}
	owners := map[grant]op{}   // the first check that found each grant's token, and its owner
	grantee := map[grant]int{} // who got each grant returned
	for _, o := range ops {
		if o.Kind == opAcquire && o.Outcome == outOK {
			grantee[grant{o.Resource, o.Token}] = o.Client
		}
	}
	for _, o := range ops {
		if o.Kind != opAcquire || o.Outcome != outOK {
			continue
		}
		r.Returned++
		switch o.KeyRead {
		case keyMissing:
			r.Checked++
			r.Missing++
			continue
		case keyError:
			r.Errors++
			continue
		case keySkipped:
			r.Skipped++
			continue
		case keyFound:
			r.Checked++
		default:
			continue // not read: a reader-less client
		}
		owner, token, ok := parseLockValue(o.KeyValue)
		switch {
		case !ok:
			r.Violations++
			r.Examples.add("%s: c%d's lock (token %d) found the key holding %q, not a lock value", o.Resource, o.Client, o.Token, o.KeyValue)
		case token < o.Token:
			r.Violations++
			holder, known := grantee[grant{o.Resource, token}]
			who := "a grant no client saw returned"
			switch {
			case known && lockerOf(holder) == lockerOf(o.Client):
				r.Own++
				who = fmt.Sprintf("c%d of the same Locker", holder)
			case known:
				r.Other++
				who = fmt.Sprintf("c%d of another Locker", holder)
			default:
				r.Other++
			}
			r.Examples.add("%s: c%d's acquire returned token %d at %s while Redis held token %d (owner %s…, %s): a Lock without a grant",
				o.Resource, o.Client, o.Token, wallTime(o.Return), token, owner[:8], who)
		case token > o.Token:
			r.Later++
		default:
			r.Held++
			g := grant{o.Resource, token}
			first, seen := owners[g]
			if !seen {
				owners[g] = o
				break
			}
			if firstOwner, _, _ := parseLockValue(first.KeyValue); firstOwner != owner {
				r.Violations++
				r.Examples.add("%s: token %d held by owner %s… for c%d and by owner %s… for c%d", o.Resource, token, firstOwner[:8], first.Client, owner[:8], o.Client)
			}
		}
	}
	return r
}

func (r heldReport) String() string {
	return fmt.Sprintf("checked %d/%d (held %d, later grant %d, gone %d; read errors %d, skipped %d), not held %d (own Locker's %d, another's %d)",
		r.Checked, r.Returned, r.Held, r.Later, r.Missing, r.Errors, r.Skipped, r.Violations, r.Own, r.Other)
}

// lockerOf maps the client ids of a scenario to their Locker: two
// in-process clients and a helper share each; a child has its own.
func lockerOf(client int) int {
	switch {
	case client < inProcessClients:
		return client / 2
	case client >= helperIDBase:
		return client - helperIDBase
	}
	return client
}

// mustKey returns the key of a Locker.Key that cannot fail: a name the
// test chose.
func mustKey(key string, err error) string {
	if err != nil {
		panic(err)
	}
	return key
}
