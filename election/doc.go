// Package election elects one leader at a time among candidates, and
// gives each term a fencing token that makes the leader's writes safe.
//
// Candidates campaign for an office named in Redis through their
// fencedlock.Locker; the first in line is elected, the others wait in
// order. The leader keeps its lease with a heartbeat. When it resigns,
// the release hands the office to the next candidate at once; when it
// dies, the office passes when its lease (WithTTL) runs out.
//
//	e := election.New(locker, "scheduler")
//	err := e.Run(ctx, hostname, func(ctx context.Context, term *election.Term) error {
//		// the leader's work; every write carries term.Token()
//		return store.Put(ctx, "schedule", term.Token(), plan)
//	})
//
// # What is guaranteed
//
//   - Each term's token is higher than every earlier term's, in the same
//     election.
//   - A fenced store (fencedlock.Store, sqlstore, fencehttp) refuses a write
//     whose token is lower than one it has accepted: once a newer leader has
//     written, nothing an older leader sends is applied.
//   - A leader cut off from Redis learns that its term ended (Done closes,
//     Run cancels fn's ctx with a cause matching fencedlock.ErrLockLost)
//     before its lease runs out in Redis, so before another candidate can be
//     elected, as long as its clock runs at the rate of Redis's.
//   - A Campaign whose ctx ended leaves no trace: it is never elected later.
//
// # What is not
//
//   - Two processes may briefly both believe they lead: a leader paused (a
//     GC pause, a stopped VM) past its lease does not know its term ended
//     until it runs again. Only the token makes that harmless, and only for
//     writes that a fenced store checks. Work outside such a store (an email,
//     a call to another service) is not protected.
//   - Leader and Observe are snapshots for display and routing, never a
//     reason to write.
//
// # Redis
//
// An election uses the Locker's keys for its name (the lock, its token
// counter and queue) plus a leader record holding the leader's token and
// value, all in the name's hash slot, and announces new leaders on a
// classic pub/sub channel. The record expires once the election has been
// idle for fencedlock.DefaultIdleExpiry.
package election
