package fencedlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ownerW is an owner nonce of a waiter: a Locker id, 16 more hex digits, and ':'.
const ownerW = "0123456789abcdef0123456789abcdef:"

// TestScriptRepliesDecode decodes every reply shape each script's
// header gives, and refuses the shapes it does not: an unknown status,
// a slot missing or of the wrong kind.

func TestScriptRepliesDecode(t *testing.T) {
	for _, tc := range []struct {
		script string
		decode func() (any, error)
		want   any // nil: refused
	}{
		{"acquire granted", func() (any, error) { return decodeAcquire(int64(42)) }, acquireReply{status: acquireGranted, token: 42}},
		{"acquire granted, token above 2^53", func() (any, error) { return decodeAcquire("9007199254740993") }, acquireReply{status: acquireGranted, token: 9007199254740993}},
		{"acquire granted, token zero", func() (any, error) { return decodeAcquire(int64(0)) }, nil},
		{"acquire granted, token not digits", func() (any, error) { return decodeAcquire("x") }, nil},
		{"acquire granted, as an array", func() (any, error) { return decodeAcquire([]any{int64(1), "42"}) }, nil},
		{"acquire refused", func() (any, error) { return decodeAcquire([]any{int64(0), int64(1500), "41"}) }, acquireReply{status: acquireRefused, wait: 1500 * time.Millisecond, floor: 41}},
		{"acquire refused, no floor", func() (any, error) { return decodeAcquire([]any{int64(0), int64(1500)}) }, acquireReply{status: acquireRefused, wait: 1500 * time.Millisecond}},
		{"acquire refused, unreadable floor", func() (any, error) { return decodeAcquire([]any{int64(0), int64(1500), "x"}) }, acquireReply{status: acquireRefused, wait: 1500 * time.Millisecond}},
		{"acquire abandoned", func() (any, error) { return decodeAcquire([]any{int64(2)}) }, acquireReply{status: acquireAbandoned}},
		{"acquire abandoned with a wait", func() (any, error) { return decodeAcquire([]any{int64(2), int64(5)}) }, nil},
		{"acquire refused without a wait", func() (any, error) { return decodeAcquire([]any{int64(0)}) }, nil},
		{"acquire nothing", func() (any, error) { return decodeAcquire(nil) }, nil},
		{"acquire unknown status", func() (any, error) { return decodeAcquire([]any{int64(3), "42"}) }, nil},
		{"acquire empty", func() (any, error) { return decodeAcquire([]any{}) }, nil},

		{"release held", func() (any, error) { return decodeRelease(int64(1)) }, releaseReply{held: true}},
		{"release not held", func() (any, error) { return decodeRelease(int64(0)) }, releaseReply{}},
		{"release held, as an array", func() (any, error) { return decodeRelease([]any{int64(1)}) }, nil},
		{"release of two", func() (any, error) { return decodeRelease([]any{int64(1), ownerW}) }, nil},
		{"release status as a string", func() (any, error) { return decodeRelease("1") }, nil},
		{"release handed over", func() (any, error) { return decodeRelease([]any{int64(1), ownerW, "43", int64(1), int64(0)}) }, releaseReply{held: true, owner: ownerW, token: 43, told: releasePublished}},
		{"release handed over, unpublished", func() (any, error) { return decodeRelease([]any{int64(0), ownerW, "43", int64(0), int64(0)}) }, releaseReply{owner: ownerW, token: 43}},
		{"release handed over in the reply, candidate queued", func() (any, error) {
			return decodeRelease([]any{int64(1), ownerW, "43", int64(2), int64(1)})
		}, releaseReply{held: true, owner: ownerW, token: 43, told: releaseInReply, queued: true}},
		{"release unknown status", func() (any, error) { return decodeRelease(int64(2)) }, nil},
		{"release unknown publish status", func() (any, error) { return decodeRelease([]any{int64(1), ownerW, "43", int64(3), int64(0)}) }, nil},
		{"release unknown queued status", func() (any, error) { return decodeRelease([]any{int64(1), ownerW, "43", int64(1), int64(2)}) }, nil},
		{"release hand-over without owner", func() (any, error) { return decodeRelease([]any{int64(1), "", "43", int64(1), int64(0)}) }, nil},
		{"release hand-over to an owner without a Locker id", func() (any, error) { return decodeRelease([]any{int64(1), "w:", "43", int64(1), int64(0)}) }, nil},
		{"release four slots", func() (any, error) { return decodeRelease([]any{int64(1), ownerW, "43", int64(1)}) }, nil},

		{"refresh held", func() (any, error) { return decodeRefresh(1) }, refreshHeld},
		{"refresh not held", func() (any, error) { return decodeRefresh(0) }, refreshNotHeld},
		{"refresh unknown", func() (any, error) { return decodeRefresh(-3) }, nil},

		{"pttl owned", func() (any, error) { return decodePTTL([]any{int64(1), int64(900)}) }, pttlReply{status: pttlOwned, pttl: 900}},
		{"pttl owned, no expiry", func() (any, error) { return decodePTTL([]any{int64(1), int64(-1)}) }, pttlReply{status: pttlOwned, pttl: -1}},
		{"pttl not owner", func() (any, error) { return decodePTTL([]any{int64(0)}) }, pttlReply{status: pttlNotOwner}},
		{"pttl owned without a pttl", func() (any, error) { return decodePTTL([]any{int64(1)}) }, nil},
		{"pttl bare number", func() (any, error) { return decodePTTL([]any{int64(900)}) }, nil},

		{"advance", func() (any, error) { return decodeAdvance("100", 100) }, advanceReply{counter: 100}},
		{"advance below the floor", func() (any, error) { return decodeAdvance("99", 100) }, nil},
		{"advance not a token", func() (any, error) { return decodeAdvance(int64(100), 100) }, nil},

		{"put stored", func() (any, error) { return decodePut([]any{int64(1)}) }, putReply{status: putStored}},
		{"put stale", func() (any, error) { return decodePut([]any{int64(0), "9"}) }, putReply{status: putStale, fence: 9}},
		{"put stale without a fence", func() (any, error) { return decodePut([]any{int64(0)}) }, nil},
		{"put unknown", func() (any, error) { return decodePut([]any{int64(2)}) }, nil},

		{"fence fenced", func() (any, error) { return decodeFence([]any{int64(1)}) }, fenceReply{status: fenceFenced}},
		{"fence read", func() (any, error) { return decodeFence([]any{int64(1), "5", "v"}) }, fenceReply{status: fenceFenced, written: true, wrote: "5", value: []byte("v")}},
		{"fence read, nothing written", func() (any, error) { return decodeFence([]any{int64(1), nil, nil}) }, fenceReply{status: fenceFenced}},
		{"fence stale", func() (any, error) { return decodeFence([]any{int64(0), "9"}) }, fenceReply{status: fenceStale, fence: 9}},
		{"fence read, stale status", func() (any, error) { return decodeFence([]any{int64(0), "5", "v"}) }, nil},

		{"issue issued", func() (any, error) { return decodeIssue([]any{int64(1), "7", int64(-1)}) }, issueReply{status: issueIssued, token: 7, pttl: -1}},
		{"issue not held", func() (any, error) { return decodeIssue([]any{int64(0)}) }, issueReply{status: issueNotHeld}},
		{"issue without pttl", func() (any, error) { return decodeIssue([]any{int64(1), "7"}) }, nil},
		{"issue unknown", func() (any, error) { return decodeIssue([]any{int64(2), "7", int64(5)}) }, nil},

		{"keep_issued kept", func() (any, error) { return decodeKeepIssued([]any{int64(1), int64(500)}) }, keepIssuedReply{status: keepIssuedKept, pttl: 500}},
		{"keep_issued over", func() (any, error) { return decodeKeepIssued([]any{int64(0)}) }, keepIssuedReply{status: keepIssuedOver}},
		{"keep_issued over with a pttl", func() (any, error) { return decodeKeepIssued([]any{int64(0), int64(500)}) }, nil},

		{"inspect held", func() (any, error) { return decodeInspect([]any{"o:5", int64(900), int64(2), "5"}) }, inspectReply{held: true, lock: "o:5", pttl: 900, waiters: 2, counted: true, counter: "5"}},
		{"inspect free", func() (any, error) { return decodeInspect([]any{nil, int64(-2), int64(0), nil}) }, inspectReply{pttl: -2}},
		{"inspect three slots", func() (any, error) { return decodeInspect([]any{nil, int64(-2), int64(0)}) }, nil},
		{"inspect waiters not a number", func() (any, error) { return decodeInspect([]any{nil, int64(-2), "2", nil}) }, nil},
	} {
		t.Run(tc.script, func(t *testing.T) {
			got, err := tc.decode()
			if tc.want == nil {
				assert.Error(t, err, "decoded as %+v", got)
				return
			}
			if assert.NoError(t, err) {
				assert.Equal(t, fmt.Sprintf("%#v", tc.want), fmt.Sprintf("%#v", got))
			}
		})
	}
}

// TestAcquireOfAnOwnLockHoldingNoToken runs acquire.lua for an owner
// whose lock key holds something other than a token after its owner
// nonce (a value another client wrote): the script answers what the key
// holds, and decodeAcquire refuses it as an invalid token, not as a
// missing reply (which the caller would take for Redis unavailable).
func TestAcquireOfAnOwnLockHoldingNoToken(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		names := equivKeys(b.Prefix, 0, "corrupt")
		keys := make([]any, len(names))
		for i, k := range names {
			keys[i] = k
		}
		for _, held := range []string{"abc", "", "0", "12x", "-5"} {
			require.NoError(t, b.Client.Set(ctx, names[0], equivOwner+held, time.Minute).Err())
			reply, err := acquireScript.Run(ctx, b.Client, keys, equivOwner, "30000", "", "0").Result()
			require.NoError(t, err, "lock value %q", held)
			_, err = decodeAcquire(reply)
			assert.ErrorIs(t, err, ErrInvalidToken, "lock value %q: reply %v", held, reply)
		}
	})
}
