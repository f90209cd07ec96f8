package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
)

// The workload: each client loops over a few resources. One cycle
// acquires a lock (TryAcquire with retries, or the waiting Acquire with a
// deadline, some with a heartbeat), reads the resource from the store,
// sometimes sleeps past the TTL (a GC pause: no heartbeat runs, the lock
// expires and another client takes it), writes a unique value with the
// lock's token once or twice, and releases. Every call is recorded with
// its outcome; errors are expected and are part of the history. The
// append workload (append_test.go) replaces the read and the writes with
// one fencedlock.Update.

// clientSpec is what one client does. It is sent to child processes as
// JSON.
type clientSpec struct {
	ID        int           // unique in the scenario; values are "c<ID>-<n>"
	Seed      int64         // of the client's math/rand source
	Resources []string      // locked and written, chosen at random per cycle
	TTL       time.Duration // of every lock
	// PauseEvery > 0 makes the client sleep past the TTL between its read
	// and its write in one cycle of PauseEvery, on average, with a lock
	// without heartbeat: the lock expires under it.
	PauseEvery int
	// Heartbeat makes the waiting acquires use WithHeartbeat (not in the
	// cycles that pause, where a heartbeat in this process would keep the
	// lock alive: only a whole-process stop defeats it).
	Heartbeat bool
	// WorkMax bounds the work (a sleep) the client does before each write
	// while it holds the lock: the longer, the likelier a fault finds it
	// holding one.
	WorkMax time.Duration
	StopAt  int64 // wall clock, UnixNano: no cycle starts after it
	// Workload is what a cycle does: write unique values
	// (workloadRegister), or append items (workloadAppend,
	// workloadGetPut: see append_test.go).
	Workload string
}

// lockTarget says how clients reach the lock Redis.
type lockTarget struct {
	Addrs   []string
	Cluster bool // a Redis Cluster: Addrs are its nodes
	// MasterName, when set, is the name of the master for the Sentinels
	// at Addrs: the client is go-redis's failover client.
	MasterName string
	// Replicas > 0 makes the Lockers wait for that many replicas to
	// confirm each grant (fencedlock.WithReplicas), for ReplicaTimeout.
	Replicas       int
	ReplicaTimeout time.Duration
	// ReadTimeout is the clients' ReadTimeout; 0: redisTimeout. The
	// proxy fault needs it longer (lockReadTimeout), so that a grant
	// delayed past its TTL still reaches its client.
	ReadTimeout time.Duration
}

// newLocker returns a Locker on client with the target's options.
func (lt lockTarget) newLocker(client redis.UniversalClient) *fencedlock.Locker {
	if lt.Replicas > 0 {
		return fencedlock.New(client, fencedlock.WithReplicas(lt.Replicas, lt.ReplicaTimeout))
	}
	return fencedlock.New(client)
}

// Timeouts of every Redis connection of the suite: small, so that a
// stalled network fails calls instead of hanging the run.
const (
	redisTimeout = 500 * time.Millisecond
	poolTimeout  = time.Second
)

// newRedisClient returns a client of the lock Redis. maxRetries is
// go-redis's MaxRetries (-1: none).
func (lt lockTarget) newRedisClient(maxRetries int) redis.UniversalClient {
	readTimeout := redisTimeout
	if lt.ReadTimeout > 0 {
		readTimeout = lt.ReadTimeout
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 lt.Addrs,
		IsClusterMode:         lt.Cluster, // else one address: a *redis.Client
		MasterName:            lt.MasterName,
		DialTimeout:           redisTimeout,
		ReadTimeout:           readTimeout,
		WriteTimeout:          redisTimeout,
		PoolTimeout:           poolTimeout,
		MaxRetries:            maxRetries,
		ContextTimeoutEnabled: true,
	})
}

// Bounds of one cycle's calls.
const (
	acquireFor   = 2 * time.Second        // TryAcquire retries, or Acquire waits, this long: > lockReadTimeout
	releaseFor   = 500 * time.Millisecond // the Release call
	storeCallFor = time.Second            // each Get and Put (the HTTP client's own timeout is shorter)
)

