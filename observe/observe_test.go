package observe_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fencedlock/fencedlock/observe"
)

// The names of kinds and outcomes are those the metrics use.
func TestOutcomeAndKindNames(t *testing.T) {
	for o, want := range map[observe.Outcome]string{
		observe.Acquired: "acquired", observe.NotAcquired: "not_acquired",
		observe.Unavailable: "unavailable", observe.Failed: "error",
		observe.Released: "released", observe.Lost: "lost",
		observe.Accepted: "accepted", observe.Stale: "stale",
		observe.Timeout: "timeout", observe.Canceled: "canceled",
		observe.Outcome(200): "Outcome(200)",
	} {
		assert.Equal(t, want, o.String())
	}
	for c, want := range map[observe.Call]string{
		observe.CallNone: "none", observe.CallTry: "try", observe.CallAcquire: "acquire",
		observe.CallDo: "do", observe.CallCampaign: "campaign", observe.Call(9): "Call(9)",
	} {
		assert.Equal(t, want, c.String())
	}
	assert.Equal(t, "acquire_end", observe.AcquireEnd.String())
	assert.Equal(t, "wait_start", observe.WaitStart.String())
	assert.Equal(t, "wait_end", observe.WaitEnd.String())
	assert.Equal(t, "Kind(0)", observe.Kind(0).String())
	assert.Equal(t, "Kind(99)", observe.Kind(99).String())
}

// Func calls its function, and its ctx is the one the operation goes on
// with.
func TestFunc(t *testing.T) {
	type key struct{}
	var got observe.Event
	f := observe.Func(func(ctx context.Context, e observe.Event) context.Context {
		got = e
		return context.WithValue(ctx, key{}, "span")
	})
	var o observe.Observer = f
	ctx := o.Observe(context.Background(), observe.Event{Kind: observe.AcquireStart, Resource: "r", Token: 7})
	assert.Equal(t, observe.Event{Kind: observe.AcquireStart, Resource: "r", Token: 7}, got)
	assert.Equal(t, "span", ctx.Value(key{}))
}

// Every kind up to the last has a name of its own.
func TestKindNamesAreDistinct(t *testing.T) {
	seen := map[string]observe.Kind{}
	for k := observe.AcquireStart; k <= observe.WaitEnd; k++ {
		name := k.String()
		assert.NotContains(t, name, "Kind(", "kind %d has no name", k)
		if prev, ok := seen[name]; ok {
			t.Errorf("kinds %d and %d are both %q", prev, k, name)
		}
		seen[name] = k
	}
}
