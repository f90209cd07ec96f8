package election_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// elCampaign starts Campaign in a goroutine.
func elCampaign(ctx context.Context, e *election.Election, value string) <-chan elResult {
	done := make(chan elResult, 1)
	go func() {
		term, err := e.Campaign(ctx, value)
		done <- elResult{term, err, time.Now()}
	}()
	return done
}

type elResult struct {
	term *election.Term
	err  error
	at   time.Time
}

func elAwait(t *testing.T, done <-chan elResult) elResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("campaign still waiting after 10s")
		return elResult{}
	}
}

func elRequireWaiting(t *testing.T, done <-chan elResult) {
	t.Helper()
	select {
	case r := <-done:
		t.Fatalf("campaign returned %v, %v; want it still waiting", r.term, r.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// The first candidate is elected; the next waits, and is elected as soon
// as the leader resigns, with a higher token; Leader follows.
func TestCampaignResignAndLeader(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		a := election.New(elLocker(b), "office", election.WithTTL(10*time.Second))
		bb := election.New(elLocker(b), "office", election.WithTTL(10*time.Second))

		_, err := a.Leader(ctx)
		require.ErrorIs(t, err, election.ErrNoLeader)

		first, err := a.Campaign(ctx, "a")
		require.NoError(t, err)
		assert.Equal(t, "a", first.Value())
		assert.NoError(t, first.Err())
		leader, err := bb.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, election.Leader{Value: "a", Token: first.Token()}, leader)

		next := elCampaign(ctx, bb, "b")
		elRequireWaiting(t, next)
		resigned := time.Now()
		require.NoError(t, first.Resign(ctx))
		r := elAwait(t, next)
		require.NoError(t, r.err)
		// The release wakes the next candidate: no timer is involved
		// (the fallback timer of a waiter is 1s or more).
		assert.Less(t, r.at.Sub(resigned), 500*time.Millisecond, "the next candidate was not elected promptly")
		second := r.term
		assert.Greater(t, second.Token(), first.Token())
		assert.ErrorIs(t, first.Err(), fencedlock.ErrReleased)
		select {
		case <-first.Done():
		default:
			t.Error("Done not closed after Resign")
		}
		assert.ErrorIs(t, first.Resign(ctx), fencedlock.ErrReleased, "a second Resign")

		leader, err = a.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, election.Leader{Value: "b", Token: second.Token()}, leader)
		require.NoError(t, second.Resign(ctx))
		_, err = a.Leader(ctx)
		require.ErrorIs(t, err, election.ErrNoLeader)
		elNoGoroutinesLeft(t)
	})
}

