package fencedlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"

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
	statusAbandoned = -3 // acquire.lua, in place of the wait: the attempt was given up
	statusHeld      = 1  // release.lua: the caller held the lock; refresh.lua: extended
	statusNotOwner  = -3 // pttl.lua: the lock is gone or another's
	statusPublished = 1  // release.lua: the hand-over's message was published
)

// The scripts run with EVALSHA, falling back to EVAL when the server's
// script cache does not hold them. The acquire and release scripts open
// with their common case (acquire_free.lua, release_free.lua), which
// returns before the shared preludes' functions are defined.
var (
	acquireScript = newScript(acquireFreeLua + idleLua + counterLua + queueLua + acquireLua)
	advanceScript = newScript(idleLua + counterLua + advanceLua)
	releaseScript = newScript(releaseFreeLua + idleLua + counterLua + queueLua + releaseLua)
	refreshScript = newScript(idleLua + ownerLua + refreshLua)
	pttlScript    = newScript(ownerLua + pttlLua)
	putScript     = newScript(storedLua + putLua)
	fenceScript   = newScript(storedLua + fenceLua)
	issueScript   = newScript(idleLua + counterLua + issueLua)
	keepScript    = newScript(idleLua + keepIssuedLua)
	inspectScript = newScript(inspectLua)
)

// script is one of the library's Lua scripts, with its source and SHA1
// boxed once: they cost no allocation as command arguments.
type script struct {
	src, sha any // strings
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// processor is a Redis client or connection.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// run runs the script with keys and then args, as go-redis's Script.Run
// does (EVALSHA, then EVAL if the server answers NOSCRIPT), but with keys
// that the caller boxed: a Lock boxes its keys once for all its calls.
// An ACL refusal's error is an *aclError that names the refused command,
// which Redis may tell only by the line of the script that called it.
func (s *script) run(ctx context.Context, c processor, keys []any, args ...any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", s.sha, len(keys))
	cmdArgs = append(cmdArgs, keys...)
	cmdArgs = append(cmdArgs, args...)
	cmd := send(ctx, c, cmdArgs)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmdArgs[0], cmdArgs[1] = "eval", s.src
		cmd = send(ctx, c, cmdArgs)
	}
	if err := cmd.Err(); err != nil {
		if acl := aclRefusal(err, s.src.(string), cmdArgs[0].(string)); acl != nil {
			cmd.SetErr(acl)
		}
	}
	return cmd
}

// send sends an EVALSHA or EVAL command.
func send(ctx context.Context, c processor, cmdArgs []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if cmdArgs[2] != 0 {
		cmd.SetFirstKeyPos(3) // the first key, for Cluster's routing
	}
	_ = c.Process(ctx, cmd)
	return cmd
}

// boxKeys boxes keys for script.run.
func boxKeys(keys ...string) []any {
	b := make([]any, len(keys))
	for i, k := range keys {
		b[i] = k
	}
	return b
}
