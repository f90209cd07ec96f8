package safety

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Workload constants, the same in both modes.
const (
	lockTTL          = 200 * time.Millisecond // short, so that pauses and faults outlast it often
	lateWriteHold    = 900 * time.Millisecond // > storeHTTPTimeout and redisTimeout, > lockTTL
	inProcessClients = 4                      // two Lockers, each shared by two goroutines
	childWaitTimeout = 30 * time.Second       // for a child to exit after the workload's end
	replicaTimeout   = 100 * time.Millisecond // WithReplicas's WAIT, well below redisTimeout
	// Work before each write: children work longer, so that SIGSTOP
	// often finds them holding a lock.
	inProcessWork = 10 * time.Millisecond
	childWork     = 40 * time.Millisecond
)

var resources = []string{"r0", "r1", "r2"}

// Where the locks live.
const (
	topoSingle   = "single"   // one redis-server behind a fault proxy
	topoFailover = "failover" // a master and a replica that trade places (failoverRig)
	topoCluster  = "cluster"  // a 3-master Redis Cluster, no proxy
	topoSentinel = "sentinel" // a master, two replicas and three Sentinels; clients on go-redis's failover client (sentinelRig)
)

// What the clients write to.
const (
	storeMemory   = "memory"   // a fencedlock.MemoryStore behind the ledger, over HTTP
	storeRedis    = "redis"    // a fencedlock.RedisStore on its own redis-server behind the ledger, over HTTP
	storeUnfenced = "unfenced" // the negative control: accepts every write, behind the ledger, over HTTP
	storeDirect   = "direct"   // a fencedlock.RedisStore that the clients call themselves, through a fault proxy
	// The SQL stores of package sqlstore, which the clients call
	// themselves (sqlstore_test.go): SQLite in a file, PostgreSQL and
	// MariaDB through a fault proxy.
	storeSQLite   = "sqlite"
	storePostgres = "postgres"
	storeMariaDB  = "mariadb"
)

// A scenario is one workload under one set of faults.
type scenario struct {
	name     string
	topology string
	store    string
	workload string // what the clients do: workloadRegister, workloadAppend, workloadGetPut
	pauses   bool   // in-process clients sleep past the TTL before writing
	children int    // child processes (the sigstop fault's targets)
	faults   []string
	// replicas > 0: the Lockers wait for that many replicas to confirm
	// each grant (fencedlock.WithReplicas).
	replicas int
	// negative: the store is not fenced, and the checkers must report it.
	negative bool
}

// direct reports whether the clients call the scenario's store
// themselves, without the ledger: checker C (and E) judge alone.
func (sc scenario) direct() bool {
	switch sc.store {
	case storeDirect, storeSQLite, storePostgres, storeMariaDB:
		return true
	}
	return false
}

