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

			// The Lock of another owner (a waiter's, for its cleanup).
			const other = "0123456789abcdef0011223344556677:"
			o := l.lockFor(resource, other)
			assert.Equal(t, other, o.owner)
			assert.Equal(t, want[:keyMarker], o.keys[:keyMarker])
			assert.Equal(t, keyFor(prefix, resource, markerKind+other[:len(other)-1]), o.keys[keyMarker])
			assert.Equal(t, o.keys[keyMarker], o.keyArgs[keyMarker])
			assert.Equal(t, k.channel, o.channel)
		}
	}
}

// BenchmarkNewLock measures the names of a new Lock: for the resource of
// the Locker's last Lock, and for resources that change every time.
func BenchmarkNewLock(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing is sent
	b.Cleanup(func() { c.Close() })
	for _, bc := range []struct {
		name      string
		resources []string
	}{{"same", []string{"a"}}, {"alternating", []string{"a", "b"}}} {
		b.Run(bc.name, func(b *testing.B) {
			l := New(c)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := l.newLock(bc.resources[i%len(bc.resources)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
