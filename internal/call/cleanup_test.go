package call

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder collects what a Cleanups logs.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) warn(msg, _ string, _ ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, msg)
}

func (r *recorder) logged() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// A cleanup's outcome reaches the caller while ctx lasts; past ctx it
// goes on within its own budget, and only its failure is logged.
func TestCleanupsRun(t *testing.T) {
	rec := &recorder{}
	c := NewCleanups(rec.warn)
	boom := errors.New("boom")
	assert.NoError(t, c.Run(context.Background(), "r", "x", Timeout, func(context.Context) error { return nil }))
	assert.Equal(t, boom, c.Run(context.Background(), "r", "x", Timeout, func(context.Context) error { return boom }))

	// The caller's ctx ends first: the cleanup goes on with a ctx of its
	// own, and its failure is logged.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	release := make(chan struct{})
	err := c.Run(ctx, "r", "x", Timeout, func(cctx context.Context) error {
		<-release
		done <- cctx.Err()
		return boom
	})
	require.ErrorIs(t, err, ErrPending)
	close(release)
	assert.NoError(t, <-done, "the cleanup's own ctx ended with the caller's")
	require.Eventually(t, func() bool { return len(rec.logged()) == 1 }, time.Second, time.Millisecond)
	assert.Contains(t, rec.logged()[0], "background cleanup failed")

	// Its budget bounds it.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	ended := make(chan error, 1)
	require.ErrorIs(t, c.Run(ctx, "r", "x", 20*time.Millisecond, func(cctx context.Context) error {
		<-cctx.Done()
		ended <- cctx.Err()
		return nil
	}), ErrPending)
	assert.ErrorIs(t, <-ended, context.DeadlineExceeded)
}

// At most MaxRunning cleanups run at once; one more is not started, and
// that is logged and said.
func TestCleanupsAreBounded(t *testing.T) {
	rec := &recorder{}
	c := NewCleanups(rec.warn)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release := make(chan struct{})
	for i := 0; i < MaxRunning; i++ {
		require.ErrorIs(t, c.Run(ctx, "r", "x", time.Minute, func(context.Context) error { <-release; return nil }), ErrPending)
	}
	ran := false
	err := c.Run(context.Background(), "r", "x", Timeout, func(context.Context) error { ran = true; return nil })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not started")
	assert.False(t, ran)
	assert.Contains(t, rec.logged(), "fencedlock: cleanup not started: too many running")
	close(release)
	assert.Eventually(t, func() bool {
		return c.Run(context.Background(), "r", "x", Timeout, func(context.Context) error { return nil }) == nil
	}, time.Second, time.Millisecond, "slots freed")
}

// Report wraps the cleanup's outcome: errors.Is sees a failure and a
// cleanup still going on.
func TestReport(t *testing.T) {
	base := errors.New("acquire failed")
	assert.Equal(t, base, Report(base, "leaving the queue", "harm", nil))
	failed := errors.New("cleanup failed")
	err := Report(base, "leaving the queue", "a lock may stay", failed)
	assert.ErrorIs(t, err, base)
	assert.ErrorIs(t, err, failed)
	assert.Contains(t, err.Error(), "leaving the queue failed too, so a lock may stay")
	err = Report(base, "leaving the queue", "a lock may stay", ErrPending)
	assert.ErrorIs(t, err, ErrPending)
	assert.Contains(t, err.Error(), "if it fails, a lock may stay")
}