// A worker runs one client's loop. It is not safe for concurrent use: one
// goroutine runs it.
type worker struct {
	spec   clientSpec
	locker *fencedlock.Locker // may be shared with other workers
	store  fencedlock.Store
	rec    *recorder
	rng    *rand.Rand
	seq    int // values written so far
	// keys reads the lock keys of returned Locks for checker D; nil: not
	// checked.
	keys keyReader
	// local is what the goroutines of an in-process Locker share (for
	// the late-reply fault); nil in child processes.
	local *lockerState
}

func newWorker(spec clientSpec, locker *fencedlock.Locker, store fencedlock.Store, rec *recorder, keys keyReader, local *lockerState) *worker {
	return &worker{spec: spec, locker: locker, store: store, rec: rec, rng: rand.New(rand.NewSource(spec.Seed)), keys: keys, local: local}
}

// run loops until StopAt (wall clock) or until ctx is done (the scenario
// was aborted).
func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil && now() < w.spec.StopAt {
		if order := w.local.take(); order != nil {
			w.lateReplyCycle(ctx, order)
			continue
		}
		if w.spec.Workload != workloadRegister {
			w.appendCycle(ctx)
			continue
		}
		w.cycle(ctx)
	}
}

func (w *worker) cycle(ctx context.Context) {
	res := w.spec.Resources[w.rng.Intn(len(w.spec.Resources))]
	pause := w.spec.PauseEvery > 0 && w.rng.Intn(w.spec.PauseEvery) == 0
	lock := w.acquire(ctx, res, w.spec.TTL, w.spec.Heartbeat && !pause)
	if lock == nil {
		w.sleep(ctx, time.Duration(1+w.rng.Intn(20))*time.Millisecond)
		return
	}
	w.get(ctx, res)
	if pause {
		// Past the TTL: the lock expires while this client does nothing,
		// as in a GC pause between a check and a write.
		d := w.spec.TTL + time.Duration(50+w.rng.Intn(200))*time.Millisecond
		start := now()
		w.sleep(ctx, d)
		w.rec.add(op{Client: w.spec.ID, Resource: res, Kind: opPause, Call: start, Return: now(), Outcome: outOK})
	}
	for i, n := 0, 1+w.rng.Intn(2); i < n && ctx.Err() == nil; i++ {
		// Some work before each write, so that the faults often find the
		// client holding a lock.
		w.sleep(ctx, time.Millisecond+time.Duration(w.rng.Int63n(int64(w.spec.WorkMax))))
		if w.put(ctx, res, lock.Token(), pause) != outOK {
			break
		}
	}
	w.release(ctx, lock, releaseFor, false)
}

// sleep sleeps for d or until ctx is done.
func (w *worker) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// acquire gets the lock on res for ttl, or returns nil after acquireFor.
// Half the cycles call TryAcquire again and again; the others wait in
// Acquire.
func (w *worker) acquire(ctx context.Context, res string, ttl time.Duration, heartbeat bool) *fencedlock.Lock {
	if w.rng.Intn(2) == 0 {
		return w.acquireWait(ctx, res, ttl, heartbeat)
	}
	ctx, cancel := context.WithTimeout(ctx, acquireFor)
	defer cancel()
	for ctx.Err() == nil {
		epoch := w.epoch()
		o := op{Client: w.spec.ID, Resource: res, Kind: opAcquire, Call: now()}
		lock, err := w.locker.TryAcquire(ctx, res, ttl)
		w.recordAcquire(o, lock, err, epoch)
		if err == nil {
			return lock
		}
		w.sleep(ctx, time.Duration(2+w.rng.Intn(15))*time.Millisecond)
	}
	return nil
}

