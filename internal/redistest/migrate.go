package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The helpers here move a hash slot from one master of a cluster that
// StartClusterN started to another, in the steps of a reshard (redis-cli
// --cluster reshard): the target imports the slot, the source migrates
// it, the slot's keys move in batches with MIGRATE, and then every master
// is told the slot's new owner. A test can stop between the steps: while
// some of a slot's keys have moved and others not, a command on several
// of its keys is answered with TRYAGAIN, and one on keys that have all
// moved with ASK.

// NodeID returns the cluster node ID of s (CLUSTER MYID).
func NodeID(tb testing.TB, s *Server) string {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	id, err := c.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr, err)
	}
	return id
}

// SlotOwner returns the server of servers that serves slot, by what s
// itself says (CLUSTER SLOTS of each); it fails tb when none or more than
// one does.
func SlotOwner(tb testing.TB, servers []*Server, slot int) *Server {
	tb.Helper()
	ctx := context.Background()
	var owner *Server
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		//lint:ignore SA1019 CLUSTER SHARDS, its successor, is missing before Redis 7; every server has CLUSTER SLOTS
		ranges, err := c.ClusterSlots(ctx).Result()
		c.Close()
		if err != nil {
			tb.Fatalf("redistest: CLUSTER SLOTS on %s: %v", s.Addr, err)
		}
		for _, r := range ranges {
			if slot < r.Start || slot > r.End || len(r.Nodes) == 0 || !sameAddr(r.Nodes[0].Addr, s.Addr) {
				continue
			}
			if owner != nil {
				tb.Fatalf("redistest: slot %d is served by %s and %s", slot, owner.Addr, s.Addr)
			}
			owner = s
		}
	}
	if owner == nil {
		tb.Fatalf("redistest: no server says it serves slot %d", slot)
	}
	return owner
}

// sameAddr reports whether two host:port addresses name one endpoint,
// the host compared as an IP when both are.
func sameAddr(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	if ai, bi := net.ParseIP(ah), net.ParseIP(bh); ai != nil && bi != nil {
		return ai.Equal(bi) && ap == bp
	}
	return ah == bh && ap == bp
}

// Migration is a slot on its way from one master of a cluster to another,
// begun by BeginMigration. Its methods are not safe for concurrent use.
type Migration struct {
	Slot     int
	from, to *Server
	servers  []*Server
	fromID   string
	toID     string
	src, dst *redis.Client
}

// BeginMigration starts moving slot from its owner among servers (the
// masters of one cluster, all of them) to the server to: CLUSTER SETSLOT
// IMPORTING on to, then MIGRATING on the owner. No key moves yet: see
// MoveKeys and Finish. Its clients are closed when tb's test ends.
func BeginMigration(tb testing.TB, servers []*Server, slot int, to *Server) *Migration {
	tb.Helper()
	from := SlotOwner(tb, servers, slot)
	if from == to {
		tb.Fatalf("redistest: slot %d is on %s already", slot, to.Addr)
	}
	m := &Migration{
		Slot: slot, from: from, to: to, servers: servers,
		fromID: NodeID(tb, from), toID: NodeID(tb, to),
		src: redis.NewClient(&redis.Options{Addr: from.Addr}),
		dst: redis.NewClient(&redis.Options{Addr: to.Addr}),
	}
	tb.Cleanup(func() {
		m.src.Close()
		m.dst.Close()
	})
	ctx := context.Background()
	if err := m.dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID).Err(); err != nil {
		tb.Fatalf("redistest: CLUSTER SETSLOT %d IMPORTING on %s: %v", slot, to.Addr, err)
	}
	if err := m.src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID).Err(); err != nil {
		tb.Fatalf("redistest: CLUSTER SETSLOT %d MIGRATING on %s: %v", slot, from.Addr, err)
	}
	return m
}

// From returns the server the slot moves from.
func (m *Migration) From() *Server { return m.from }

// To returns the server the slot moves to.
func (m *Migration) To() *Server { return m.to }

// MoveKeys moves up to n of the slot's keys still on the source to the
// target with one MIGRATE, in the order CLUSTER GETKEYSINSLOT lists them,
// and returns the keys it moved.
func (m *Migration) MoveKeys(tb testing.TB, n int) []string {
	tb.Helper()
	ctx := context.Background()
	keys, err := m.src.ClusterGetKeysInSlot(ctx, m.Slot, n).Result()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER GETKEYSINSLOT %d on %s: %v", m.Slot, m.from.Addr, err)
	}
	if len(keys) == 0 {
		return nil
	}
	host, port, _ := strings.Cut(m.to.Addr, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	if err := m.src.Do(ctx, args...).Err(); err != nil {
		tb.Fatalf("redistest: MIGRATE %d keys of slot %d from %s to %s: %v", len(keys), m.Slot, m.from.Addr, m.to.Addr, err)
	}
	return keys
}

// Finish moves the slot's remaining keys, in batches of 100, and assigns
// the slot to the target: CLUSTER SETSLOT NODE on the target, then on the
// source, then on the other masters. The source then no longer serves
// it: on a server with sharded pub/sub it drops its subscriptions to the
// slot's channels.
func (m *Migration) Finish(tb testing.TB) {
	tb.Helper()
	for {
		if moved := m.MoveKeys(tb, 100); len(moved) == 0 {
			break
		}
	}
	ctx := context.Background()
	setNode := func(s *Server, c *redis.Client) {
		tb.Helper()
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err(); err != nil {
			tb.Fatalf("redistest: CLUSTER SETSLOT %d NODE %s on %s: %v", m.Slot, m.toID, s.Addr, err)
		}
	}
	setNode(m.to, m.dst)
	setNode(m.from, m.src)
	for _, s := range m.servers {
		if s == m.from || s == m.to {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		setNode(s, c)
		c.Close()
	}
}

// MigrateSlot moves slot from its owner among servers to the server to,
// keys and all, as BeginMigration and Finish do.
func MigrateSlot(tb testing.TB, servers []*Server, slot int, to *Server) {
	tb.Helper()
	BeginMigration(tb, servers, slot, to).Finish(tb)
}

// KeysInSlot returns how many keys of slot s holds (CLUSTER
// COUNTKEYSINSLOT).
func KeysInSlot(tb testing.TB, s *Server, slot int) int64 {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	n, err := c.ClusterCountKeysInSlot(context.Background(), slot).Result()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER COUNTKEYSINSLOT %d on %s: %v", slot, s.Addr, err)
	}
	return n
}

// String describes the migration for test logs.
func (m *Migration) String() string {
	return fmt.Sprintf("slot %d from %s to %s", m.Slot, m.from.Addr, m.to.Addr)
}
