package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a Redis deployment under Redis Sentinel, on loopback
// ports: three redis-servers, one master and two replicas at the start,
// and three Sentinels (redis-server --sentinel) that monitor them with a
// quorum of 2 and settings that fail over within a few seconds. Clients
// reach the master as go-redis's failover client does:
//
//	redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.SentinelAddrs()})
//
// One goroutine drives it: its methods are not safe for concurrent use.
type Sentinel struct {
	Name      string     // the master's name for the Sentinels
	Servers   []*Server  // the redis-servers; the first is the first master
	Sentinels []*Server  // the Sentinels
	base      [][]string // each server's command line as started, for Rejoin

	clients   []*redis.Client         // of Servers, by index
	sentinels []*redis.SentinelClient // of Sentinels, by index
}

// Settings of the Sentinels, so that a failover takes a few seconds. A
// failover that stalls is abandoned after sentinelFailoverTimeout, and
// tried again after twice that.
const (
	sentinelName            = "fencedlock"
	sentinelQuorum          = "2"
	sentinelFailoverTimeout = "2000"
)

// A master is down for a Sentinel after down-after-milliseconds without
// an answer to PING. That must be well above the Sentinel's PING period
// (min(down-after, 1s)): a Sentinel that learns of a promotion connects to
// the new master up to one PING period later, and with a down-after
// barely above that the Sentinels declare the new master down at once and
// fail over again. The PING period also bounds how old a replica's INFO
// may be for the replica to be promoted (five periods), and replicas get
// INFO every second in a failover. Where SENTINEL DEBUG exists (Redis 7.0
// and later, Valkey), the Sentinels get sentinelDebugPeriods and
// sentinelFastDownAfter, elsewhere sentinelDownAfter.
const (
	sentinelDownAfter     = "2000"
	sentinelFastDownAfter = "1000"
)

// sentinelDebugPeriods are the Sentinels' timers where SENTINEL DEBUG
// exists, in milliseconds (the defaults in parentheses): INFO to every
// server outside failovers (10s), PING (1s), the questions to the other
// Sentinels (1s), the hello messages by which Sentinels find each other
// and spread a new master (2s), and TILT (30s). A Sentinel whose timer
// runs more than 2s late (a machine stalled by a loaded test run) enters
// TILT: it acts on nothing for tilt-period. With the default, one stall
// spends a whole promotion wait.
var sentinelDebugPeriods = []any{
	"info-period", 200, "ping-period", 400, "ask-period", 100, "publish-period", 200,
	"tilt-period", 1000,
}

// sentinelWait bounds each wait of the Sentinel helper: for the
// Sentinels to agree at the start, for a rejoined server to be in sync.
const sentinelWait = 30 * time.Second

// promotionWait bounds WaitPromotion. Where SENTINEL DEBUG does not
// exist (Redis 6.2 and older) a stall of the machine puts the Sentinels in
// TILT for 30s; when they leave it together they may split their votes,
// and try again after twice the failover timeout.
const promotionWait = 60 * time.Second

// sentinelAsk bounds one round of questions to the Sentinels while
// settle waits, so that one connection that stops answering costs a
// round, not the whole wait.
const sentinelAsk = 2 * time.Second

// StartSentinel starts a master, two replicas in sync with it and three
// Sentinels, waits until every Sentinel knows the master, both replicas
// and the other two Sentinels, and stops them all when tb's test ends.
// It skips tb without redis-server (fails it when CI=true), and fails it
// when a process does not start (with the end of its log) or the
// Sentinels do not agree in time.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	s := &Sentinel{Name: sentinelName}
	for i := 0; i < 3; i++ {
		// No delay before a diskless full sync: the default waits 5s
		// for more replicas to come.
		srv := Start(tb, "--repl-diskless-sync-delay", "0")
		s.Servers = append(s.Servers, srv)
		s.base = append(s.base, append([]string(nil), srv.args...))
		s.clients = append(s.clients, srv.Client(tb))
	}
	master := s.Servers[0]
	ctx, cancel := context.WithTimeout(context.Background(), sentinelWait)
	defer cancel()
	host, port, _ := net.SplitHostPort(master.Addr)
	for _, r := range s.Servers[1:] {
		if err := s.client(r).Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
			tb.Fatalf("redistest: REPLICAOF on %s: %v", r.Addr, err)
		}
		if err := WaitInSync(ctx, s.client(master), s.client(r)); err != nil {
			tb.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		// Sentinel writes its state to its config file, which must
		// exist and be writable.
		conf := filepath.Join(tb.TempDir(), "sentinel.conf")
		if err := os.WriteFile(conf, nil, 0o644); err != nil {
			tb.Fatal(err)
		}
		sn := Start(tb, conf, "--sentinel", "--loglevel", "notice",
			"--sentinel", "monitor", s.Name, host, port, sentinelQuorum,
			"--sentinel", "down-after-milliseconds", s.Name, sentinelDownAfter,
			"--sentinel", "failover-timeout", s.Name, sentinelFailoverTimeout,
			"--sentinel", "parallel-syncs", s.Name, "2")
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		tb.Cleanup(func() { c.Close() })
		s.Sentinels = append(s.Sentinels, sn)
		s.sentinels = append(s.sentinels, c)
		if err := s.speedUp(ctx, c); err != nil {
			tb.Fatalf("redistest: Sentinel %s: %v", sn.Addr, err)
		}
	}
	if err := s.settle(ctx, master); err != nil {
		tb.Fatal(err)
	}
	return s
}

