package fencedlock

import "time"

// SetSubscriptionLinger sets how long an idle channel stays subscribed
// and returns a function restoring the old value. Tests set it before
// they start Lockers, never while one is waiting.
func SetSubscriptionLinger(d time.Duration) (restore func()) {
	old := subscriptionLinger
	subscriptionLinger = d
	return func() { subscriptionLinger = old }
}

// HashSlot is hashSlot, for comparing with CLUSTER KEYSLOT.
var HashSlot = hashSlot
