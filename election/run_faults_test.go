package election_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/observe"
)

// A store fenced above every token the election's Locker hands out
// refuses each term's first fence with ErrStaleToken. Run campaigns
// again after such a term, but after a pause, as after a failed
// campaign: not thousands of terms a second.
func TestRunPausesAfterAStaleTerm(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		store := fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix))
		require.NoError(t, store.Fence(ctx, "schedule", fencedlock.Token(1<<62)))
		e := election.New(elLocker(b), "stale", election.WithTTL(time.Second))
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		terms := 0
		err := e.Run(rctx, "a", func(ctx context.Context, term *election.Term) error {
			terms++
			return store.Fence(ctx, "schedule", term.Token())
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		// Pauses of 100, 200, 400 and 800 ms fit in 2s: 5 terms.
		assert.LessOrEqual(t, terms, 6, "terms in 2s")
		assert.GreaterOrEqual(t, terms, 2, "terms in 2s")
	})
}

// A campaign whose ctx is cancelled between its grant and its
// announcement is not elected, and says so as a campaign whose ctx ended
// while it waited: ctx's error and ErrNotAcquired, not a Redis outage.
// The grant is released.
func TestCampaignCancelledAfterItsGrantIsNotAnOutage(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		obs := observe.Func(func(ctx context.Context, ev observe.Event) context.Context {
			if ev.Kind == observe.AcquireEnd && ev.Outcome == observe.Acquired {
				cancel() // a shutdown begins right then
			}
			return ctx
		})
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(obs))
		e := election.New(l, "cancelled", election.WithTTL(10*time.Second))
		_, err := e.Campaign(cctx, "a")
		require.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
		assert.NotErrorIs(t, err, fencedlock.ErrUnavailable, "a caller's cancel reported as a Redis outage")
		_, err = e.Leader(ctx)
		assert.ErrorIs(t, err, election.ErrNoLeader, "the grant was not released")
		lockKey, record, _ := elKeys(l, "cancelled")
		n, err := b.Client.Exists(ctx, lockKey, record).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the lock or a record stayed")
	})
}

// Leader with a ctx that has ended sends nothing and says so: ctx's
// error, not a Redis outage.
func TestLeaderWithAnEndedCtxSendsNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := election.New(elLocker(b), "ended")
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := e.Leader(cctx)
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, fencedlock.ErrUnavailable, "a caller's cancel reported as a Redis outage")
	})
}

// Run stopped by a ctx cancelled with a cause returns an error that
// wraps the cause, and ctx's error.
func TestRunKeepsItsCtxsCause(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		e := election.New(elLocker(b), "cause", election.WithTTL(time.Second))
		holder, err := e.Campaign(ctx, "holder")
		require.NoError(t, err)
		defer holder.Resign(ctx)
		shutdown := errors.New("shutdown: SIGTERM")
		rctx, cancel := context.WithCancelCause(ctx)
		time.AfterFunc(100*time.Millisecond, func() { cancel(shutdown) })
		err = e.Run(rctx, "b", func(context.Context, *election.Term) error { return nil })
		assert.ErrorIs(t, err, shutdown, "Run lost its ctx's cause")
		assert.ErrorIs(t, err, context.Canceled)
	})
}

// A term that Run loses is not reported to the Locker's Observer as a
// failed Release: nobody released it.
func TestRunDoesNotReportALostTermAsAFailedRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		var events eventLog
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(observe.Func(events.observe)))
		lockKey, record, _ := elKeys(l, "lost")
		e := election.New(l, "lost", election.WithTTL(600*time.Millisecond))
		rctx, cancel := context.WithCancel(ctx)
		err := e.Run(rctx, "a", func(fctx context.Context, term *election.Term) error {
			require.NoError(t, b.Client.Del(ctx, lockKey).Err())
			<-fctx.Done()
			cancel()
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		for _, ev := range events.of(observe.ReleaseEnd) {
			assert.NoError(t, ev.Err, "a lost term reported as a failed Release")
		}
		n, err := b.Client.Exists(ctx, record).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the lost term's record stayed")
	})
}