// scenarios run in this order; a scenario's seed is the base seed plus
// its index, so that -run TestSafety/<name> with the logged base seed
// replays its random choices.
var scenarios = []scenario{
	// Holders paused past their TTL (GC pauses): the textbook case.
	{name: "pause", topology: topoSingle, store: storeMemory, pauses: true},
	// Whole processes stopped past their TTL, heartbeats included.
	{name: "sigstop", topology: topoSingle, store: storeMemory, children: 2, faults: []string{faultSigstop}},
	// A faulty network between ONE lock client process and Redis at a
	// time (each Locker has its own proxy): its grants arrive after their
	// TTL while the other clients take the locks and write, and its late
	// writes must be refused. Lost replies and resent scripts test the
	// grants.
	{name: "proxy", topology: topoSingle, store: storeMemory, faults: []string{faultProxy}},
	// Writes delivered after their clients gave up.
	{name: "late-write", topology: topoSingle, store: storeMemory, faults: []string{faultLateWrite}},
	// Lock state lost: the server killed and restarted empty, or flushed,
	// and nothing else. The store is a RedisStore (on another server,
	// which keeps its data).
	{name: "restart", topology: topoSingle, store: storeRedis, faults: []string{faultRestart, faultFlushAll}},
	// The same with holders paused past their TTL.
	{name: "restart-pause", topology: topoSingle, store: storeRedis, pauses: true, faults: []string{faultRestart, faultFlushAll}},
	// Failovers to a replica that missed the latest grants, and nothing
	// else.
	{name: "failover", topology: topoFailover, store: storeMemory, faults: []string{faultFailover}},
	// The same with holders paused past their TTL.
	{name: "failover-pause", topology: topoFailover, store: storeMemory, pauses: true, faults: []string{faultFailover}},
	// The same with WithReplicas(1): a grant counts only once the replica
	// has it, so acquires fail while the link is cut (ErrNotReplicated),
	// and the promoted replica has every grant a client received.
	{name: "failover-wait", topology: topoFailover, store: storeMemory, pauses: true, faults: []string{faultFailover}, replicas: 1},
	// Real failovers under Sentinel: the master killed (SIGKILL), every
	// other time just after its replicas were cut off, so that its last
	// grants are lost; the Sentinels promote a replica, and the clients'
	// failover client follows. Holders paused past their TTL too.
	{name: "sentinel", topology: topoSentinel, store: storeMemory, pauses: true, faults: []string{faultKillMaster}},
	// The same with WithReplicas(1): acquires fail while the replicas are
	// cut off (ErrNotReplicated), and the promoted replica has every
	// grant a client received.
	{name: "sentinel-wait", topology: topoSentinel, store: storeMemory, pauses: true, faults: []string{faultKillMaster}, replicas: 1},
	// A real 3-master cluster: keys of different resources on different
	// masters, every master flushed.
	{name: "cluster", topology: topoCluster, store: storeMemory, pauses: true, children: 2, faults: []string{faultSigstop, faultFlushAll}},
	// Everything at once on one node, with a RedisStore behind the ledger.
	// Lock calls whose replies come after their ctx ended, then called
	// again, and stalls of the whole lock network past the waiters'
	// deadlines, too.
	{name: "mixed", topology: topoSingle, store: storeRedis, pauses: true, children: 2,
		faults: []string{faultSigstop, faultProxy, faultLateWrite, faultRestart, faultFlushAll, faultLateReply, faultStall}},
	// The clients call a RedisStore themselves, through a faulty network
	// (its writes held, delayed, their replies lost): RedisStore's own
	// script must fence atomically under concurrency. No ledger: checker C
	// alone judges.
	{name: "redis-store", topology: topoSingle, store: storeDirect, pauses: true, faults: []string{faultStoreProxy, faultLateWrite, faultProxy}},
	// The negative control: pauses and late writes against an unfenced
	// store. The checkers must report violations.
	{name: "negative-control", topology: topoSingle, store: storeUnfenced, pauses: true, faults: []string{faultLateWrite}, negative: true},

	// The append workload (append_test.go): fencedlock.Update appends an
	// item to the resource's list, and fn sometimes sleeps past the TTL
	// between the read and the write. Checker E judges the final lists.
	// A MemoryStore over HTTP (fencehttp), behind the ledger, with
	// children stopped, late writes and fences, and a slowed lock network.
	{name: "append-memory", topology: topoSingle, store: storeMemory, workload: workloadAppend, pauses: true, children: 2,
		faults: []string{faultSigstop, faultLateWrite, faultProxy}},
	// A RedisStore the clients call themselves (Update's fenced read in
	// one script), through a faulty network.
	{name: "append-redis", topology: topoSingle, store: storeDirect, workload: workloadAppend, pauses: true,
		faults: []string{faultStoreProxy, faultLateWrite, faultProxy}},
	// SQLite in-process: no store network; the lock Redis restarted and
	// flushed.
	{name: "append-sqlite", topology: topoSingle, store: storeSQLite, workload: workloadAppend, pauses: true,
		faults: []string{faultRestart, faultFlushAll, faultProxy}},
	// PostgreSQL and MariaDB through a faulty network.
	{name: "append-postgres", topology: topoSingle, store: storePostgres, workload: workloadAppend, pauses: true,
		faults: []string{faultStoreProxy, faultLateWrite, faultProxy}},
	{name: "append-mariadb", topology: topoSingle, store: storeMariaDB, workload: workloadAppend, pauses: true,
		faults: []string{faultStoreProxy, faultLateWrite, faultRestart}},
	// Checker E's negative control: the same workload with Get then Put,
	// without the Fence, on the fenced MemoryStore. Every write obeys the
	// fence rule, so checkers A to D pass; checker E must find
	// acknowledged appends lost.
	{name: "append-negative", topology: topoSingle, store: storeMemory, workload: workloadGetPut, pauses: true},
}

