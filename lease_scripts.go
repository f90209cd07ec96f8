package fencedlock

import (
	"fmt"
)

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

// The values of the two flags of release.lua's replies.
const (
	releaseNotHeld     = 0 // NOT_HELD: the caller did not hold the lock
	releaseHeld        = 1 // HELD: the caller held the lock
	releaseUnpublished = 0 // UNPUBLISHED: Redis refused the hand-over's message
	releasePublished   = 1 // PUBLISHED: the hand-over's message was published
)

// releaseReply is a reply of release.lua, decoded.
type releaseReply struct {
	held bool // HELD: the caller held the lock (and no longer does)
	// The hand-over, if the lock was handed to a waiter: its owner
	// (nonce and ':', "" when there was none) and token.
	owner string
	token Token
	// published (PUBLISHED) says that the hand-over's message was
	// published; false for UNPUBLISHED, or when there was no hand-over.
	published bool
}

// decodeRelease decodes a reply of release.lua: {held} or {held, owner,
// token, published}, held HELD or NOT_HELD, published PUBLISHED or
// UNPUBLISHED.
func decodeRelease(res []any) (releaseReply, error) {
	if len(res) != 1 && len(res) != 4 {
		return releaseReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	var r releaseReply
	switch held, _ := res[0].(int64); held {
	case releaseHeld:
		r.held = true
	case releaseNotHeld:
	default:
		return releaseReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	if len(res) == 1 {
		return r, nil
	}
	owner, _ := res[1].(string)
	token, err := tokenFromReply(res[2])
	published, ok := res[3].(int64)
	if err != nil || owner == "" || !ok || (published != releasePublished && published != releaseUnpublished) {
		return releaseReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	r.owner, r.token, r.published = owner, token, published == releasePublished
	return r, nil
}
