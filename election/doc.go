// Package election elects one leader at a time among candidates, and
// gives each term a fencing token that makes the leader's writes safe.
//
// Candidates campaign for an office, named in Redis, through their
// [fencedlock.Locker]; the first in line is elected and the others wait
// in order. The leader keeps its lease with a heartbeat. When it resigns,
// the next candidate is elected at once; when it dies, the office passes
// when its lease ([WithTTL]) runs out.
//
// # Usage
//
// [Election.Run] is the whole loop: campaign, lead, campaign again.
//
//	e := election.New(locker, "scheduler")
//	err := e.Run(ctx, hostname, func(ctx context.Context, term *election.Term) error {
//		// First, fence with the term's token, before relying on any read.
//		if err := store.Fence(ctx, "schedule", term.Token()); err != nil {
//			return err // ErrStaleToken: a later term has begun
//		}
//		// The leader's work; every read it writes back and every write
//		// carry term.Token().
//		return fencedlock.Update(ctx, store, "schedule", term.Token(), nextPlan)
//	})
//
// The first thing a term does is fence ([fencedlock.Store.Fence], or
// [fencedlock.Update], which fences before it reads) with [Term.Token]:
// otherwise a deposed leader's write, still on its way, could land
// between the new leader's read and its write, be accepted, and then be
// overwritten. From the fence on, the store refuses every write of an
// earlier term.
//
// [Election.Campaign] returns a [Term] for callers that manage it
// themselves: watch [Term.Done], write with [Term.Token], and end it with
// [Term.Resign]. [Election.Leader] and [Election.Observe] tell who leads,
// for display and routing.
//
// # Errors
//
//   - A write or a fence refused with [fencedlock.ErrStaleToken]: a later
//     term has fenced or written, so this term is over. Stop leading; Run
//     campaigns again.
//   - [Term.Done] closed, [Term.Err] or fn's [context.Cause] matching
//     [fencedlock.ErrLockLost]: the term ended. Stop the leader's work.
//   - [fencedlock.ErrUnavailable]: Redis could not be reached or did not
//     answer in time. Try again later (Run does), unless it wraps Redis's
//     refusal of the client's credentials or of a command to its ACL
//     user, which Run returns: no pause ends those.
//   - [fencedlock.ErrNotAcquired] with ctx's error: Campaign's ctx ended
//     before it was elected. It left no trace in the line.
//   - [ErrNoLeader]: the office is vacant.
//   - [fencedlock.ErrInvalidArgument]: a bad name, option or value; nothing
//     was sent.
//
// See https://github.com/fencedlock/fencedlock/blob/main/docs/errors.md
// for all the errors of the library.
//
// # What is guaranteed
//
//   - Each term's token is higher than every earlier term's, in the same
//     election, while Redis keeps the token counter, or loses it with its
//     clock not behind. A counter lost with the Redis clock behind gives
//     lower tokens, whose writes fenced stores refuse until
//     [fencedlock.Locker.Advance] raises the counter: see
//     https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md#counter-loss-and-lockeradvance.
//   - A fenced store ([fencedlock.Store], package sqlstore, or a service
//     using package fencehttp) refuses a write whose token is lower than
//     one it has accepted or fenced with: once a newer leader has fenced
//     or written, nothing an older leader sends is applied.
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
// classic pub/sub channel. [Term.Resign] deletes the term's record once
// the term has ended, and Run deletes the record of every term it ends,
// lost ones too; a record left by a term that ended otherwise (its
// process died) is overwritten by the next leader's, or expires once the
// election has been idle for [fencedlock.DefaultIdleExpiry]. A term
// checks its record every heartbeat interval, in one script call that
// writes only when it must, and writes it again, and announces it again,
// when it was lost (deleted, evicted). Candidates wait in line as the Locker's waiters do: see
// https://github.com/fencedlock/fencedlock/blob/main/docs/waiting.md and
// https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md.
//
// Pub/sub only makes news travel faster. A user that Redis denies pub/sub
// (no channel permission, Redis 7's default for a new ACL user, or no
// command of the @pubsub category) is elected all the same: its
// announcement writes the record and leaves the message out, and
// Campaign succeeds. [Election.Observe] reads the leader every third of
// the TTL, kept between 100ms and 1s, whenever it has no subscription of
// its own (its user is denied pub/sub too), and five times less often
// while it has one: so it hears of a leader whose candidate may not
// publish, later. Its documentation says more.
//
// # Observing
//
// A campaign is an Acquire of the Locker, reported to the Locker's
// Observer (see [fencedlock.WithObserver]) with the call
// observe.CallCampaign, and so is the end of its term: the fencedotel
// module counts it apart from ordinary locks, and makes of it the metrics
// fencedlock.election.leader (1 while this process leads the election)
// and fencedlock.election.terms (by outcome, resigned or lost). A
// campaign granted the lock whose announcement then fails ends the term
// it began, and that term is counted as any other: resigned when
// Campaign's release of the lock succeeds, lost otherwise (the lock was
// gone, or its release failed and its lease ran out).
package election
