// Package withdraw lets package election delete the key of a
// fencedlock.Lock whose lease ran out by the local clock, as Lock.Release
// does, without the Release that the Locker's Observer would report as
// failed: a term that was lost was not released. Package fencedlock sets
// RanOut when it is initialized.
package withdraw

import "context"

// RanOut deletes the key of lock, a *fencedlock.Lock, if its lease ran
// out by the local clock, no Release has asked Redis to delete the key
// since, and Redis still holds it for this Lock (a Refresh answered too
// late may have kept it); it sends nothing otherwise, nor when ctx has
// ended. Its outcome changes nothing of the Lock's.
var RanOut func(ctx context.Context, lock any)
