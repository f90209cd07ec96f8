package wait

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A waiter renews its place at a third of the TTL, within the delays, and
// the place lasts three renewals: a slow retry delay never lets it lapse.
func TestPlace(t *testing.T) {
	for _, c := range []struct {
		ttl         time.Duration
		d           Delays
		life, renew time.Duration
	}{
		{30 * time.Second, Delays{2 * time.Millisecond, time.Second}, 3 * time.Second, time.Second},
		{300 * time.Millisecond, Delays{2 * time.Millisecond, time.Second}, 300 * time.Millisecond, 100 * time.Millisecond},
		{time.Millisecond, Delays{2 * time.Millisecond, time.Second}, minPlaceLife, minPlaceLife / 3},
		{500 * time.Millisecond, Delays{2 * time.Second, 5 * time.Second}, 6 * time.Second, 2 * time.Second},
		{time.Minute, Delays{time.Hour, time.Hour}, 3 * time.Hour, time.Hour},
	} {
		life, renew := c.d.Place(c.ttl)
		assert.Equal(t, c.renew, renew, "renewal of ttl %v, %v", c.ttl, c.d)
		assert.Equal(t, c.life, life, "life of ttl %v, %v", c.ttl, c.d)
		assert.GreaterOrEqual(t, life, 3*renew, "the place outlives three renewals")
	}
}

// A grant's message is "<owner nonce>:<token>"; anything else is not one.
func TestParseGrant(t *testing.T) {
	owner, token, ok := ParseGrant("ab12:34")
	assert.True(t, ok)
	assert.Equal(t, "ab12:", owner)
	assert.Equal(t, uint64(34), token)
	owner, token, ok = ParseGrant("a:b:18446744073709551615")
	assert.True(t, ok)
	assert.Equal(t, "a:b:", owner)
	assert.Equal(t, uint64(18446744073709551615), token)
	for _, bad := range []string{"", "nocolon", "ab:", "ab:0", "ab:012", "ab:-1", "ab:1x", "ab:18446744073709551616"} {
		_, _, ok := ParseGrant(bad)
		assert.False(t, ok, "%q", bad)
	}
}

// Waiters of one resource are served first come, first served; a grant
// delivered to the first is taken only once, and one whose token is not
// above the floor of the waiter's last refusal is not taken at all.
func TestQueueAndDelivery(t *testing.T) {
	r := New(nil, Log{})
	a := &waiter{owner: "a:", wake: make(chan struct{}, 1)}
	b := &waiter{owner: "b:", wake: make(chan struct{}, 1)}
	q, first := r.join("res", "ch", a)
	assert.True(t, first)
	_, first = r.join("res", "ch", b)
	assert.False(t, first)
	grant := func(w *waiter) uint64 {
		token, _ := r.takeGrant(w)
		return token
	}

	r.Deliver("res", "b:", 10, time.Time{}) // not the first: ignored
	assert.Zero(t, grant(b))
	r.refused(q, a, 50)
	assert.True(t, r.FirstRefused("res"))
	r.Deliver("res", "a:", 40, time.Time{}) // at or below the floor: late, but it wakes a
	assert.Len(t, a.wake, 1)
	<-a.wake
	assert.Zero(t, grant(a))
	r.Deliver("res", "a:", 60, time.Time{})
	assert.Equal(t, uint64(60), grant(a))
	assert.Zero(t, grant(a), "taken once")

	r.leave(q, a, false)
	assert.Len(t, b.wake, 1, "the next waiter is woken")
	owner, subscribed := r.FirstSubscribed("res")
	assert.Equal(t, "b:", owner)
	assert.False(t, subscribed)
	r.leave(q, b, false)
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.Empty(t, r.queues, "an empty queue without a subscription is dropped at once")
}