// MISCONF: Redis refuses writes after a failed background save (a fork
// that failed for memory, a full disk) and takes them again once a later
// save succeeds. Run rides it out, as an outage.
func TestRunRidesOutMisconf(t *testing.T) {
	s := redistest.Start(t)
	ctx := elCtx(t)
	admin := s.Client(t)
	dir, err := admin.ConfigGet(ctx, "dir").Result()
	require.NoError(t, err)
	// A save whose rename fails: its target is a directory, not empty.
	blocked := filepath.Join(dir["dir"], "dump.rdb")
	require.NoError(t, os.MkdirAll(filepath.Join(blocked, "x"), 0o755))
	require.NoError(t, admin.ConfigSet(ctx, "save", "3600 1").Err())
	require.NoError(t, admin.BgSave(ctx).Err())
	require.Eventually(t, func() bool {
		return admin.Set(ctx, "probe", "1", 0).Err() != nil
	}, 5*time.Second, 20*time.Millisecond, "no MISCONF")

	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { c.Close() })
	e := election.New(fencedlock.New(c), "office", election.WithTTL(time.Second))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- e.Run(rctx, "run", func(context.Context, *election.Term) error { return errors.New("elected") })
	}()
	// The disk frees up; the next save succeeds.
	time.Sleep(time.Second)
	require.NoError(t, os.RemoveAll(blocked))
	require.NoError(t, admin.BgSave(ctx).Err())
	assert.EqualError(t, <-ran, "elected", "Run gave up on a MISCONF that a pause ended")
}

// A plain *redis.Client at one node of a Cluster gets MOVED for every key
// of a slot another node serves, for good: Run returns it, instead of
// campaigning until its ctx ends.
func TestRunReturnsARedirectToAPlainClient(t *testing.T) {
	servers := redistest.StartClusterN(t, 2)
	ctx := elCtx(t)
	c := redis.NewClient(&redis.Options{Addr: servers[0].Addr})
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c)
	// A name whose keys node 1 serves.
	name := ""
	for i := 0; name == ""; i++ {
		n := fmt.Sprintf("office%d", i)
		lock, _, _ := elKeys(l, n)
		slot, err := c.ClusterKeySlot(ctx, lock).Result()
		require.NoError(t, err)
		if slot >= 8192 {
			name = n
		}
	}
	e := election.New(l, name, election.WithTTL(time.Second))
	rctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	start := time.Now()
	err := e.Run(rctx, "run", func(context.Context, *election.Term) error {
		t.Error("fn ran")
		return nil
	})
	require.Error(t, err)
	assert.ErrorContains(t, err, "MOVED")
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "Run campaigned on MOVED until its ctx ended")
	assert.Less(t, time.Since(start), 4*time.Second)
}

// A term whose lease runs out by the local clock while Redis kept its
// key (the heartbeat's refresh ran there, but its answer came too late)
// is lost; Run deletes the key, if it is still the term's, so that the
// next campaign, its own here, is elected at once instead of waiting for
// the key to expire. The Observer sees no Release, as for any lost term.
func TestRunWithdrawsATermThatRanOut(t *testing.T) {
	b := redistest.Real(t) // the key's expiry, and replies held back
	ctx := elCtx(t)
	l, late, events := lateLocker(t, b)
	lockKey, _, _ := elKeys(l, "ranout")
	// a heartbeat every second: its first refresh, sent a second in,
	// keeps the key until 4 s, and its answer comes at 4 s, after the
	// lease ran out (2.85 s)
	e := election.New(l, "ranout", election.WithTTL(3*time.Second))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var terms int
	var lost, elected time.Time
	var kept time.Duration
	var first fencedlock.Token
	err := e.Run(rctx, "a", func(fctx context.Context, term *election.Term) error {
		terms++
		if terms > 1 {
			elected = time.Now()
			cancel()
			return nil
		}
		first = term.Token()
		late.on.Store(true)
		<-fctx.Done()
		lost = time.Now()
		late.on.Store(false)
		assert.ErrorIs(t, term.Err(), fencedlock.ErrLockLost)
		assert.ErrorContains(t, term.Err(), "TTL ran out", "the term must be lost by the local clock")
		kept = b.Client.PTTL(ctx, lockKey).Val()
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, terms)
	require.Greater(t, kept, 500*time.Millisecond, "the late refresh did not keep the key: the test tests nothing")
	assert.Less(t, elected.Sub(lost), 500*time.Millisecond,
		"the next term began %v after the loss; the key, kept %v more, was not deleted", elected.Sub(lost), kept)
	for _, ev := range events.of(observe.ReleaseEnd) {
		assert.NotEqual(t, uint64(first), ev.Token, "the lost term reported as a Release: %v", ev.Err)
	}
}

// lateLocker returns a Locker of b's prefix whose client holds back the
// replies to scripts for 3 s while late is on, and the log of the events
// its Observer was given.
func lateLocker(t *testing.T, b *redistest.Backend) (l *fencedlock.Locker, late *lateReplies, events *eventLog) {
	late = &lateReplies{delay: 3 * time.Second}
	client := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
	client.AddHook(late)
	t.Cleanup(func() { client.Close() })
	events = new(eventLog)
	return fencedlock.New(client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(observe.Func(events.observe))), late, events
}

// lateReplies is a client hook that holds back the replies to scripts
// (EVALSHA) that Redis ran for delay while on (not a NOSCRIPT, after
// which the client sends the script).
type lateReplies struct {
	on    atomic.Bool
	delay time.Duration
}

func (h *lateReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.on.Load() && cmd.Name() == "evalsha" && err == nil {
			time.Sleep(h.delay)
		}
		return err
	}
}