// A resigned term leaves no leader record behind, and neither does a
// term that Run ends (its ctx ended) or a term lost while Run leads:
// once the election is idle, only the lock's counter stays.
func TestEndedTermsLeaveNoRecord(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		l := elLocker(b)
		lockKey, record, _ := elKeys(l, "tidy")
		e := election.New(l, "tidy", election.WithTTL(600*time.Millisecond))
		recorded := func() bool {
			n, err := b.Client.Exists(ctx, record).Result()
			require.NoError(t, err)
			return n == 1
		}

		term, err := e.Campaign(ctx, "a")
		require.NoError(t, err)
		require.True(t, recorded(), "no record while the term lasts")
		require.NoError(t, term.Resign(ctx))
		assert.False(t, recorded(), "the record stayed after Resign")

		// Run: its ctx ends while fn leads.
		rctx, cancel := context.WithCancel(ctx)
		err = e.Run(rctx, "b", func(fctx context.Context, term *election.Term) error {
			assert.True(t, recorded(), "no record while Run's term lasts")
			cancel()
			<-fctx.Done()
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		assert.False(t, recorded(), "the record stayed after Run's ctx ended")

		// Run: its term is lost (the lock deleted by hand); Run's ctx
		// ends after the loss, before it would campaign again.
		rctx, cancel = context.WithCancel(ctx)
		err = e.Run(rctx, "c", func(fctx context.Context, term *election.Term) error {
			require.NoError(t, b.Client.Del(ctx, lockKey).Err())
			<-fctx.Done()
			assert.ErrorIs(t, context.Cause(fctx), fencedlock.ErrLockLost)
			cancel()
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		assert.False(t, recorded(), "the record of a lost term stayed")
		elNoGoroutinesLeft(t)
	})
}

// A campaign whose ctx ends while it waits returns ctx's error and is
// never elected: when the leader resigns, the office stays vacant.
func TestCancelledCampaignIsNeverElected(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		l := elLocker(b)
		e := election.New(l, "cancelled")
		leader, err := e.Campaign(ctx, "leader")
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		waiting := elCampaign(cctx, election.New(elLocker(b), "cancelled"), "quitter")
		elRequireWaiting(t, waiting)
		cancel()
		r := elAwait(t, waiting)
		require.ErrorIs(t, r.err, context.Canceled)
		require.Nil(t, r.term)
		require.NoError(t, leader.Resign(ctx))
		// Give a late grant every chance to appear.
		time.Sleep(100 * time.Millisecond)
		_, err = e.Leader(ctx)
		assert.ErrorIs(t, err, election.ErrNoLeader)
		info, err := l.Inspect(ctx, "cancelled")
		require.NoError(t, err)
		assert.False(t, info.Held, "the office was handed to a cancelled campaign")
		elNoGoroutinesLeft(t)
	})
}

// A leader cut off from Redis learns that its term ended before the next
// candidate is elected, and a fenced store refuses its late write.
func TestLeaderCutOffEndsBeforeTheSuccessor(t *testing.T) {
	b := redistest.Real(t)
	ctx := elCtx(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	cut := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer cut.Close()
	const ttl = 600 * time.Millisecond
	old := election.New(fencedlock.New(cut, fencedlock.WithPrefix(b.Prefix)), "cutoff", election.WithTTL(ttl))
	successor := election.New(elLocker(b), "cutoff", election.WithTTL(ttl))
	store := fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix))

	term, err := old.Campaign(ctx, "old")
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, "job", term.Token(), []byte("old 1")))
	next := elCampaign(ctx, successor, "new")
	elRequireWaiting(t, next)

	p.Pause() // the leader's heartbeats stall
	var ended time.Time
	select {
	case <-term.Done():
		ended = time.Now()
	case <-time.After(5 * time.Second):
		t.Fatal("the cut-off leader's term did not end")
	}
	assert.ErrorIs(t, term.Err(), fencedlock.ErrLockLost)
	r := elAwait(t, next)
	require.NoError(t, r.err)
	assert.True(t, ended.Before(r.at), "the old term ended at %v, after the successor was elected at %v", ended, r.at)
	t.Logf("the old term ended %v before the successor was elected", r.at.Sub(ended))
	require.NoError(t, store.Put(ctx, "job", r.term.Token(), []byte("new 1")))

	p.Resume()
	err = store.Put(ctx, "job", term.Token(), []byte("old 2"))
	var stale *fencedlock.StaleTokenError
	require.ErrorAs(t, err, &stale, "the old leader's late write was accepted")
	v, _, err := store.Get(ctx, "job")
	require.NoError(t, err)
	assert.Equal(t, "new 1", string(v))
	require.NoError(t, r.term.Resign(ctx))
	elNoGoroutinesLeft(t)
}

