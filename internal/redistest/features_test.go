package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A server that refuses its command line fails the start with what it
// said on stderr: it exits before it opens its log file.
func TestStartFailureShowsStderr(t *testing.T) {
	_, err := start(Binary(t), "--no-such-option", "1")
	if err == nil {
		t.Fatal("redis-server started with an option it does not have")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("the error does not show the server's complaint: %v", err)
	}
}

// The cluster helpers assign every slot on servers with and without
// CLUSTER ADDSLOTSRANGE, and Subscribers counts the subscriptions of the
// kind the server has, on every master.
func TestClusterSlotsAndSubscribers(t *testing.T) {
	servers := StartClusterN(t, 2)
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr, servers[1].Addr}})
	t.Cleanup(func() { c.Close() })
	for _, s := range servers {
		info, err := Info(ctx, s.Client(t), "cluster")
		if err != nil || info["cluster_enabled"] != "1" {
			t.Fatalf("not a cluster node: %v %v", info, err)
		}
	}
	ci, err := c.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(ci, "cluster_slots_assigned:16384") {
		t.Fatalf("not every slot is assigned: %v %s", err, ci)
	}
	sharded, err := ShardedPubSub(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, channel := range []string{"a", "b", "c", "d"} {
		var ps *redis.PubSub
		if sharded {
			ps = c.SSubscribe(ctx, channel)
		} else {
			ps = c.Subscribe(ctx, channel)
		}
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := Subscribers(ctx, c, channel)
		if err != nil || n != 1 {
			t.Errorf("Subscribers(%q) = %d, %v; want 1 (sharded: %v)", channel, n, err, sharded)
		}
		ps.Close()
	}
}

// SetBusyThreshold sets the setting under the server's name for it: a
// script running longer is answered with BUSY.
func TestSetBusyThreshold(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := SetBusyThreshold(ctx, c, 50); err != nil {
		t.Fatal(err)
	}
	go s.Client(t).Eval(ctx, "while true do end", nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err != nil && strings.HasPrefix(err.Error(), "BUSY") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no BUSY reply: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Do(ctx, "SCRIPT", "KILL").Err(); err != nil {
		t.Fatal(err)
	}
}
