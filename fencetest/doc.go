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
//   - equal-token: a Put whose token equals the stored one is accepted (one
//     holder writes many times with one token).
//   - higher-token: a Put whose token is higher than the stored one is
//     accepted, and the store keeps the new token.
//   - stale-token: a Put whose token is lower than the stored one fails
//     with a *fencedlock.StaleTokenError whose Resource, Token (the
//     rejected one) and Current (the stored one) are right, and which
//     matches fencedlock.ErrStaleToken with errors.Is.
//   - refused-unchanged: a refused Put changes nothing.
//   - zero-token: a Put with the zero token fails with an error wrapping
//     fencedlock.ErrInvalidToken, even on an empty resource.
//   - token-range: every token a Locker can grant, 1 to 2^63-1, is
//     accepted and compared exactly, never rounded (a Locker hands out
//     tokens seeded from a clock in microseconds, and Advance raises them
//     further); a higher token is either refused with
//     fencedlock.ErrInvalidToken or stored and compared exactly.
//   - empty-resource: Put and Get with an empty resource fail with an
//     error wrapping fencedlock.ErrInvalidArgument.
//   - independent-resources: every resource has its own value and token; a
//     token on one fences no other, including names that share a prefix.
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
//
// The rule of the tokens is the one fencedlock.CheckToken applies: a
// store calls CheckToken with the token stored with the resource's value,
// read under the same lock or in the same transaction as its write, and
// stores the writer's token next to the value in that same atomic step.
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
// Run the suite with -race: the concurrent subtest starts goroutines that
// Put and Get at once, and a store's data races show there. On
// fencedlock.MemoryStore the suite takes 0.06 s, 0.28 s with -race (go
// test -v -race -run 'TestMemoryStore$' ./fencetest in fencedlock's
// repository, on 2 shared cores); on a networked store, its round trips
// add to that.
//
// FuzzStore checks the same rules, but for concurrency, on random
// sequences of Puts and Gets, from a fuzz target:
//
//	func FuzzStore(f *testing.F) { fencetest.FuzzStore(f, mystore.New(f.TempDir())) }
//
// go test runs its seed inputs; go test -fuzz=FuzzStore explores from there.
package fencetest