// Three candidates on Run: terms never overlap, tokens rise, the office
// passes between them, and Run returns ctx's error when ctx ends.
func TestRunThreeCandidates(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var (
			mu      sync.Mutex
			active  int
			overlap bool
			tokens  []fencedlock.Token
			served  = map[string]int{}
			wg      sync.WaitGroup
			results = make(chan error, 3)
		)
		for i := 0; i < 3; i++ {
			name := fmt.Sprintf("candidate-%d", i)
			e := election.New(elLocker(b), "run", election.WithTTL(time.Second))
			wg.Add(1)
			go func() {
				defer wg.Done()
				results <- e.Run(rctx, name, func(ctx context.Context, term *election.Term) error {
					mu.Lock()
					active++
					overlap = overlap || active > 1
					tokens = append(tokens, term.Token())
					served[name]++
					n := len(tokens)
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
					mu.Lock()
					active--
					mu.Unlock()
					if n >= 30 {
						cancel()
					}
					return nil
				})
			}()
		}
		wg.Wait()
		close(results)
		for err := range results {
			assert.ErrorIs(t, err, context.Canceled)
		}
		mu.Lock()
		defer mu.Unlock()
		assert.False(t, overlap, "two terms ran fn at once")
		for i := 1; i < len(tokens); i++ {
			assert.Greater(t, tokens[i], tokens[i-1], "term %d's token", i)
		}
		assert.GreaterOrEqual(t, len(served), 2, "the office never passed between candidates: %v", served)
		elNoGoroutinesLeft(t)
	})
}

// Run returns fn's error when fn fails while its term lasts, after
// resigning; it campaigns again when fn returns because its term was
// lost, with the cause matching ErrLockLost.
func TestRunErrors(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		l := elLocker(b)
		e := election.New(l, "runerr", election.WithTTL(600*time.Millisecond))
		boom := errors.New("boom")
		err := e.Run(ctx, "x", func(context.Context, *election.Term) error { return boom })
		require.Equal(t, boom, err)
		_, err = e.Leader(ctx)
		require.ErrorIs(t, err, election.ErrNoLeader, "Run did not resign")

		var calls int32
		var cause error
		err = e.Run(ctx, "y", func(fctx context.Context, term *election.Term) error {
			if atomic.AddInt32(&calls, 1) == 1 {
				// Another owner takes the key: the heartbeat finds the
				// term lost.
				require.NoError(t, b.Client.Set(ctx, mustKey(l.Key("runerr", "lock")), "thief:1", 200*time.Millisecond).Err())
				<-fctx.Done()
				cause = context.Cause(fctx)
				// The thief goes (miniredis does not expire keys).
				require.NoError(t, b.Client.Del(ctx, mustKey(l.Key("runerr", "lock"))).Err())
				return fctx.Err()
			}
			return boom
		})
		require.Equal(t, boom, err, "Run stopped at the lost term")
		assert.EqualValues(t, 2, atomic.LoadInt32(&calls))
		assert.ErrorIs(t, cause, fencedlock.ErrLockLost)

		// A stale write says that a later term wrote: Run campaigns
		// again rather than returning it.
		atomic.StoreInt32(&calls, 0)
		err = e.Run(ctx, "z", func(context.Context, *election.Term) error {
			if atomic.AddInt32(&calls, 1) == 1 {
				return fmt.Errorf("writing the report: %w", fencedlock.ErrStaleToken)
			}
			return boom
		})
		require.Equal(t, boom, err, "Run stopped at a stale write")
		assert.EqualValues(t, 2, atomic.LoadInt32(&calls))
		elNoGoroutinesLeft(t)
	})
}

// Bad input is ErrInvalidArgument from every call.
func TestBadInput(t *testing.T) {
	b := redistest.Mini(t)
	ctx := elCtx(t)
	l := elLocker(b)
	for name, e := range map[string]*election.Election{
		"nil locker":     election.New(nil, "x"),
		"empty name":     election.New(l, ""),
		"short TTL":      election.New(l, "x", election.WithTTL(time.Millisecond)),
		"negative TTL":   election.New(l, "x", election.WithTTL(-time.Second)),
		"long heartbeat": election.New(l, "x", election.WithTTL(time.Second), election.WithHeartbeat(600*time.Millisecond)),
		"negative beat":  election.New(l, "x", election.WithHeartbeat(-1)),
		"10ns beat":      election.New(l, "x", election.WithHeartbeat(10)),
		"nil election":   nil,
	} {
		_, err := e.Campaign(ctx, "v")
		assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, "%s: Campaign", name)
		_, err = e.Leader(ctx)
		assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, "%s: Leader", name)
		err = e.Run(ctx, "v", func(context.Context, *election.Term) error { return nil })
		assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, "%s: Run", name)
		_, open := <-e.Observe(ctx)
		assert.False(t, open, "%s: Observe's channel open", name)
	}
	e := election.New(l, "x")
	_, err := e.Campaign(ctx, strings.Repeat("v", election.MaxValueLen+1))
	assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument)
	assert.ErrorIs(t, e.Run(ctx, "v", nil), fencedlock.ErrInvalidArgument)
	var term *election.Term
	assert.ErrorIs(t, term.Resign(ctx), fencedlock.ErrInvalidArgument)
	assert.ErrorIs(t, term.Err(), fencedlock.ErrInvalidArgument)
	assert.Zero(t, term.Token())
	select {
	case <-term.Done():
	default:
		t.Error("a nil Term's Done is open")
	}
}

