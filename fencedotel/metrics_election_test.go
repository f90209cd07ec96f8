package fencedotel_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/fencedotel"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A campaign is an acquire with fencedlock.call=campaign, apart from the
// ordinary locks'; the leader gauge is 1 for the election while this
// process leads it; a term's end is counted resigned or lost.
func TestMetricsElection(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := otCtx(t)
		o := otNew(t)
		l := o.locker(b)
		e := election.New(l, "scheduler", election.WithTTL(2*time.Second))
		leader := fencedotel.AttrElection.String("scheduler")

		term, err := e.Campaign(ctx, "me")
		require.NoError(t, err)
		ms := o.metrics(t)
		otAssertInstrument(t, ms, fencedotel.MetricElectionLeader, "{leader}", otUpDownCounter)
		assert.Equal(t, int64(1), otValue(t, ms, fencedotel.MetricElectionLeader, leader))
		n, _ := otHist(t, ms[fencedotel.MetricAcquireDuration], otCampaign, otAcquired)
		assert.Equal(t, uint64(1), n, "the campaign, as a campaign")
		n, _ = otHist(t, ms[fencedotel.MetricAcquireDuration], otAcquire, otAcquired)
		assert.Zero(t, n, "the campaign counted as an ordinary acquire")

		require.NoError(t, term.Resign(ctx))
		ms = o.metrics(t)
		assert.Zero(t, otValue(t, ms, fencedotel.MetricElectionLeader, leader))
		assert.Equal(t, int64(1), otValue(t, ms, fencedotel.MetricElectionTerms, otResigned))
		assert.Zero(t, otValue(t, ms, fencedotel.MetricElectionTerms, otLost))

		term, err = e.Campaign(ctx, "me again")
		require.NoError(t, err)
		require.NoError(t, b.Client.Del(ctx, mustKey(l.Key("scheduler", "lock"))).Err())
		select {
		case <-term.Done():
		case <-ctx.Done():
			t.Fatal("the term's heartbeat did not find it lost")
		}
		otEventually(t, func() bool {
			return otValue(t, o.metrics(t), fencedotel.MetricElectionTerms, otLost) == 1
		}, "the lost term counted")
		ms = o.metrics(t)
		assert.Zero(t, otValue(t, ms, fencedotel.MetricElectionLeader, leader))
		assert.Equal(t, int64(1), otValue(t, ms, fencedotel.MetricElectionTerms, otResigned))
		require.ErrorIs(t, term.Err(), fencedlock.ErrLockLost)
		otNoResourceOrToken(t, ms)
	})
}
