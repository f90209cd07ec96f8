package wait

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// An error reply to the probe other than "unknown command" (here BUSY,
// while another client's script runs) does not settle the kind of pub/sub:
// the next probe asks again.
func TestProbeAsksAgainAfterOtherErrors(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, redistest.SetBusyThreshold(ctx, c, 50))
	go srv.Client(t).Eval(ctx, "while true do end", nil)
	r := New(c, Log{})
	require.Eventually(t, func() bool {
		return c.Ping(ctx).Err() != nil // BUSY
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, unknown, r.probe(ctx), "a BUSY reply settled the kind of pub/sub")
	require.NoError(t, c.Do(ctx, "SCRIPT", "KILL").Err())
	assert.Eventually(t, func() bool { return r.probe(ctx) != 0 }, 5*time.Second, 10*time.Millisecond,
		"the probe could not tell once Redis answered")
}

// The probe finds the kind of pub/sub the server has, as the tests' own
// check does: sharded on Redis 7 and Valkey, classic on Redis 5.0 and
// 6.2 and on miniredis. The waiting tests then count the subscriptions of
// that kind only (redistest.Subscribers), so that both paths run: each on
// the servers that have it.
func TestProbeFindsTheServersPubSub(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		hasSharded, err := redistest.ShardedPubSub(ctx, b.Client)
		require.NoError(t, err)
		want, name := classic, "classic"
		if hasSharded {
			want, name = sharded, "sharded"
		}
		t.Logf("%s pub/sub", name)
		assert.Equal(t, want, New(b.Client, Log{}).probe(ctx))
	})
}
