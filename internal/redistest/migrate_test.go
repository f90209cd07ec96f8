package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeID is the ID each node calls its own in CLUSTER NODES.
func TestNodeID(t *testing.T) {
	servers := StartClusterN(t, 2)
	ids := map[string]bool{}
	for _, s := range servers {
		id := NodeID(t, s)
		nodes, err := s.Client(t).ClusterNodes(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		var mine string
		for _, line := range strings.Split(nodes, "\n") {
			if f := strings.Fields(line); len(f) > 2 && strings.Contains(f[2], "myself") {
				mine = f[0]
			}
		}
		if id == "" || id != mine {
			t.Errorf("NodeID(%s) = %q, CLUSTER NODES says %q", s.Addr, id, mine)
		}
		ids[id] = true
	}
	if len(ids) != len(servers) {
		t.Errorf("the nodes' IDs are not distinct: %v", ids)
	}
}

// A migration moves a slot's keys and then the slot: while it is split,
// a command on several of its keys gets TRYAGAIN, and one on a key that
// moved is served by the target (after ASK); once finished, the target
// serves the slot with every key, and, on servers with sharded pub/sub,
// the source has dropped its subscriptions to the slot's channels.
func TestMigrateSlot(t *testing.T) {
	servers := StartClusterN(t, 2)
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr, servers[1].Addr}})
	t.Cleanup(func() { c.Close() })
	keys := []string{"{m}a", "{m}b", "{m}c"}
	for _, k := range keys {
		if err := c.Set(ctx, k, "v"+k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot64, err := c.ClusterKeySlot(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := int(slot64)
	from := SlotOwner(t, servers, slot)
	to := servers[0]
	if from == to {
		to = servers[1]
	}
	sharded, err := ShardedPubSub(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var sub *redis.PubSub
	if sharded {
		sub = from.Client(t).SSubscribe(ctx, "{m}ch")
		t.Cleanup(func() { sub.Close() })
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}

	m := BeginMigration(t, servers, slot, to)
	if m.From() != from || m.To() != to {
		t.Fatalf("migration %v: want from %s to %s", m, from.Addr, to.Addr)
	}
	moved := m.MoveKeys(t, 1)
	if len(moved) != 1 {
		t.Fatalf("MoveKeys(1) moved %v", moved)
	}
	if n, m := KeysInSlot(t, from, slot), KeysInSlot(t, to, slot); n != 2 || m != 1 {
		t.Fatalf("keys of slot %d: %d on the source, %d on the target; want 2 and 1", slot, n, m)
	}
	err = c.Eval(ctx, "return 1", keys).Err()
	if err == nil || !redis.HasErrorPrefix(err, "TRYAGAIN") {
		t.Errorf("a script on the split slot's keys: %v, want TRYAGAIN", err)
	}
	if v, err := c.Get(ctx, moved[0]).Result(); err != nil || v != "v"+moved[0] {
		t.Errorf("GET of the moved key %s: %q, %v", moved[0], v, err)
	}
	if owner := SlotOwner(t, servers, slot); owner != from {
		t.Errorf("slot %d is served by %s before Finish, want %s", slot, owner.Addr, from.Addr)
	}

	m.Finish(t)
	if owner := SlotOwner(t, servers, slot); owner != to {
		t.Errorf("slot %d is served by %s after Finish, want %s", slot, owner.Addr, to.Addr)
	}
	if n, m := KeysInSlot(t, from, slot), KeysInSlot(t, to, slot); n != 0 || m != 3 {
		t.Errorf("keys of slot %d after Finish: %d on the source, %d on the target; want 0 and 3", slot, n, m)
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil || len(vals) != 3 || vals[0] != "v"+keys[0] || vals[2] != "v"+keys[2] {
		t.Errorf("MGET after Finish: %v, %v", vals, err)
	}
	if sharded {
		msg, err := sub.ReceiveTimeout(ctx, 5*time.Second)
		if s, ok := msg.(*redis.Subscription); err != nil || !ok || s.Kind != "sunsubscribe" || s.Channel != "{m}ch" {
			t.Errorf("the source's subscriber got %#v, %v; want a sunsubscribe of {m}ch", msg, err)
		}
	}

	MigrateSlot(t, servers, slot, from)
	if owner := SlotOwner(t, servers, slot); owner != from {
		t.Errorf("slot %d is served by %s after MigrateSlot back, want %s", slot, owner.Addr, from.Addr)
	}
	if n := KeysInSlot(t, from, slot); n != 3 {
		t.Errorf("%d keys of slot %d back on the source, want 3", n, slot)
	}
}
