package script

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replyErr is an error reply of Redis, as go-redis returns one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

const src = `-- a script
local v = redis.call('GET', KEYS[1])
local now = redis.call('TIME')
redis.pcall('SPUBLISH', ARGV[1], 'x')
return v`

// Refusal names the command Redis refused, from its reply or, when Redis
// gives only the script's line, from that line of the script.
func TestRefusal(t *testing.T) {
	for _, c := range []struct {
		name, reply, command, refused string
	}{
		{"Redis 7.0, a command in a script",
			"ERR The user executing the script can't run this command or subcommand script: 36f0e29, on @user_script:3.", "TIME", "command"},
		{"Redis 6.2, a command in a script",
			"ERR Error running script (call to f_36f0e29): @user_script:3: @user_script: 3: The user executing the script can't run this command or subcommand", "TIME", "command"},
		{"a channel in a script",
			"ERR The user executing the script can't publish to the channel mentioned in the command script: 36f0e29, on @user_script:4.", "SPUBLISH", "channel"},
		{"NOPERM naming the command",
			"NOPERM this user has no permissions to run the 'pubsub|shardnumsub' command", "PUBSUB SHARDNUMSUB", "command"},
		{"NOPERM of the script's keys",
			"NOPERM this user has no permissions to access one of the keys used as arguments", "EVALSHA", "key"},
	} {
		acl := Refusal(replyErr(c.reply), src, "evalsha")
		require.NotNil(t, acl, c.name)
		assert.Equal(t, c.command, acl.Command, c.name)
		assert.Equal(t, c.refused, acl.Refused, c.name)
		assert.Contains(t, acl.Error(), ACLDocs, c.name)
		assert.Contains(t, acl.Error(), c.reply, c.name)
		var rerr replyErr
		assert.True(t, errors.As(fmt.Errorf("x: %w", acl), &rerr), "%s: the reply stays in the chain", c.name)
		assert.Same(t, acl, Refusal(fmt.Errorf("wrapped: %w", acl), "", ""), "an ACLError is found again")
	}
	for _, other := range []error{replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"), errors.New("NOPERM but not a reply"), nil} {
		assert.Nil(t, Refusal(other, src, "evalsha"), "%v", other)
	}
}

// Command reads the command of one line; a line with none, or with two,
// names none.
func TestCommand(t *testing.T) {
	assert.Equal(t, "GET", Command(src, "2"))
	assert.Equal(t, "SPUBLISH", Command(src, "4"))
	assert.Equal(t, "", Command(src, "1"), "a comment")
	assert.Equal(t, "", Command(src, "9"), "past the end")
	assert.Equal(t, "", Command(src, "x"))
	assert.Equal(t, "", Command("redis.call('GET', k); redis.call('SET', k, v)", "1"), "two commands")
}

// A Script's SHA1 is the source's, and the arguments it builds carry the
// keys before the arguments.
func TestScriptArgs(t *testing.T) {
	s := New(src)
	sum := sha1.Sum([]byte(src))
	want := hex.EncodeToString(sum[:])
	assert.Equal(t, []any{"evalsha", want, 2, "a", "b", "x"}, s.EvalSHA(Keys("a", "b"), "x"))
	assert.Equal(t, []any{"eval", src, 0}, s.Eval(nil))
	assert.True(t, strings.HasPrefix(s.Source(), "-- a script"))
}
