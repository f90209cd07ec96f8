package fencedlock

import (
	_ "embed"

	"github.com/fencedlock/fencedlock/internal/script"
)

//go:generate go run ./internal/luagen/cmd

// The scripts Redis runs, one whole file each. lua/<name>.lua is
// generated from lua/src/<name>.lua and the helpers of lua/src/lib it
// includes (see internal/luagen); each file's header gives its keys,
// arguments and replies, which the Go code next to each call decodes
// into a reply type of the script's own. The acquire and release scripts
// open with a fast path for their common cases, which returns before the
// helpers are defined.
var (
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/refresh.lua
	refreshLua string
	//go:embed lua/pttl.lua
	pttlLua string
	//go:embed lua/advance.lua
	advanceLua string
	//go:embed lua/put.lua
	putLua string
	//go:embed lua/fence.lua
	fenceLua string
	//go:embed lua/read.lua
	readLua string
	//go:embed lua/issue.lua
	issueLua string
	//go:embed lua/keep_issued.lua
	keepIssuedLua string
	//go:embed lua/inspect.lua
	inspectLua string
)

// The scripts run with EVALSHA, falling back to EVAL when the server's
// script cache does not hold them.
var (
	acquireScript    = script.New(acquireLua)    // acquire.go: decodeAcquire
	releaseScript    = script.New(releaseLua)    // lease.go: decodeRelease
	refreshScript    = script.New(refreshLua)    // lease.go: decodeRefresh
	pttlScript       = script.New(pttlLua)       // lease.go: decodePTTL
	advanceScript    = script.New(advanceLua)    // lock.go: decodeAdvance
	putScript        = script.New(putLua)        // store.go: decodePut
	fenceScript      = script.New(fenceLua)      // store.go: decodeFence
	readScript       = script.New(readLua)       // store.go: as HMGET's reply
	issueScript      = script.New(issueLua)      // issue.go: decodeIssue
	keepIssuedScript = script.New(keepIssuedLua) // issue.go: decodeKeepIssued
	inspectScript    = script.New(inspectLua)    // inspect.go: decodeInspect
)