// TestSafety runs every scenario, then logs the report (and writes it
// with -safety.report).
func TestSafety(t *testing.T) {
	cfg := loadConfig(t)
	var sums []summary
	for i, sc := range scenarios {
		sc, seed := sc, cfg.seed+int64(i)
		before := runtime.NumGoroutine()
		var sum summary
		t.Run(sc.name, func(t *testing.T) { sum = runScenario(t, sc, cfg, seed) })
		// Every goroutine of the scenario, clients, servers and proxies,
		// must be gone now that its cleanups have run.
		if err := waitGoroutines(before, 10*time.Second); err != nil {
			t.Errorf("%s: %v", sc.name, err)
		}
		if sum.Name != "" {
			sums = append(sums, sum)
		}
	}
	if len(sums) == 0 {
		return
	}
	report := markdown(sums, cfg)
	t.Log("report:\n" + report)
	if cfg.report != "" {
		if err := os.WriteFile(cfg.report, []byte(report), 0o644); err != nil {
			t.Error(err)
		} else {
			t.Logf("report written to %s", cfg.report)
		}
	}
}

// waitGoroutines waits until no more than n goroutines run, and returns
// an error with the stacks of all goroutines if that does not happen
// within timeout. (A Locker's subscription ends a second after its last
// waiter; idle HTTP and Redis connections close a little after.)
func waitGoroutines(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if runtime.NumGoroutine() <= n {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			return fmt.Errorf("goroutines leaked: %d running, %d before the scenario:\n%s", runtime.NumGoroutine(), n, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// validate reports a combination of settings that would run but
// silently test less than it says.
func (sc scenario) validate() error {
	switch {
	case sc.children > 0 && sc.direct():
		return fmt.Errorf("%s: child processes write over HTTP, through the ledger; they cannot use the direct store", sc.name)
	case sc.negative && sc.direct():
		return fmt.Errorf("%s: a negative control needs the ledger (checker A), which the direct store has not", sc.name)
	case sc.negative && sc.store != storeUnfenced:
		return fmt.Errorf("%s: a negative control needs the unfenced store", sc.name)
	case !sc.negative && sc.store == storeUnfenced:
		return fmt.Errorf("%s: the unfenced store is for the negative control only", sc.name)
	case sc.replicas > 0 && sc.topology != topoFailover && sc.topology != topoSentinel:
		return fmt.Errorf("%s: WithReplicas needs a replica: the failover or sentinel topology", sc.name)
	case sc.workload != workloadRegister && sc.workload != workloadAppend && sc.workload != workloadGetPut:
		return fmt.Errorf("%s: unknown workload %q", sc.name, sc.workload)
	case sc.workload == workloadRegister && (sc.store == storeSQLite || sc.store == storePostgres || sc.store == storeMariaDB):
		return fmt.Errorf("%s: the SQL stores run the append workload only", sc.name)
	case sc.workload == workloadGetPut && sc.store == storeUnfenced:
		return fmt.Errorf("%s: checker E's negative control runs on a fenced store, so that only the missing Fence loses appends", sc.name)
	case sc.workload == workloadGetPut && sc.direct():
		return fmt.Errorf("%s: checker E's negative control needs the ledger, so that checker A shows every write obeyed the fence", sc.name)
	}
	for _, f := range sc.faults {
		switch {
		case (f == faultProxy || f == faultRestart || f == faultStall || f == faultLateReply) && sc.topology != topoSingle:
			return fmt.Errorf("%s: the %s fault needs the single-node topology", sc.name, f)
		case f == faultFailover && sc.topology != topoFailover:
			return fmt.Errorf("%s: the failover fault needs the failover topology", sc.name)
		case f == faultKillMaster && sc.topology != topoSentinel:
			return fmt.Errorf("%s: the kill-master fault needs the sentinel topology", sc.name)
		case f == faultFlushAll && (sc.topology == topoFailover || sc.topology == topoSentinel):
			return fmt.Errorf("%s: flushall is not wired to the %s topology", sc.name, sc.topology)
		case f == faultSigstop && sc.children == 0:
			return fmt.Errorf("%s: the sigstop fault needs child processes", sc.name)
		case f == faultStoreProxy && (!sc.direct() || sc.store == storeSQLite):
			return fmt.Errorf("%s: the store-proxy fault is for a direct store with a network (the late-write fault covers the HTTP store)", sc.name)
		case f == faultLateWrite && sc.store == storeSQLite:
			return fmt.Errorf("%s: the late-write fault needs a store network; SQLite has none", sc.name)
		case f == faultLateReply && sc.workload != workloadRegister:
			return fmt.Errorf("%s: the late-reply fault's cycle writes registers, not lists", sc.name)
		}
	}
	return nil
}

func (sc scenario) has(fault string) bool {
	for _, f := range sc.faults {
		if f == fault {
			return true
		}
	}
	return false
}

// scenarioRun is one scenario's servers, clients and records.
type scenarioRun struct {
	t    *testing.T
	sc   scenario
	cfg  runConfig
	seed int64

	lock      lockTarget
	nem       *nemesis
	ledger    *ledger          // nil for the direct stores
	storeSrv  *httptest.Server // nil for the direct stores
	storeAddr string           // the store proxy's address; "" for SQLite
	direct    fencedlock.Store // the direct stores: the store without the proxy, for the final reads
	sql       *sqlBackend      // the SQL stores
	keys      keyReader        // checker D's reads of lock keys, in this process
	childKeys lockTarget       // the same for child processes: the lock Redis without proxies (no Addrs: none)
	closers   []func()         // the clients' connections, closed at the end
	keepDir   string           // see failureDir
}

// finalReader is the client id of the final reads.
const finalReader = 1000

// runScenario runs one scenario and checks its history.
func runScenario(t *testing.T, sc scenario, cfg runConfig, seed int64) summary {
	if err := sc.validate(); err != nil {
		t.Fatal(err)
	}
	if sc.children > 0 && !childrenSupported {
		t.Skip("child processes need Linux: SIGSTOP, and a parent-death signal so that no child outlives the test")
	}
	started := time.Now()
	t.Logf("seed %d", seed)
	r := &scenarioRun{t: t, sc: sc, cfg: cfg, seed: seed}
	r.nem = newNemesis(t, actorSeed(seed, 999), sc.faults)
	r.setupLocks()
	r.setupStore()

	// The clients. Their loop ends at stopAt (wall clock, shared with the
	// children); ctx ends it early only if the test fails on its way.
	stopAt := time.Now().Add(cfg.duration)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	closeOnce := sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		for _, c := range r.closers {
			c()
		}
	})
	t.Cleanup(closeOnce)
	rec := &recorder{}
	var workers []*worker
	work, childWorkMax := inProcessWork, childWork
	if sc.workload != workloadRegister {
		work, childWorkMax = appendWork, appendWork
	}
	for i := 0; i < inProcessClients; i += 2 {
		// Two goroutines share each Locker, so that its local queue and
		// hand-over run too, and a helper waits on demand (the late-reply
		// fault). Each Locker has its own network to Redis.
		helperID := helperIDBase + i/2
		ls := &lockerState{wg: &wg, ids: []int{i, i + 1, helperID}, waiting: map[string]int{}}
		client := r.lockTargetFor(ls.ids...).newRedisClient(2)
		if sc.topology == topoSingle {
			ls.proxy = r.nem.lockProxies[len(r.nem.lockProxies)-1].proxy
		}
		r.closers = append(r.closers, func() { client.Close() })
		locker := r.lock.newLocker(client)
		spec := clientSpec{ID: helperID, Seed: actorSeed(seed, helperID), Resources: resources, TTL: lockTTL, WorkMax: inProcessWork, StopAt: stopAt.UnixNano()}
		if sc.has(faultLateReply) {
			ls.helper = newWorker(spec, locker, r.newStore(), rec, r.keys, ls)
		}
		r.nem.lockers = append(r.nem.lockers, ls)
		for j := i; j < i+2; j++ {
			spec := clientSpec{ID: j, Seed: actorSeed(seed, j), Resources: resources, TTL: lockTTL, WorkMax: work, StopAt: stopAt.UnixNano(), Workload: sc.workload}
			spec.Heartbeat = j%2 == 1
			// In the register workload the clients without a heartbeat
			// pause, in one cycle of three (of two in the negative
			// control). In the append workload, whose cycles are longer,
			// every client pauses in one cycle of two: the more pauses,
			// the more stale writes land between another holder's read
			// and write.
			switch {
			case sc.pauses && sc.workload != workloadRegister:
				spec.PauseEvery = 2
			case sc.pauses && j%2 == 0 && sc.negative:
				spec.PauseEvery = 2
			case sc.pauses && j%2 == 0:
				spec.PauseEvery = 3
			}
			workers = append(workers, newWorker(spec, locker, r.newStore(), rec, r.keys, ls))
		}
	}
	for i, ls := range r.nem.lockers {
		ls.peer = r.nem.lockers[(i+1)%len(r.nem.lockers)]
	}
	for _, w := range workers {
		w := w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx)
		}()
	}
	for i := 0; i < sc.children; i++ {
		id := inProcessClients + i
		spec := clientSpec{ID: id, Seed: actorSeed(seed, id), Resources: resources, TTL: lockTTL, WorkMax: childWorkMax, StopAt: stopAt.UnixNano(), Heartbeat: i%2 == 0, Workload: sc.workload}
		cfgChild := childConfig{Spec: spec, Lock: r.lockTargetFor(id), Keys: r.childKeys, StoreAddr: r.storeAddr}
		r.nem.children.add(startChild(t, cfgChild, cfg.duration+time.Minute))
	}

	// The nemesis runs here, on the test goroutine, until stopAt.
	r.nem.run(stopAt)
	wg.Wait()
	var history []op
	history = append(history, rec.snapshot()...)
	for _, c := range r.nem.children.all() {
		ops, err := c.wait(childWaitTimeout)
		if err != nil {
			t.Error(err)
		}
		history = append(history, ops...)
	}
	// Writes still held in the network land before the store is read:
	// every held request was read by the proxy before its client
	// finished, and is delivered at most lateWriteHold later. Then the
	// store's network is cut, so that nothing lands after the final reads.
	if !r.nem.lastHold.IsZero() {
		time.Sleep(lateWriteHold + 500*time.Millisecond)
	}
	if r.storeSrv != nil {
		r.storeSrv.Close() // waits for the requests in flight
	}
	if r.nem.storeProxy != nil { // SQLite has no store network
		r.nem.eff.HoldsDelivered = r.nem.storeProxy.Released()
		r.nem.storeProxy.CloseAll()
	}
	closeOnce()
	history = append(history, r.finalReads()...)
	sortOps(history)
	for _, err := range r.nem.errs {
		t.Errorf("fault: %v", err)
	}

	sum := r.check(history)
	sum.Workload, sum.Took = cfg.duration, time.Since(started)
	t.Log(sum.line())
	if t.Failed() || cfg.report != "" {
		r.saveHistory(history)
	}
	return sum
}