// acquireWait waits in Acquire for the lock on res, at most acquireFor.
func (w *worker) acquireWait(ctx context.Context, res string, ttl time.Duration, heartbeat bool) *fencedlock.Lock {
	ctx, cancel := context.WithTimeout(ctx, acquireFor)
	defer cancel()
	var opts []fencedlock.AcquireOption
	if heartbeat {
		opts = append(opts, fencedlock.WithHeartbeat(0))
	}
	epoch := w.epoch()
	o := op{Client: w.spec.ID, Resource: res, Kind: opAcquire, Wait: true, Call: now()}
	w.local.enter(res)
	lock, err := w.locker.Acquire(ctx, res, ttl, opts...)
	w.local.leave(res)
	w.recordAcquire(o, lock, err, epoch)
	return lock
}

// epoch is the key reader's epoch before a lock call.
func (w *worker) epoch() uint64 {
	if w.keys == nil {
		return 0
	}
	return w.keys.epoch()
}

func (w *worker) recordAcquire(o op, lock *fencedlock.Lock, err error, epoch uint64) {
	o.Return = now()
	switch {
	case err == nil:
		o.Outcome, o.Token = outOK, lock.Token()
		// At once, before anything else: checker D.
		checkKey(w.keys, w.locker, lock, epoch, &o)
	case errors.Is(err, fencedlock.ErrNotAcquired):
		o.Outcome = outFail
	case errors.Is(err, fencedlock.ErrNotReplicated):
		o.Outcome, o.Err = outNotReplicated, err.Error()
	default:
		o.Outcome, o.Err = outUnknown, err.Error()
	}
	w.rec.add(o)
}

func (w *worker) get(ctx context.Context, res string) {
	ctx, cancel := context.WithTimeout(ctx, storeCallFor)
	defer cancel()
	o := op{Client: w.spec.ID, Resource: res, Kind: opGet, Call: now()}
	o.endGet(w.store.Get(ctx, res))
	w.rec.add(o)
}

// put writes a fresh unique value with token and returns the outcome.
func (w *worker) put(ctx context.Context, res string, token fencedlock.Token, paused bool) outcome {
	ctx, cancel := context.WithTimeout(ctx, storeCallFor)
	defer cancel()
	w.seq++
	value := fmt.Sprintf("c%d-%d", w.spec.ID, w.seq)
	o := op{Client: w.spec.ID, Resource: res, Kind: opPut, Token: token, Value: value, Paused: paused, Call: now()}
	o.endPut(w.store.Put(ctx, res, token, []byte(value)))
	w.rec.add(o)
	return o.Outcome
}

// release calls Release within d, even when ctx is done (the scenario is
// ending), on a detached context, as the library's docs advise. short
// marks a call whose reply is delayed past d (the late-reply fault). It
// returns Release's error.
func (w *worker) release(ctx context.Context, lock *fencedlock.Lock, d time.Duration, short bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	o := op{Client: w.spec.ID, Resource: lock.Resource(), Kind: opRelease, Token: lock.Token(), Short: short, Call: now()}
	o.LocalWaiter = w.local.waitingFor(lock.Resource()) > 0
	err := lock.Release(ctx)
	o.Return = now()
	o.endLockCall(err)
	w.rec.add(o)
	return err
}

// refresh calls Refresh for ttl within d; short as for release.
func (w *worker) refresh(ctx context.Context, lock *fencedlock.Lock, ttl, d time.Duration, short bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	o := op{Client: w.spec.ID, Resource: lock.Resource(), Kind: opRefresh, Token: lock.Token(), Short: short, Call: now()}
	err := lock.Refresh(ctx, ttl)
	o.Return = now()
	o.endLockCall(err)
	w.rec.add(o)
	return err
}

// endLockCall records the answer of a Release or a Refresh: done, the
// lock lost (or released before), or unknown.
func (o *op) endLockCall(err error) {
	switch {
	case err == nil:
		o.Outcome = outOK
	case errors.Is(err, fencedlock.ErrLockLost), errors.Is(err, fencedlock.ErrReleased):
		o.Outcome = outFail
	default:
		o.Outcome, o.Err = outUnknown, err.Error()
	}
}