func (h *lateReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The key that Run withdraws for a term that ran out goes at once to the
// next candidate queued for it (another process's, here another
// Locker's), not after the key's expiry; the Observer of the lost term's
// Locker sees that hand-over, and no Release.
func TestRunHandsATermThatRanOutToTheNextCandidate(t *testing.T) {
	b := redistest.Real(t)
	ctx := elCtx(t)
	la, late, events := lateLocker(t, b)
	lb := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
	lockKey, _, _ := elKeys(la, "handon")
	ea := election.New(la, "handon", election.WithTTL(3*time.Second))
	eb := election.New(lb, "handon", election.WithTTL(3*time.Second))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type campaign struct {
		term *election.Term
		err  error
		at   time.Time
	}
	bDone := make(chan campaign, 1)
	var lost time.Time
	var kept time.Duration
	var terms int
	err := ea.Run(rctx, "a", func(fctx context.Context, term *election.Term) error {
		terms++
		if terms > 1 {
			return nil // not reached: b holds the office
		}
		late.on.Store(true)
		go func() {
			tb, err := eb.Campaign(ctx, "b")
			bDone <- campaign{tb, err, time.Now()}
		}()
		<-fctx.Done()
		lost = time.Now()
		late.on.Store(false)
		assert.ErrorContains(t, term.Err(), "TTL ran out", "the term must be lost by the local clock")
		kept = b.Client.PTTL(ctx, lockKey).Val()
		go func() {
			// a's Run campaigns again, behind b: end it once b is elected
			c := <-bDone
			bDone <- c
			cancel()
		}()
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	c := <-bDone
	require.NoError(t, c.err)
	t.Cleanup(func() { _ = c.term.Resign(context.Background()) })
	require.Greater(t, kept, 500*time.Millisecond, "the late refresh did not keep the key: the test tests nothing")
	assert.Less(t, c.at.Sub(lost), 500*time.Millisecond,
		"b was elected %v after a's term was lost; the key, kept %v more, was not handed on", c.at.Sub(lost), kept)
	assert.Empty(t, events.of(observe.ReleaseEnd), "the lost term reported as a Release")
	handOvers := events.of(observe.HandOver)
	if assert.Len(t, handOvers, 1, "the hand-over of the lost term's key to b") {
		assert.Equal(t, uint64(c.term.Token()), handOvers[0].Token, "the hand-over's token")
	}
}

// eventLog records the events an Observer is given (observe.Func of its
// observe method).
type eventLog struct {
	mu     sync.Mutex
	events []observe.Event
}

func (l *eventLog) observe(ctx context.Context, ev observe.Event) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
	return ctx
}

// of returns the events of kind recorded so far.
func (l *eventLog) of(kind observe.Kind) []observe.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var of []observe.Event
	for _, ev := range l.events {
		if ev.Kind == kind {
			of = append(of, ev)
		}
	}
	return of
}