// Without pub/sub (a user with no channel, or no @pubsub command) a
// candidate is elected and announced all the same: Campaign succeeds and
// its record is written, and no failed Campaign leaves a record behind;
// a lost record is written again.
// A waiting candidate is elected when the leader resigns.
func TestCampaignWithoutPubSub(t *testing.T) {
	elPubSubDenied(t, func(t *testing.T, admin, user *redis.Client) {
		ctx := elCtx(t)
		l := fencedlock.New(user)
		e := election.New(l, "office", election.WithTTL(time.Second))
		_, record, _ := elKeys(l, "office")
		term, err := e.Campaign(ctx, "a")
		if err != nil {
			rec, gerr := admin.Get(ctx, record).Result()
			t.Fatalf("Campaign failed: %v; the leader record holds %q (%v)", err, rec, gerr)
		}
		leader, err := e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, election.Leader{Value: "a", Token: term.Token()}, leader)
		// A lost record is written again, though not published.
		require.NoError(t, admin.Del(ctx, record).Err())
		require.Eventually(t, func() bool {
			rec, err := admin.Get(ctx, record).Result()
			return err == nil && rec == fmt.Sprintf("%d:a", term.Token())
		}, 5*time.Second, 10*time.Millisecond, "the lost record is not written again")

		// A candidate of the user waits for a leader of the default user,
		// and is elected when it resigns.
		ea := election.New(fencedlock.New(admin), "office", election.WithTTL(time.Second))
		require.NoError(t, term.Resign(ctx))
		first, err := ea.Campaign(ctx, "admin")
		require.NoError(t, err)
		next := elCampaign(ctx, e, "b")
		elRequireWaiting(t, next)
		require.NoError(t, first.Resign(ctx))
		r := elAwait(t, next)
		require.NoError(t, r.err)
		leader, err = e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, election.Leader{Value: "b", Token: r.term.Token()}, leader)
		require.NoError(t, r.term.Resign(ctx))
		elNoGoroutinesLeft(t)
	})
}

// Without pub/sub Run is elected and runs fn.
func TestRunWithoutPubSub(t *testing.T) {
	elPubSubDenied(t, func(t *testing.T, admin, user *redis.Client) {
		ctx := elCtx(t)
		e := election.New(fencedlock.New(user), "office", election.WithTTL(time.Second))
		boom := errors.New("boom")
		var calls int32
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := e.Run(rctx, "run", func(context.Context, *election.Term) error {
			atomic.AddInt32(&calls, 1)
			return boom
		})
		assert.Equal(t, boom, err, "Run's error")
		assert.EqualValues(t, 1, atomic.LoadInt32(&calls), "fn's runs")
		elNoGoroutinesLeft(t)
	})
}

