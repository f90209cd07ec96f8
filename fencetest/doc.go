// Package fencetest checks that an implementation of fencedlock.Store keeps
// the Store contract, above all the fencing rule.
//
// A store passes when it keeps these rules; each failure message names the
// rule it violates:
//
//   - not-found: Get of a resource never written returns an error wrapping
//     fencedlock.ErrNotFound.
//   - round-trip: Get returns the value and the token of the last accepted
//     Put, byte for byte (all 256 byte values, 1 MiB); nil and empty values
//     read back as empty.
//   - copy: Put keeps a copy of the value and Get returns a copy, so a
//     caller changing either slice afterwards changes nothing in the store.
//   - equal-token: a Put whose token equals the fence is accepted (one
//     holder writes many times with one token).
//   - higher-token: a Put whose token is higher than the fence is
//     accepted, and the store keeps the new token.
//   - stale-token: a Put whose token is lower than the fence fails with a
//     *fencedlock.StaleTokenError whose Resource, Token (the rejected one)
//     and Current (the fence) are right, and which matches
//     fencedlock.ErrStaleToken with errors.Is.
//   - refused-unchanged: a refused Put or Fence changes nothing.
//   - zero-token: a Put with the zero token fails with an error wrapping
//     fencedlock.ErrInvalidToken, even on an empty resource.
//   - token-range: every token a Locker can grant, 1 to 2^63-1, is
//     accepted and compared exactly by Put and by Fence, never rounded
//     (one below a fence is refused, near 2^53 too; a Locker hands out
//     tokens seeded from a clock in microseconds, and Advance raises them
//     further); a higher token is either refused with
//     fencedlock.ErrInvalidToken or stored and compared exactly.
//   - empty-resource: Put and Get with an empty resource fail with an
//     error wrapping fencedlock.ErrInvalidArgument.
//   - independent-resources: every resource has its own value, token and
//     fence; a token on one fences no other, including names that share a
//     prefix.
//   - resource-names: names with ':', spaces, non-ASCII letters and braces
//     work like any other. Stranger names ("..", "/", "{", a 512-byte name)
//     may be refused with fencedlock.ErrInvalidArgument, but if accepted
//     must work too.
//   - context: Put and Get with a cancelled or expired context fail, and
//     such a Put stores nothing.
//   - atomic-fence: under concurrent Puts to one resource, the check of
//     the token and the write are one atomic step: the token stored at the
//     end is the highest one accepted, with its value; every refusal is a
//     *StaleTokenError whose Current is higher than its Token and was
//     written by an accepted Put; and no Put is accepted after a Put with
//     a higher token has returned.
//   - torn-read: a concurrent Get returns a value and token that one
//     accepted Put wrote together.
//   - stale-read: a Get never returns a token older than one written by a
//     Put, or read by another Get, that returned before the Get began.
//   - monotonic-reads: the tokens one goroutine reads in turn never
//     decrease.
//   - fence-refuses-lower: after Fence with token t, a Put or a Fence
//     with a lower token fails with a *fencedlock.StaleTokenError whose
//     Resource, Token (the refused one) and Current (the fence, t) are
//     right, and which matches fencedlock.ErrStaleToken; a Put or Fence
//     with t or a higher token passes. A fence raised by a Put refuses a
//     lower Fence the same way.
//   - fence-never-lowers: a refused Fence leaves the fence where it was:
//     a later Put or Fence with a token between the refused one and the
//     fence is still refused.
//   - fence-holds-no-value: a Fence writes no value. Get of a resource
//     that was only fenced returns an error wrapping
//     fencedlock.ErrNotFound; after a Put of value v with token a and a
//     Fence with token b > a, Get returns v with token a, the writer's,
//     not the fence; concurrent Gets never return a token only a Fence
//     used.
//   - fence-input: Fence with the zero token fails with an error wrapping
//     fencedlock.ErrInvalidToken; with an empty resource or one longer
//     than fencedlock.MaxResourceLen, with one wrapping
//     fencedlock.ErrInvalidArgument; it takes the names of resource-names
//     as Put does (a stranger name may be refused with
//     fencedlock.ErrInvalidArgument); and with a cancelled or expired
//     context it fails. None of these failures moves the fence: a later
//     Put below the failed Fence's token passes.
//   - fence-atomic: under concurrent Fences and Puts to one resource, a
//     Fence checks and raises the fence in one atomic step, and a Put
//     checks against it atomically with its write: no Put or Fence is
//     accepted after one with a higher token was accepted and returned
//     (no Put gets in under a Fence that has returned); every refusal
//     names an accepted token, used by a call that began before the
//     refusal returned, and no lower than any token accepted before the
//     refused call began; and the store ends holding the value and token
//     of the highest accepted Put, with the highest accepted token as its
//     fence.
//
// The fence of a resource is the highest token an accepted Put or Fence
// has used on it. The rule of the tokens is the one fencedlock.CheckToken
// applies: a store calls CheckToken with the fence, read under the same
// lock or in the same transaction as its write, and in that same atomic
// step raises the fence to the token and, for a Put, stores the writer's
// token next to the value.
//
// # Usage
//
// Call Store from a test of the implementation's package, with a function
// that returns a fresh store for each subtest:
//
//	func TestStore(t *testing.T) {
//		fencetest.Store(t, func(t *testing.T) fencedlock.Store {
//			return mystore.New(t.TempDir())
//		})
//	}
//
// newStore runs on the subtest's goroutine, so it may call t.Fatal,
// t.Cleanup and t.TempDir. The stores need not be empty: the suite gives
// every resource it uses a random suffix, so stores sharing one database
// do not see each other's writes.
//
// Run the suite with -race: the concurrent subtests start goroutines
// that Put, Fence and Get at once, and a store's data races show there.
// On fencedlock.MemoryStore the suite takes 0.09 s, 0.15 s with -race
// (the median of seven runs of go test -v -race -run 'TestMemoryStore$'
// ./fencetest in fencedlock's repository, on 2 shared cores); on a
// networked store, its round trips add to that.
//
// FuzzStore checks the same rules, but for concurrency, on random
// sequences of Puts, Fences and Gets, from a fuzz target:
//
//	func FuzzStore(f *testing.F) { fencetest.FuzzStore(f, mystore.New(f.TempDir())) }
//
// go test runs its seed inputs; go test -fuzz=FuzzStore explores from there.
package fencetest
