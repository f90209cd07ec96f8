package fencedlock

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Lock's names are its resource's and its own, whether its Locker made
// them anew or took them from its last Lock: for the same resource, for
// another, and for the first again; and no two Locks share an owner or a
// marker.
func TestLockNames(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing is sent
	t.Cleanup(func() { c.Close() })
	for _, prefix := range []string{"", "app"} {
		l := New(c, WithPrefix(prefix))
		owners := map[string]bool{}
		for _, resource := range []string{"a", "a", "b{x}", "a", "b{x}", "b{x}"} {
			k, err := l.newLock(resource)
			require.NoError(t, err)
			owner := k.owner.(string)
			assert.Len(t, owner, 2*lockerIDLen+1, "owner %q", owner)
			assert.Equal(t, l.id, owner[:lockerIDLen])
			assert.False(t, owners[owner], "owner %q given twice", owner)
			owners[owner] = true
			want := [...]string{
				keyFor(prefix, resource, "lock"),
				keyFor(prefix, resource, "token"),
				keyFor(prefix, resource, "queue"),
				keyFor(prefix, resource, "deadlines"),
				keyFor(prefix, resource, markerKind+owner[:len(owner)-1]),
			}
			assert.Equal(t, want, k.keys, "keys of %q under prefix %q", resource, prefix)
			for i, arg := range k.keyArgs {
				assert.Equal(t, want[i], arg, "boxed key %d of %q", i, resource)
			}
			assert.Equal(t, keyFor(prefix, resource, "grants:"+l.id), k.channel)
			assert.Equal(t, keyFor(prefix, resource, "grants:"), k.chanArg)
			assert.Equal(t, resource, k.resource)
		}
	}
}