// finalReads reads every resource back from the store once the workload
// has drained and nothing can land any more: ops of client finalReader,
// marked Final.
func (r *scenarioRun) finalReads() []op {
	store := r.direct
	if r.ledger != nil {
		store = r.ledger
	}
	var ops []op
	read := resources
	if r.sc.has(faultLateReply) {
		read = append(read[:len(read):len(read)], lateReplyResource)
	}
	for _, res := range read {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		o := op{Client: finalReader, Resource: res, Kind: opGet, Final: true, Call: now()}
		o.endGet(store.Get(ctx, res))
		cancel()
		if o.Outcome == outUnknown {
			r.t.Errorf("final read of %s: %s", res, o.Err)
		}
		ops = append(ops, o)
	}
	return ops
}

// actorSeed returns the seed of one actor of a scenario: client id, or
// 999 for the nemesis.
func actorSeed(seed int64, actor int) int64 { return seed*1000 + int64(actor) }

// setupLocks starts the lock Redis of the scenario's topology.
func (r *scenarioRun) setupLocks() {
	t := r.t
	switch r.sc.topology {
	case topoSingle:
		srv := redistest.Start(t)
		r.lock = lockTarget{Addrs: []string{srv.Addr}} // each client process gets its own proxy: lockTargetFor
		r.nem.lockServer = srv
		r.nem.lockAdmin = []*redis.Client{r.adminClient(srv.Addr)}
		r.childKeys = lockTarget{Addrs: []string{srv.Addr}}
		r.keys = directKeys{r.adminClient(srv.Addr)}
	case topoFailover:
		f := newFailoverRig(t)
		r.lock = lockTarget{Addrs: []string{f.clients.Addr()}, Replicas: r.sc.replicas, ReplicaTimeout: replicaTimeout}
		r.nem.failover = f
		r.keys = f // no child processes in this topology
	case topoSentinel:
		f := newSentinelRig(t, r.adminClient)
		r.lock = lockTarget{Addrs: f.s.SentinelAddrs(), MasterName: f.s.Name, Replicas: r.sc.replicas, ReplicaTimeout: replicaTimeout}
		r.nem.sentinel = f
		r.keys = f // no child processes in this topology
	case topoCluster:
		servers := redistest.StartClusterN(t, 3)
		r.lock = lockTarget{Cluster: true}
		for _, s := range servers {
			r.lock.Addrs = append(r.lock.Addrs, s.Addr)
			r.nem.lockAdmin = append(r.nem.lockAdmin, r.adminClient(s.Addr))
		}
		r.childKeys = r.lock // no proxies on the cluster
		keys := r.lock.newRedisClient(2)
		t.Cleanup(func() { keys.Close() })
		r.keys = directKeys{keys}
	default:
		t.Fatalf("unknown topology %q", r.sc.topology)
	}
}

