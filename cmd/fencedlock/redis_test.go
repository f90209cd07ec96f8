//go:build unix

package main

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The URL says which client: one server, a cluster from its hosts, or a
// master from the Sentinels at its hosts; the URL's user and password
// are the servers' in each, and go-redis's query parameters apply.
func TestParseConfig(t *testing.T) {
	t.Run("one server", func(t *testing.T) {
		cfg, err := parseConfig("redis://u:pw@h:7000/2?dial_timeout=3s", "", false)
		if err != nil {
			t.Fatal(err)
		}
		o := cfg.single
		if o == nil || o.Addr != "h:7000" || o.Username != "u" || o.Password != "pw" || o.DB != 2 || o.DialTimeout != 3*time.Second || o.TLSConfig != nil {
			t.Errorf("options %+v", o)
		}
	})
	t.Run("TLS", func(t *testing.T) {
		cfg, err := parseConfig("rediss://h", "", false)
		if err != nil || cfg.single == nil || cfg.single.TLSConfig == nil || cfg.single.Addr != "h:6379" {
			t.Errorf("rediss://h: %+v, %v", cfg.single, err)
		}
	})
	t.Run("unix socket", func(t *testing.T) {
		cfg, err := parseConfig("unix:///run/redis.sock?db=1", "", false)
		if err != nil || cfg.single == nil || cfg.single.Network != "unix" || cfg.single.Addr != "/run/redis.sock" || cfg.single.DB != 1 {
			t.Errorf("unix socket: %+v, %v", cfg.single, err)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cfg, err := parseConfig("redis://u:pw@h1:7000,h2:7001?addr=h3:7002&read_only=true", "", true)
		if err != nil {
			t.Fatal(err)
		}
		o := cfg.cluster
		if o == nil || o.Username != "u" || o.Password != "pw" || !o.ReadOnly {
			t.Fatalf("options %+v", o)
		}
		addrs := append([]string(nil), o.Addrs...)
		sort.Strings(addrs)
		if strings.Join(addrs, " ") != "h1:7000 h2:7001 h3:7002" {
			t.Errorf("cluster nodes %v", o.Addrs)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		cfg, err := parseConfig("redis://:pw@s1:26379,[::1]:26380/3?sentinel_password=spw&dial_timeout=2s", "mymaster", false)
		if err != nil {
			t.Fatal(err)
		}
		o := cfg.failover
		if o == nil || o.MasterName != "mymaster" || o.Password != "pw" || o.SentinelPassword != "spw" || o.DB != 3 || o.DialTimeout != 2*time.Second {
			t.Fatalf("options %+v", o)
		}
		if strings.Join(o.SentinelAddrs, " ") != "s1:26379 [::1]:26380" {
			t.Errorf("Sentinels %v", o.SentinelAddrs)
		}
	})
}

// -cluster runs CMD, inspects and advances through a cluster client.
func TestRunOnCluster(t *testing.T) {
	t.Parallel() // it waits, mostly: for Redis, or for a lock to expire
	node := redistest.StartCluster(t)
	e := newBareEnv(t)
	e.url = "redis://" + node.Addr
	code, out, stderr := e.runStatus([]string{"run", "-cluster", "-ttl", "5s", "report", "--", "sh", "-c", `echo "$FENCEDLOCK_TOKEN"`})
	if _, err := fencedlock.ParseToken(strings.TrimSpace(out)); code != 0 || err != nil {
		t.Fatalf("run: status %d, stdout %q, stderr %q", code, out, stderr)
	}
	if code, _, stderr := e.runStatus([]string{"advance", "-cluster", "report", "1000"}); code != 0 {
		t.Errorf("advance: status %d, stderr %q", code, stderr)
	}
	code, out, stderr = e.runStatus([]string{"inspect", "-cluster", "-json", "report"})
	if code != 0 || !strings.Contains(out, `"held":false`) {
		t.Errorf("inspect: status %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// -sentinel-master runs CMD on the master that the Sentinels at the URL's
// hosts name.
func TestRunOnSentinel(t *testing.T) {
	t.Parallel() // it waits, mostly: for Redis, or for a lock to expire
	s := redistest.StartSentinel(t)
	e := newBareEnv(t)
	e.url = "redis://" + strings.Join(s.SentinelAddrs(), ",")
	code, out, stderr := e.runStatus([]string{"run", "-sentinel-master", s.Name, "-ttl", "5s", "report", "--", "sh", "-c", `echo "$FENCEDLOCK_TOKEN"`})
	token, err := fencedlock.ParseToken(strings.TrimSpace(out))
	if code != 0 || err != nil {
		t.Fatalf("run: status %d, stdout %q, stderr %q", code, out, stderr)
	}
	// The lock was on the master: its counter holds the token.
	master, err := s.Master(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer c.Close()
	counter, err := c.Get(context.Background(), fencedlock.DefaultPrefix+":{report}:token").Result()
	if err != nil || counter != token.String() {
		t.Errorf("the master's counter is %q (%v); want CMD's token %d", counter, err, token)
	}
}