// Run returns Redis's refusal of a command to the client's ACL user, at
// once and naming the command, instead of campaigning again for ever.
func TestRunReturnsAnACLRefusal(t *testing.T) {
	_, user := elACLUser(t, "+@all", "-time", "~*", "&*")
	// elACLUser's client fails the test on a script's error: this test
	// expects one.
	noHook := redis.NewClient(user.Options())
	t.Cleanup(func() { noHook.Close() })
	ctx := elCtx(t)
	e := election.New(fencedlock.New(noHook), "office", election.WithTTL(time.Second))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err := e.Run(rctx, "run", func(context.Context, *election.Term) error {
		t.Error("fn ran, though the user may not run TIME")
		return nil
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "Run must not campaign again until its ctx ends")
	assert.Contains(t, err.Error(), "TIME")
	assert.Contains(t, err.Error(), "docs/redis.md#acl")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// Run returns a wrong password, or none where one is needed, at once,
// instead of campaigning again for ever: it is no outage, and no pause
// ends it.
func TestRunReturnsAWrongPassword(t *testing.T) {
	s := redistest.Start(t)
	ctx := elCtx(t)
	admin := s.Client(t)
	require.NoError(t, admin.ConfigSet(ctx, "requirepass", "secret").Err())
	for _, password := range []string{"wrong", ""} {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: password})
		t.Cleanup(func() { c.Close() })
		err := elRunReturnsAtOnce(t, ctx, c, fmt.Sprintf("password %q", password))
		assert.ErrorIs(t, err, fencedlock.ErrUnavailable, "password %q", password)
	}
}

// Run returns at once, instead of campaigning again until its ctx ends,
// with a client that is closed, or that gives a password to a server
// that has none, where the server refuses it (Redis before 6; later
// ones take any password for a default user without one).
func TestRunReturnsWhatNoPauseEnds(t *testing.T) {
	s := redistest.Start(t)
	ctx := elCtx(t)
	closed := redis.NewClient(&redis.Options{Addr: s.Addr})
	closed.Close()
	elRunReturnsAtOnce(t, ctx, closed, "a closed client")
	unwanted := redis.NewClient(&redis.Options{Addr: s.Addr, Password: "secret"})
	t.Cleanup(func() { unwanted.Close() })
	if err := unwanted.Ping(ctx).Err(); err != nil {
		t.Logf("the server refuses a password: %v", err)
		elRunReturnsAtOnce(t, ctx, unwanted, "a password to a server without one")
	}
}

// elRunReturnsAtOnce runs an election's Run on c, which must fail (what
// says how), and checks that it returns its error at once, without fn
// ever running: not when its ctx ends 10s later.
func elRunReturnsAtOnce(t *testing.T, ctx context.Context, c *redis.Client, what string) error {
	t.Helper()
	e := election.New(fencedlock.New(c), "office", election.WithTTL(time.Second))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err := e.Run(rctx, "run", func(context.Context, *election.Term) error {
		t.Errorf("%s: fn ran", what)
		return nil
	})
	require.Error(t, err, what)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "%s: Run must not campaign again until its ctx ends", what)
	assert.Less(t, time.Since(start), 5*time.Second, what)
	return err
}

