package fencedlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// On Redis Cluster a script may only touch keys of one hash slot. These
// tests run the library on a real one-node cluster serving all slots: the
// node refuses cross-slot scripts with CROSSSLOT just as a larger cluster
// does, and CLUSTER KEYSLOT shows where each key lives.
func TestClusterKeysShareSlot(t *testing.T) {
	srv := redistest.StartCluster(t)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { client.Close() })

	// The negative control: the node does refuse a script whose keys are
	// in two slots, so the checks below could fail.
	err := client.Eval(ctx, "return 1", []string{"a", "b"}).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CROSSSLOT")

	slot := func(key string) int64 {
		t.Helper()
		n, err := client.ClusterKeySlot(ctx, key).Result()
		require.NoError(t, err)
		return n
	}

	for _, prefix := range []string{fencedlock.DefaultPrefix, "", "app{7}", "app{"} {
		for _, resource := range []string{"order-queue", "a}b", "x{y}z", "with space", "ünï"} {
			locker := fencedlock.New(client, fencedlock.WithPrefix(prefix))
			store := fencedlock.NewRedisStore(client, fencedlock.WithStorePrefix(prefix))
			lockKey, tokenKey, valueKey := locker.LockKey(resource), locker.TokenKey(resource), store.Key(resource)
			want := slot(lockKey)
			assert.Equal(t, want, slot(tokenKey), "token key %q vs lock key %q", tokenKey, lockKey)
			assert.Equal(t, want, slot(valueKey), "value key %q vs lock key %q", valueKey, lockKey)

			// The whole life of a lock runs through the cluster client.
			lock, err := locker.TryAcquire(ctx, resource, time.Minute)
			require.NoError(t, err, "prefix %q resource %q", prefix, resource)
			require.NoError(t, store.Put(ctx, resource, lock.Token(), []byte("v")))
			_, err = locker.TryAcquire(ctx, resource, time.Minute)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			require.NoError(t, lock.Refresh(ctx, time.Minute))
			_, err = lock.TTL(ctx)
			require.NoError(t, err)
			require.NoError(t, lock.Release(ctx))
			require.NoError(t, locker.Advance(ctx, resource, lock.Token()+100))
			next, err := locker.TryAcquire(ctx, resource, time.Minute)
			require.NoError(t, err)
			assert.Greater(t, next.Token(), lock.Token()+100)
			require.NoError(t, store.Put(ctx, resource, next.Token(), []byte("next")))
			err = store.Put(ctx, resource, lock.Token(), []byte("late"))
			assert.ErrorIs(t, err, fencedlock.ErrStaleToken)
			v, tok, err := store.Get(ctx, resource)
			require.NoError(t, err)
			assert.Equal(t, "next", string(v))
			assert.Equal(t, next.Token(), tok)
			require.NoError(t, next.Release(ctx))
		}
	}
}

// Resources of different names usually land in different slots, so the
// keys of one resource sharing a slot is not an accident of all keys
// sharing one.
func TestClusterResourcesSpreadOverSlots(t *testing.T) {
	srv := redistest.StartCluster(t)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { client.Close() })
	locker := fencedlock.New(client)
	slots := map[int64]bool{}
	for _, r := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		n, err := client.ClusterKeySlot(ctx, locker.LockKey(r)).Result()
		require.NoError(t, err)
		slots[n] = true
	}
	assert.Greater(t, len(slots), 4)
}

// The hash slot computed for grouping subscriptions is the cluster's.
func TestHashSlot(t *testing.T) {
	srv := redistest.StartCluster(t)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { client.Close() })
	for i, key := range []string{"", "a", "fencedlock:{order-queue}:grants", "{}x", "a{b}c{d}", "{", "}{", "x{y", "ünï", strconv.Itoa(123456789)} {
		want, err := client.ClusterKeySlot(ctx, key).Result()
		if key == "" {
			// CLUSTER KEYSLOT of "" is 0, as the CRC of nothing.
			require.NoError(t, err)
		}
		require.NoError(t, err, "key %d %q", i, key)
		assert.Equal(t, want, int64(fencedlock.HashSlot(key)), "key %q", key)
	}
}
