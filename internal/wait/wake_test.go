package wait

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeContender is a Contender whose attempts are refused.
type fakeContender struct{ attempts atomic.Int32 }

func (f *fakeContender) Attempt(context.Context, time.Duration) (Answer, error) {
	f.attempts.Add(1)
	return Answer{Wait: -1, Floor: 1}, nil
}
func (f *fakeContender) NotNow(error) bool { return false }
func (f *fakeContender) Stopped(ctx context.Context, _ bool) error {
	return ctx.Err()
}
func (f *fakeContender) GiveUp(_ context.Context, _ time.Duration, _, _ bool, err error) error {
	return err
}
func (f *fakeContender) Refused(context.Context) {}

// A grant heard of while the waiter is looking at what woke it, after it
// took what it had been handed, is not missed: the waiter takes it at
// once, not at its next renewal (an hour here).
func TestGrantHeardWhileTheWaiterLooksIsTaken(t *testing.T) {
	r := New(nil, Log{})
	r.pubsub, r.pubsubAsked = refused, time.Now() // no subscription: grants come by Deliver alone
	r.Hold("res", "h:", time.Now().Add(time.Hour))

	var queued, delivered atomic.Bool
	hook := func(w *waiter) {
		if queued.Load() && delivered.CompareAndSwap(false, true) {
			r.Deliver("res", w.owner, 11, time.Time{})
		}
	}
	testHookTook.Store(&hook)
	t.Cleanup(func() { testHookTook.Store(nil) })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	type result struct {
		token uint64
		err   error
	}
	done := make(chan result, 1)
	c := &fakeContender{}
	go func() {
		req := Request{Resource: "res", Channel: "ch", Owner: "w:", TTL: 30 * time.Second, Delays: Delays{time.Hour, time.Hour}}
		token, _, err := r.Wait(ctx, req, c)
		done <- result{token, err}
	}()
	require.Eventually(t, func() bool { return r.FirstHeldBack("res") }, time.Second, time.Millisecond, "the waiter was not held back")

	// The Lock's release queues the waiter in Redis; the grant of the
	// release after it comes as the waiter looks at that.
	cand := r.Candidate("res")
	require.Equal(t, "w:", cand.Owner)
	queued.Store(true)
	require.True(t, r.Queued(cand, 10, time.Now()))
	r.Unhold("res", "h:")

	res := <-done
	require.NoError(t, res.err, "the waiter missed the grant")
	assert.Equal(t, uint64(11), res.token)
	assert.True(t, delivered.Load())
	assert.Zero(t, c.attempts.Load(), "the waiter asked Redis for a lock handed to it")
}