// Run campaigns through an outage: started while its Redis is down, it is
// elected once the server is back.
func TestRunCampaignsThroughAnOutage(t *testing.T) {
	s := redistest.Start(t)
	ctx := elCtx(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	s.Kill()
	e := election.New(fencedlock.New(c), "office", election.WithTTL(time.Second))
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	elected := make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		ran <- e.Run(rctx, "run", func(context.Context, *election.Term) error {
			close(elected)
			return errors.New("done")
		})
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-ran:
		t.Fatalf("Run returned while Redis was down: %v", err)
	default:
	}
	s.Restart(t)
	select {
	case <-elected:
	case err := <-ran:
		t.Fatalf("Run returned before it was elected: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("not elected 15s after Redis came back")
	}
	assert.EqualError(t, <-ran, "done")
}

// A leader record lost while its term lasts (deleted, evicted) is written
// again by the term within a heartbeat interval, and published: an
// Observe started while it was missing hears it. Until then Leader
// reports the lock's holder.
func TestLostLeaderRecordIsWrittenAgain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		l := elLocker(b)
		e := election.New(l, "lost", election.WithTTL(600*time.Millisecond))
		_, record, _ := elKeys(l, "lost")
		term, err := e.Campaign(ctx, "a")
		require.NoError(t, err)
		want := election.Leader{Value: "a", Token: term.Token()}

		require.NoError(t, b.Client.Del(ctx, record).Err())
		leader, err := e.Leader(ctx)
		require.NoError(t, err, "Leader with the record lost")
		assert.Contains(t, []election.Leader{want, {Token: term.Token()}}, leader)
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		seen := e.Observe(octx)
		assert.Equal(t, want, elNext(t, seen, 5*time.Second))
		leader, err = e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, leader)
		pttl, err := b.Client.PTTL(ctx, record).Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, time.Hour, "the record's life")

		// Its life runs low: extended.
		require.NoError(t, b.Client.PExpire(ctx, record, time.Minute).Err())
		require.Eventually(t, func() bool {
			pttl, err := b.Client.PTTL(ctx, record).Result()
			return err == nil && pttl > time.Hour
		}, 5*time.Second, 10*time.Millisecond, "the record's life is not extended")

		// Overwritten by hand with another term's: written again too.
		require.NoError(t, b.Client.Set(ctx, record, "1:intruder", 0).Err())
		require.Eventually(t, func() bool {
			leader, err := e.Leader(ctx)
			return err == nil && leader == want
		}, 5*time.Second, 10*time.Millisecond, "the record is not written again")
		require.NoError(t, term.Resign(ctx))
		cancel()
		elNoGoroutinesLeft(t)
	})
}

// While the lock is held but the leader record is missing or another
// term's (as between a grant and its announcement), Leader returns the
// holder's token with an empty Value, and Observe delivers nothing: it
// delivers leaders whose value it knows.
func TestLeaderFallsBackToTheLockHolder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		l := elLocker(b)
		// A long TTL: the term checks its record only every 10s.
		e := election.New(l, "fallback", election.WithTTL(30*time.Second))
		_, record, _ := elKeys(l, "fallback")
		term, err := e.Campaign(ctx, "a")
		require.NoError(t, err)
		holder := election.Leader{Token: term.Token()}

		require.NoError(t, b.Client.Set(ctx, record, fmt.Sprintf("%d:earlier", term.Token()-1), 0).Err())
		leader, err := e.Leader(ctx)
		require.NoError(t, err, "Leader with an earlier term's record")
		assert.Equal(t, holder, leader)
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		seen := e.Observe(octx)
		elNothing(t, seen, 300*time.Millisecond, "its value is unknown")

		require.NoError(t, b.Client.Del(ctx, record).Err())
		leader, err = e.Leader(ctx)
		require.NoError(t, err, "Leader with no record")
		assert.Equal(t, holder, leader)
		elNothing(t, seen, 300*time.Millisecond, "its value is unknown")

		require.NoError(t, term.Resign(ctx))
		_, err = e.Leader(ctx)
		require.ErrorIs(t, err, election.ErrNoLeader)
		cancel()
		elNoGoroutinesLeft(t)
	})
}

// A campaign is reported to the Locker's Observer as an acquire whose
// call is observe.CallCampaign, and so is the end of its term: an
// Observer tells a standby's long wait apart from the waits of ordinary
// locks.
func TestCampaignIsReportedAsACampaign(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		var mu sync.Mutex
		calls := map[observe.Kind][]observe.Call{}
		obs := observe.Func(func(ctx context.Context, e observe.Event) context.Context {
			mu.Lock()
			defer mu.Unlock()
			calls[e.Kind] = append(calls[e.Kind], e.Call)
			return ctx
		})
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(obs))
		term, err := election.New(l, "reported").Campaign(ctx, "me")
		require.NoError(t, err)
		require.NoError(t, term.Resign(ctx))
		mu.Lock()
		defer mu.Unlock()
		for _, kind := range []observe.Kind{observe.AcquireStart, observe.AcquireEnd, observe.LockEnd} {
			assert.Equal(t, []observe.Call{observe.CallCampaign}, calls[kind], "%v", kind)
		}
	})
}
