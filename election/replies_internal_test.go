package election

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestScriptRepliesDecode decodes every status of announce.lua and
// keep.lua and both shapes of leader.lua's reply, and refuses what the
// scripts' headers do not give.
func TestScriptRepliesDecode(t *testing.T) {
	for n, want := range map[int64]announceReply{0: announceLost, 1: announcePublished, 2: announceUnpublished} {
		if got, err := decodeAnnounce(n); err != nil || got != want {
			t.Errorf("decodeAnnounce(%d) = %v, %v; want %v", n, got, err, want)
		}
	}
	if got, err := decodeAnnounce(3); err == nil {
		t.Errorf("decodeAnnounce(3) = %v; want an error", got)
	}
	for n, want := range map[int64]keepReply{0: keepLost, 1: keepKept, 2: keepPublished, 3: keepUnpublished} {
		if got, err := decodeKeep(n); err != nil || got != want {
			t.Errorf("decodeKeep(%d) = %v, %v; want %v", n, got, err, want)
		}
	}
	if got, err := decodeKeep(-1); err == nil {
		t.Errorf("decodeKeep(-1) = %v; want an error", got)
	}
	if got, err := decodeLeader([]any{"o:5", "5:v"}); err != nil || got != (leaderReply{lock: "o:5", record: "5:v"}) {
		t.Errorf("decodeLeader of a leader = %+v, %v", got, err)
	}
	if got, err := decodeLeader([]any{nil, nil}); err != nil || got != (leaderReply{}) {
		t.Errorf("decodeLeader of no leader = %+v, %v", got, err)
	}
	for _, res := range [][]any{nil, {"o:5"}, {int64(1), nil}, {"o:5", "5:v", nil}} {
		if got, err := decodeLeader(res); err == nil {
			t.Errorf("decodeLeader(%v) = %+v; want an error", res, got)
		}
	}
}

// forget deletes the record of the term it is given, and only that: a
// record the next leader wrote meanwhile stays, and so does one of
// another type.
func TestForgetDeletesOnlyItsTermsRecord(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		e := New(fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix)), "forget")
		for _, c := range []struct {
			record string
			token  fencedlock.Token
			stays  bool
		}{
			{"7:a", 7, false},
			{"70:a", 7, true}, // token 70's, not 7's
			{"8:a", 7, true},
			{"7", 7, true}, // no ':': not a record of token 7
		} {
			require.NoError(t, b.Client.Set(ctx, e.record, c.record, 0).Err())
			e.forget(ctx, c.token)
			n, err := b.Client.Exists(ctx, e.record).Result()
			require.NoError(t, err)
			assert.Equal(t, c.stays, n == 1, "record %q, token %d", c.record, c.token)
		}
		require.NoError(t, b.Client.Del(ctx, e.record).Err())
		require.NoError(t, b.Client.HSet(ctx, e.record, "f", "v").Err())
		e.forget(ctx, 7)
		typ, err := b.Client.Type(ctx, e.record).Result()
		require.NoError(t, err)
		assert.Equal(t, "hash", typ, "a record of another type")
	})
}

// replyError is an error reply of Redis, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// Run campaigns again after what may pass, and not after a refusal of
// the client's credentials.
func TestCampaignAgain(t *testing.T) {
	unavailable := func(err error) error { return fmt.Errorf("%w: acquiring: %w", fencedlock.ErrUnavailable, err) }
	for _, c := range []struct {
		err   error
		again bool
	}{
		{unavailable(replyError("OOM command not allowed when used memory > 'maxmemory'.")), true},
		{unavailable(replyError("LOADING Redis is loading the dataset in memory")), true},
		{unavailable(errors.New("redis: all sentinels specified in configuration are unreachable")), true},
		{unavailable(io.EOF), true},
		{fmt.Errorf("%w: the term ended before it was announced", fencedlock.ErrLockLost), true},
		{fmt.Errorf("acquire: %w", fencedlock.ErrNotReplicated), true},
		{unavailable(replyError("WRONGPASS invalid username-password pair or user is disabled.")), false},
		{unavailable(replyError("ERR invalid password")), false},
		{unavailable(replyError("NOAUTH Authentication required.")), false},
		{unavailable(replyError("ERR Protocol error: unauthenticated multibulk length")), false},
		{unavailable(replyError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")), false},
		{unavailable(replyError("ERR Client sent AUTH, but no password is set")), false},
		{unavailable(redis.ErrClosed), false},
		{unavailable(replyError("NOPERM User candidate has no permissions to run the 'evalsha' command")), false},
		{fmt.Errorf("%w: bad name", fencedlock.ErrInvalidArgument), false},
		{fmt.Errorf("%w: counter", fencedlock.ErrCorrupt), false},
	} {
		assert.Equal(t, c.again, campaignAgain(nil, c.err), "%v", c.err)
	}
}
