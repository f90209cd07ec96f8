package fencedlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
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
	//go:embed lua/put.lua
	putLua string
	//go:embed lua/issue.lua
	issueLua string
)

// Status values in the scripts' replies, named as in the scripts.
const (
	statusGranted   = 1  // acquire.lua: the lock is the caller's
	statusAbandoned = -3 // acquire.lua, in place of the wait: the attempt was given up
	statusHeld      = 1  // release.lua: the caller held the lock; refresh.lua: extended
	statusNotOwner  = -3 // pttl.lua: the lock is gone or another's
)

// The scripts run with EVALSHA, falling back to EVAL once per server when
// the script cache does not hold them. The acquire and release scripts
// open with their common case (acquire_free.lua, release_free.lua), which
// returns before the shared preludes' functions are defined.
var (
	acquireScript = redis.NewScript(acquireFreeLua + idleLua + counterLua + queueLua + acquireLua)
	advanceScript = redis.NewScript(idleLua + counterLua + advanceLua)
	releaseScript = redis.NewScript(releaseFreeLua + idleLua + counterLua + queueLua + releaseLua)
	refreshScript = redis.NewScript(idleLua + ownerLua + refreshLua)
	pttlScript    = redis.NewScript(ownerLua + pttlLua)
	putScript     = redis.NewScript(putLua)
	issueScript   = redis.NewScript(idleLua + counterLua + issueLua)
)
