package fencedlock

import (
	_ "embed"

	"github.com/fencedlock/fencedlock/internal/script"
)

var (
	//go:embed lua/idle.lua
	idleLua string
	//go:embed lua/counter.lua
	counterLua string
	//go:embed lua/acquire_free.lua
	acquireFreeLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/queue.lua
	queueLua string
	//go:embed lua/advance.lua
	advanceLua string
	//go:embed lua/owner.lua
	ownerLua string
	//go:embed lua/release_free.lua
	releaseFreeLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/refresh.lua
	refreshLua string
	//go:embed lua/pttl.lua
	pttlLua string
	//go:embed lua/stored.lua
	storedLua string
	//go:embed lua/put.lua
	putLua string
	//go:embed lua/fence.lua
	fenceLua string
	//go:embed lua/issue.lua
	issueLua string
	//go:embed lua/keep_issued.lua
	keepIssuedLua string
	//go:embed lua/inspect.lua
	inspectLua string
)

// Status values in the scripts' replies, named as in the scripts.
const (
	statusGranted   = 1  // acquire.lua: the lock is the caller's
	statusRefused   = 0  // acquire.lua: held by another, or promised to a waiter ahead
	statusAbandoned = 2  // acquire.lua: the attempt's caller gave up on it
	statusHeld      = 1  // release.lua: the caller held the lock; refresh.lua: extended
	statusNotOwner  = -3 // pttl.lua: the lock is gone or another's
	statusPublished = 1  // release.lua: the hand-over's message was published
)

// The scripts run with EVALSHA, falling back to EVAL when the server's
// script cache does not hold them. The acquire and release scripts open
// with their common case (acquire_free.lua, release_free.lua), which
// returns before the shared preludes' functions are defined.
var (
	acquireScript = script.New(acquireFreeLua + idleLua + counterLua + queueLua + acquireLua)
	advanceScript = script.New(idleLua + counterLua + advanceLua)
	releaseScript = script.New(releaseFreeLua + idleLua + counterLua + queueLua + releaseLua)
	refreshScript = script.New(idleLua + ownerLua + refreshLua)
	pttlScript    = script.New(ownerLua + pttlLua)
	putScript     = script.New(storedLua + putLua)
	fenceScript   = script.New(storedLua + fenceLua)
	issueScript   = script.New(idleLua + counterLua + issueLua)
	keepScript    = script.New(idleLua + keepIssuedLua)
	inspectScript = script.New(inspectLua)
)
