package fencedlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A plain *redis.Client at one node of a Cluster gets MOVED for every key
// of a slot that another node serves, for good: Acquire returns it at
// once, as ErrUnavailable naming the redirect, instead of waiting for a
// reshard to end until its ctx does; and so does a Release's withdraw of
// a waiter's place (the same rule). A *redis.ClusterClient on the same
// Cluster takes the lock.
func TestPlainClientAtAClusterNodeIsNotRiddenOut(t *testing.T) {
	servers := redistest.StartClusterN(t, 2)
	ctx := testCtx(t)
	plain := redis.NewClient(&redis.Options{Addr: servers[0].Addr})
	t.Cleanup(func() { plain.Close() })
	l := fencedlock.New(plain)
	// A resource whose keys node 1 serves.
	resource := ""
	for i := 0; resource == ""; i++ {
		r := "moved" + strconv.Itoa(i)
		key, err := l.Key(r, "probe") // in the slot of the resource's keys
		if err != nil {
			t.Fatal(err)
		}
		slot, err := plain.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot >= 8192 {
			resource = r
		}
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := l.Acquire(actx, resource, time.Minute)
	took := time.Since(start)
	requireUnavailable(t, err, "Acquire")
	if !strings.Contains(err.Error(), "MOVED") {
		t.Errorf("Acquire = %v; want the redirect named", err)
	}
	if took > 2*time.Second {
		t.Errorf("Acquire took %v: it waited for a redirect no pause ends", took)
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr}})
	t.Cleanup(func() { cc.Close() })
	lock, err := fencedlock.New(cc).Acquire(ctx, resource, time.Minute)
	if err != nil {
		t.Fatalf("Acquire with a ClusterClient = %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
