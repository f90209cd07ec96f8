package fencedlock

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/counter.lua
	counterLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/queue.lua
	queueLua string
	//go:embed lua/advance.lua
	advanceLua string
	//go:embed lua/owner.lua
	ownerLua string
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

// The scripts run with EVALSHA, falling back to EVAL once per server when
// the script cache does not hold them.
var (
	acquireScript = redis.NewScript(counterLua + queueLua + acquireLua)
	advanceScript = redis.NewScript(counterLua + advanceLua)
	releaseScript = redis.NewScript(counterLua + queueLua + releaseLua)
	refreshScript = redis.NewScript(ownerLua + refreshLua)
	pttlScript    = redis.NewScript(ownerLua + pttlLua)
	putScript     = redis.NewScript(putLua)
	issueScript   = redis.NewScript(counterLua + issueLua)
)

// corruptTag starts the error replies of scripts that found a key holding
// a value the library did not write.
const corruptTag = "FENCEDLOCK_CORRUPT "

// scriptErr turns an error from a command or script into the library's
// error: ErrCorrupt when a key of the library's holds what the library did
// not write (a script's own check, or a key of the wrong Redis type).
// keys are the keys the command touched, named in the error.
func scriptErr(op, resource string, err error, keys ...string) error {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if _, detail, ok := strings.Cut(msg, corruptTag); ok {
			return fmt.Errorf("%w: %s %q: %s", ErrCorrupt, op, resource, detail)
		}
		if strings.Contains(msg, "WRONGTYPE") {
			return fmt.Errorf("%w: %s %q: key %s holds a value of the wrong type: %w", ErrCorrupt, op, resource, strings.Join(keys, " or "), err)
		}
	}
	return fmt.Errorf("fencedlock: %s %q: %w", op, resource, err)
}

// isServerError reports whether err is a reply from Redis (the command ran
// and failed) rather than a failure to deliver the command or its reply.
func isServerError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