// lockTargetFor returns how one lock client process (a Locker, or a
// child) with the given client ids reaches the lock Redis: on a single
// node, through a proxy of its own, so that the proxy fault can slow one
// client's calls while the others proceed.
func (r *scenarioRun) lockTargetFor(ids ...int) lockTarget {
	lt := r.lock
	lt.Addrs = append([]string(nil), r.lock.Addrs...)
	if r.sc.topology == topoSingle {
		p := redistest.NewProxy(r.t, r.nem.lockServer.Addr)
		r.nem.lockProxies = append(r.nem.lockProxies, lockProxy{proxy: p, clients: ids})
		lt.Addrs = []string{p.Addr()}
	}
	if r.sc.has(faultProxy) {
		lt.ReadTimeout = lockReadTimeout
	}
	return lt
}

// adminClient returns a direct client of a Redis server, for the nemesis
// and the stores, closed when the test ends.
func (r *scenarioRun) adminClient(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: redisTimeout, ReadTimeout: redisTimeout, WriteTimeout: redisTimeout, PoolTimeout: poolTimeout,
	})
	r.t.Cleanup(func() { c.Close() })
	return c
}

// setupStore starts the store: behind the ledger, served over HTTP
// through a proxy, or a Redis server behind a proxy for storeDirect.
func (r *scenarioRun) setupStore() {
	t := r.t
	var inner fencedlock.Store
	switch r.sc.store {
	case storeMemory:
		inner = fencedlock.NewMemoryStore()
	case storeRedis:
		inner = fencedlock.NewRedisStore(r.adminClient(redistest.Start(t).Addr))
	case storeUnfenced:
		inner = &unfencedStore{}
	case storeDirect:
		srv := redistest.Start(t)
		p := redistest.NewProxy(t, srv.Addr)
		r.nem.storeProxy, r.storeAddr = p, p.Addr()
		r.direct = fencedlock.NewRedisStore(r.adminClient(srv.Addr))
		return
	case storeSQLite, storePostgres, storeMariaDB:
		r.setupSQLStore()
		return
	default:
		t.Fatalf("unknown store %q", r.sc.store)
	}
	r.ledger = &ledger{inner: inner}
	r.storeSrv = startStoreServer(t, r.ledger)
	p := redistest.NewProxy(t, r.storeSrv.Listener.Addr().String())
	r.nem.storeProxy, r.storeAddr = p, p.Addr()
}

// newStore returns an in-process client's Store.
func (r *scenarioRun) newStore() fencedlock.Store {
	if r.sql != nil {
		return r.newSQLStore()
	}
	if r.sc.store == storeDirect {
		// No retries: a write resent after a lost reply could be refused
		// as stale although its first copy was stored (see
		// fencedlock.Store), which would be a wrong answer, not an
		// unknown one.
		c := redis.NewClient(&redis.Options{
			Addr: r.storeAddr, DialTimeout: redisTimeout, ReadTimeout: redisTimeout, WriteTimeout: redisTimeout,
			PoolTimeout: poolTimeout, MaxRetries: -1, ContextTimeoutEnabled: true,
		})
		r.closers = append(r.closers, func() { c.Close() })
		return fencedlock.NewRedisStore(c)
	}
	s := newHTTPStore(r.storeAddr)
	r.closers = append(r.closers, s.close)
	return s
}