// speedUp shortens the timers of the Sentinel behind c, and its
// down-after with them, where SENTINEL DEBUG exists.
func (s *Sentinel) speedUp(ctx context.Context, c *redis.SentinelClient) error {
	err := c.Process(ctx, redis.NewCmd(ctx, append([]any{"SENTINEL", "DEBUG"}, sentinelDebugPeriods...)...))
	switch {
	case err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown"):
		return nil // an older server: the defaults
	case err != nil:
		return fmt.Errorf("SENTINEL DEBUG: %w", err)
	}
	return c.Set(ctx, s.Name, "down-after-milliseconds", sentinelFastDownAfter).Err()
}

// SentinelAddrs returns the addresses of the Sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr
	}
	return addrs
}

// Master returns the server that every Sentinel names as the master, or
// an error when they do not agree or one does not answer.
func (s *Sentinel) Master(ctx context.Context) (*Server, error) {
	var addr string
	for i := range s.Sentinels {
		a, err := s.masterAddr(ctx, i)
		if err != nil {
			return nil, err
		}
		if addr != "" && a != addr {
			return nil, fmt.Errorf("redistest: the Sentinels name two masters, %s and %s", addr, a)
		}
		addr = a
	}
	return s.server(addr)
}

// KillMaster kills the master that the Sentinels name with SIGKILL, waits
// until the replicas have noticed (their link to it is down: they hold
// all it had sent them, and nothing more comes), and returns it. It fails
// tb when the Sentinels do not agree on a master, or a replica has not
// noticed within 5 seconds.
func (s *Sentinel) KillMaster(tb testing.TB) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := s.Master(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	m.Kill()
	err = s.eachRunning(ctx, m, func(c *redis.Client) error {
		for {
			info, err := Info(ctx, c, "replication")
			if err == nil && info["master_link_status"] != "up" {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("its link to the killed master %s is still up: %w", m.Addr, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// WaitPromotion waits until every Sentinel names the same master other
// than old, and that server says it is a master (INFO's role), and
// returns it. It returns an error, with the end of each Sentinel's log,
// when that has not happened within promotionWait or by ctx's end.
func (s *Sentinel) WaitPromotion(ctx context.Context, old *Server) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, promotionWait)
	defer cancel()
	last := "no answer yet"
	for {
		m, err := s.Master(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case m == old:
			last = "the Sentinels still name the old master " + old.Addr
		default:
			role, err := s.role(ctx, m)
			if err == nil && role == "master" {
				return m, nil
			}
			last = fmt.Sprintf("the Sentinels name %s, whose role is %q (%v)", m.Addr, role, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redistest: no promotion after the loss of %s: %s: %w%s", old.Addr, last, ctx.Err(), s.logs())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// CutReplication waits until the replicas have applied what the master
// had sent them when it was called, then cuts them off: each drops its
// link and cannot sync again (its masterauth is wrong for a master
// without a password) until RestoreReplication. The master goes on taking
// writes that no replica gets; a failover then promotes a replica that
// missed them.
func (s *Sentinel) CutReplication(ctx context.Context) error {
	m, err := s.Master(ctx)
	if err != nil {
		return err
	}
	return s.eachRunning(ctx, m, func(c *redis.Client) error {
		if err := WaitInSync(ctx, s.client(m), c); err != nil {
			return err
		}
		if err := c.ConfigSet(ctx, "masterauth", "cut-off-by-redistest").Err(); err != nil {
			return err
		}
		return c.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err()
	})
}

// RestoreReplication undoes CutReplication on every running server: the
// replicas sync with their master again (a new one, after a failover) at
// their next attempt.
func (s *Sentinel) RestoreReplication(ctx context.Context) error {
	return s.eachRunning(ctx, nil, func(c *redis.Client) error {
		return c.ConfigSet(ctx, "masterauth", "").Err()
	})
}

// eachRunning calls fn with the client of every running server but
// except.
func (s *Sentinel) eachRunning(ctx context.Context, except *Server, fn func(c *redis.Client) error) error {
	for i, srv := range s.Servers {
		if srv == except || !srv.running() {
			continue
		}
		if err := fn(s.clients[i]); err != nil {
			return fmt.Errorf("redistest: server %s: %w", srv.Addr, err)
		}
	}
	return nil
}

// Rejoin starts old, a server that KillMaster killed, again, empty, as a
// replica of the current master, and waits until it is in sync and the
// Sentinels see it up, so that a later failover can promote it. It fails
// tb when that does not happen within sentinelWait.
func (s *Sentinel) Rejoin(tb testing.TB, old *Server) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelWait)
	defer cancel()
	m, err := s.Master(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	// A replica from its start: it never serves as an empty master.
	host, port, _ := net.SplitHostPort(m.Addr)
	old.args = append(append([]string(nil), s.base[s.index(old)]...), "--replicaof", host, port)
	old.Restart(tb)
	if err := WaitInSync(ctx, s.client(m), s.client(old)); err != nil {
		tb.Fatal(err)
	}
	if err := s.settle(ctx, m); err != nil {
		tb.Fatal(err)
	}
}

// settle waits until every Sentinel names m as the master, with no
// failover in progress, and knows two replicas and two other Sentinels,
// all of them up.
func (s *Sentinel) settle(ctx context.Context, m *Server) error {
	last := "no answer yet"
	for {
		ask, cancel := context.WithTimeout(ctx, sentinelAsk)
		err := s.settled(ask, m)
		cancel()
		if err == nil {
			return nil
		}
		// Keep what the Sentinels last said, not the end of ctx.
		if ctx.Err() == nil || last == "no answer yet" {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: the Sentinels did not settle on master %s: %s: %w%s", m.Addr, last, ctx.Err(), s.logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// settled returns nil when the Sentinels are as settle waits for them,
// else what one of them differs in.
func (s *Sentinel) settled(ctx context.Context, m *Server) error {
	for i, sn := range s.Sentinels {
		c := s.sentinels[i]
		addr, err := s.masterAddr(ctx, i)
		if err != nil {
			return err
		}
		if addr != m.Addr {
			return fmt.Errorf("Sentinel %s names master %s", sn.Addr, addr)
		}
		mi, err := c.Master(ctx, s.Name).Result()
		if err != nil {
			return err
		}
		if down(mi["flags"]) || strings.Contains(mi["flags"], "failover_in_progress") || mi["num-slaves"] != "2" || mi["num-other-sentinels"] != "2" {
			return fmt.Errorf("Sentinel %s: master flags %q, %s replicas, %s other Sentinels", sn.Addr, mi["flags"], mi["num-slaves"], mi["num-other-sentinels"])
		}
		replicas, err := c.Replicas(ctx, s.Name).Result()
		if err != nil {
			return err
		}
		sentinels, err := c.Sentinels(ctx, s.Name).Result()
		if err != nil {
			return err
		}
		for _, o := range append(replicas, sentinels...) {
			if down(o["flags"]) {
				return fmt.Errorf("Sentinel %s: %s:%s has flags %q", sn.Addr, o["ip"], o["port"], o["flags"])
			}
		}
	}
	return nil
}

// down reports whether a Sentinel's flags for an instance say that it is
// down or that the Sentinel has lost its link to it.
func down(flags string) bool {
	for _, f := range strings.Split(flags, ",") {
		switch f {
		case "s_down", "o_down", "disconnected":
			return true
		}
	}
	return false
}

// masterAddr asks Sentinel i for the master's address.
func (s *Sentinel) masterAddr(ctx context.Context, i int) (string, error) {
	a, err := s.sentinels[i].GetMasterAddrByName(ctx, s.Name).Result()
	if err != nil {
		return "", fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME on %s: %w", s.Sentinels[i].Addr, err)
	}
	if len(a) != 2 {
		return "", fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME on %s answered %q", s.Sentinels[i].Addr, a)
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

// server returns the server at addr.
func (s *Sentinel) server(addr string) (*Server, error) {
	for _, srv := range s.Servers {
		if srv.Addr == addr {
			return srv, nil
		}
	}
	return nil, fmt.Errorf("redistest: the Sentinels name %s, which is none of the servers", addr)
}

// role returns the role INFO reports for srv: master or slave.
func (s *Sentinel) role(ctx context.Context, srv *Server) (string, error) {
	info, err := Info(ctx, s.client(srv), "replication")
	if err != nil {
		return "", err
	}
	return info["role"], nil
}

// client returns the client of srv, one of s.Servers.
func (s *Sentinel) client(srv *Server) *redis.Client { return s.clients[s.index(srv)] }

// index returns the index of srv in s.Servers.
func (s *Sentinel) index(srv *Server) int {
	for i, x := range s.Servers {
		if x == srv {
			return i
		}
	}
	panic("redistest: not a server of this Sentinel deployment: " + srv.Addr)
}

// logs returns the end of every Sentinel's log, for an error message.
func (s *Sentinel) logs() string {
	var b strings.Builder
	for _, sn := range s.Sentinels {
		fmt.Fprintf(&b, "\n--- Sentinel %s:\n%s", sn.Addr, sn.logTail())
	}
	return b.String()
}

// running reports whether the server's process was started and not
// killed since.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}
