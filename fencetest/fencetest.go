package fencetest

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
)

// Store runs the conformance suite as subtests of t, calling newStore
// once per subtest for a fresh store. It reports every rule a store
// breaks, by name; see the package documentation for the rules. Run it
// with -race.
func Store(t *testing.T, newStore func(t *testing.T) fencedlock.Store) {
	t.Helper()
	if newStore == nil {
		t.Fatal("fencetest: Store called with a nil newStore")
	}
	run(t, func(t tb) fencedlock.Store { return newStore(t.(*testing.T)) })
}

// tb is the part of *testing.T the suite uses. Store passes a *testing.T;
// the package's own tests pass a recorder, to prove that the suite fails
// on broken stores.
type tb interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Cleanup(func())
}

// subtester is implemented by a tb other than *testing.T that runs
// subtests. Run must run f on a goroutine of its own, so that f's Fatalf
// can end it with runtime.Goexit, and return whether f passed.
type subtester interface {
	Run(name string, f func(t tb)) bool
}

// runSub runs f as the subtest name of t.
func runSub(t tb, name string, f func(t tb)) bool {
	switch t := t.(type) {
	case *testing.T:
		return t.Run(name, func(t *testing.T) { f(t) })
	case subtester:
		return t.Run(name, f)
	default:
		panic(fmt.Sprintf("fencetest: %T cannot run subtests", t))
	}
}

// opTimeout bounds every subtest, so that a store that hangs fails the
// test instead of blocking until the test binary times out.
const opTimeout = time.Minute

// maxGrantedToken is the highest token a fencedlock.Locker grants: its
// counters stop at 2^63-1, so that INCR never overflows.
const maxGrantedToken fencedlock.Token = 1<<63 - 1

// run is the suite.
func run(t tb, newStore func(t tb) fencedlock.Store) {
	t.Helper()
	for _, c := range cases {
		c := c
		runSub(t, c.name, func(t tb) {
			s := newStore(t)
			if s == nil {
				t.Fatalf("fencetest: newStore returned a nil Store")
			}
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			t.Cleanup(cancel)
			c.fn(&env{t: t, s: s, ctx: ctx, suffix: newSuffix()})
		})
	}
}

var cases = []struct {
	name string
	fn   func(e *env)
}{
	{"GetNeverWritten", testGetNeverWritten},
	{"PutGet", testPutGet},
	{"ValueCopies", testValueCopies},
	{"EmptyValue", testEmptyValue},
	{"BinaryValue", testBinaryValue},
	{"LargeValue", testLargeValue},
	{"EqualToken", testEqualToken},
	{"HigherToken", testHigherToken},
	{"LowerToken", testLowerToken},
	{"ZeroToken", testZeroToken},
	{"TokenRange", testTokenRange},
	{"EmptyResource", testEmptyResource},
	{"IndependentResources", testIndependentResources},
	{"ResourceNames", testResourceNames},
	{"DoneContext", testDoneContext},
	{"Concurrent", testConcurrent},
	{"FenceLowerToken", testFenceLowerToken},
	{"FenceNeverLowers", testFenceNeverLowers},
	{"FenceHoldsNoValue", testFenceHoldsNoValue},
	{"FenceInput", testFenceInput},
	{"FenceConcurrent", testFenceConcurrent},
}

// A rule is one promise of the Store contract. Failure messages end with
// the rule's name and text.
type rule struct{ name, text string }

var (
	ruleNotFound    = rule{"not-found", "Get of a resource never written returns an error wrapping fencedlock.ErrNotFound"}
	ruleRoundTrip   = rule{"round-trip", "Get returns the value and token of the last accepted Put, byte for byte; nil and empty values read back as empty"}
	ruleCopy        = rule{"copy", "Put keeps a copy of the value and Get returns a copy: changing either slice afterwards changes nothing in the store"}
	ruleEqualToken  = rule{"equal-token", "a Put whose token equals the fence is accepted"}
	ruleHigherToken = rule{"higher-token", "a Put whose token is higher than the fence is accepted"}
	ruleStaleToken  = rule{"stale-token", "a Put whose token is lower than the fence fails with *fencedlock.StaleTokenError{Resource, Token: the rejected token, Current: the fence}, matching fencedlock.ErrStaleToken"}
	ruleUnchanged   = rule{"refused-unchanged", "a refused Put or Fence changes nothing"}
	ruleZeroToken   = rule{"zero-token", "a Put with the zero token fails with an error wrapping fencedlock.ErrInvalidToken"}
	ruleTokenRange  = rule{"token-range", "every token a Locker can grant (1 to 2^63-1) is accepted and compared exactly, by Put and by Fence; a higher token is refused with fencedlock.ErrInvalidToken or stored and compared exactly"}
	ruleEmptyRes    = rule{"empty-resource", "Put and Get with an empty resource fail with an error wrapping fencedlock.ErrInvalidArgument"}
	ruleIndependent = rule{"independent-resources", "every resource has its own value, token and fence: a token on one fences no other"}
	ruleNames       = rule{"resource-names", "resource names are opaque strings: ':', spaces, non-ASCII and braces work; a stranger name is accepted and works, or is refused with fencedlock.ErrInvalidArgument"}
	ruleContext     = rule{"context", "Put and Get with a cancelled or expired context fail, and such a Put stores nothing"}
	ruleAtomic      = rule{"atomic-fence", "the token check and the write are one atomic step: concurrent Puts leave the highest accepted token, refuse only tokens below an accepted one, and accept no token after a higher one was accepted"}
	ruleTornRead    = rule{"torn-read", "a Get returns a value and token that one accepted Put wrote together"}
	ruleStaleRead   = rule{"stale-read", "a Get returns no token older than one a completed Put wrote or a completed Get read before it began"}
	ruleMonotonic   = rule{"monotonic-reads", "the tokens one goroutine reads in turn never decrease"}

	ruleFenceLower   = rule{"fence-refuses-lower", "after Fence(t), a Put or Fence with a token below t fails with *fencedlock.StaleTokenError{Resource, Token: the refused token, Current: the fence}, matching fencedlock.ErrStaleToken; a token equal to or above the fence passes"}
	ruleNeverLowers  = rule{"fence-never-lowers", "a refused Fence leaves the fence where it was: a later Put or Fence below the fence is still refused"}
	ruleFenceNoValue = rule{"fence-holds-no-value", "a Fence writes no value: Get of a resource only fenced returns fencedlock.ErrNotFound, and after Put(v, a) and Fence(b > a) Get returns v with token a, the writer's, not the fence"}
	ruleFenceInput   = rule{"fence-input", "Fence with the zero token fails with fencedlock.ErrInvalidToken, with an empty resource or one longer than fencedlock.MaxResourceLen with fencedlock.ErrInvalidArgument, takes the names Put takes (see resource-names), and fails with a cancelled or expired context; such a failed Fence leaves the fence where it was"}
	ruleFenceAtomic  = rule{"fence-atomic", "a Fence raises the fence in one atomic step with its check, and a Put checks against it atomically with its write: under concurrent Fences and Puts no call is accepted after a call with a higher token was accepted and returned, every refusal names an accepted token at least as high as any accepted before the refused call began, and the store ends holding the highest accepted Put and the highest accepted token as its fence"}
)

// env is one subtest's store and helpers.
type env struct {
	t      tb
	s      fencedlock.Store
	ctx    context.Context
	suffix string
}

// newSuffix returns a random suffix that makes resource names fresh even
// when stores share their data.
func newSuffix() string {
	var b [6]byte
	if _, err := crand.Read(b[:]); err != nil {
		return fmt.Sprintf("%012x", rand.Int63())
	}
	return hex.EncodeToString(b[:])
}

// res returns a resource name unique to this subtest.
func (e *env) res(name string) string { return name + "#" + e.suffix }

func msg(r rule, format string, args ...any) string {
	return fmt.Sprintf(format, args...) + fmt.Sprintf("\n\tviolates rule %s: %s", r.name, r.text)
}

func (e *env) errorf(r rule, format string, args ...any) {
	e.t.Helper()
	e.t.Errorf("%s", msg(r, format, args...))
}

func (e *env) fatalf(r rule, format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("%s", msg(r, format, args...))
}

// show formats a value for a message, shortened when long.
func show(v []byte) string {
	const shown = 48
	if v == nil {
		return "nil"
	}
	if len(v) <= shown {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%q... (%d bytes)", v[:shown], len(v))
}

// diff describes how got differs from want.
func diff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %s, want %s", show(got), show(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("%d bytes as wanted, but byte %d is %#02x, want %#02x", len(got), i, got[i], want[i])
		}
	}
	return "equal"
}

// put calls Put and fails the subtest unless it was accepted.
func (e *env) put(r rule, resource string, token fencedlock.Token, value []byte) {
	e.t.Helper()
	if err := e.s.Put(e.ctx, resource, token, value); err != nil {
		e.fatalf(r, "Put(%q, token %d, %s) = %v; want it accepted", resource, token, show(value), err)
	}
}

// expect checks that Get returns value and token. It reports a violation
// of r, with what the caller did before in "after".
func (e *env) expect(r rule, after, resource string, value []byte, token fencedlock.Token) bool {
	e.t.Helper()
	v, tok, err := e.s.Get(e.ctx, resource)
	if err != nil {
		e.errorf(r, "after %s: Get(%q) = %v; want (%s, token %d)", after, resource, err, show(value), token)
		return false
	}
	if !bytes.Equal(v, value) || tok != token {
		e.errorf(r, "after %s: Get(%q) = (%s, token %d); want (%s, token %d): value %s", after, resource, show(v), tok, show(value), token, diff(v, value))
		return false
	}
	return true
}

// expectNotFound checks that Get finds nothing for resource.
func (e *env) expectNotFound(r rule, after, resource string) {
	e.t.Helper()
	v, tok, err := e.s.Get(e.ctx, resource)
	if !errors.Is(err, fencedlock.ErrNotFound) {
		e.errorf(r, "after %s: Get(%q) = (%s, token %d, %v); want an error wrapping fencedlock.ErrNotFound", after, resource, show(v), tok, err)
	}
}

// expectStale checks that err is the *StaleTokenError of a Put of token
// to resource whose fence is current.
func (e *env) expectStale(err error, resource string, token, current fencedlock.Token) {
	e.t.Helper()
	e.expectRefused(ruleStaleToken, "", "Put", err, resource, token, current)
}

// expectRefused checks that err is the *StaleTokenError of a call (Put
// or Fence) with token to resource whose fence is current, made after
// what "after" says when it is not empty. It reports a violation of r.
func (e *env) expectRefused(r rule, after, call string, err error, resource string, token, current fencedlock.Token) {
	e.t.Helper()
	desc := fmt.Sprintf("%s(%q, token %d) while the fence is %d", call, resource, token, current)
	if after != "" {
		desc = "after " + after + ": " + desc
	}
	var se *fencedlock.StaleTokenError
	if !errors.As(err, &se) {
		e.errorf(r, "%s = %v; want a *fencedlock.StaleTokenError", desc, err)
		return
	}
	if se.Resource != resource || se.Token != token || se.Current != current {
		e.errorf(r, "%s = &StaleTokenError{Resource: %q, Token: %d, Current: %d}; want {Resource: %q, Token: %d, Current: %d}",
			desc, se.Resource, se.Token, se.Current, resource, token, current)
	}
	if !errors.Is(err, fencedlock.ErrStaleToken) {
		e.errorf(r, "%s = %v: errors.Is(err, fencedlock.ErrStaleToken) = false, want true", desc, err)
	}
}

// fence calls Fence and fails the subtest unless it was accepted.
func (e *env) fence(r rule, resource string, token fencedlock.Token) {
	e.t.Helper()
	if err := e.s.Fence(e.ctx, resource, token); err != nil {
		e.fatalf(r, "Fence(%q, token %d) = %v; want it accepted", resource, token, err)
	}
}

func testGetNeverWritten(e *env) {
	r := e.res("never-written")
	v, tok, err := e.s.Get(e.ctx, r)
	if !errors.Is(err, fencedlock.ErrNotFound) {
		e.errorf(ruleNotFound, "Get(%q) of a resource never written = (%s, token %d, %v); want an error wrapping fencedlock.ErrNotFound", r, show(v), tok, err)
	}
}

func testPutGet(e *env) {
	r := e.res("put-get")
	e.put(ruleRoundTrip, r, 7, []byte("hello"))
	e.expect(ruleRoundTrip, "Put(token 7, \"hello\")", r, []byte("hello"), 7)
	e.put(ruleHigherToken, r, 8, []byte("a longer value than before"))
	e.expect(ruleRoundTrip, "Put(token 8, a longer value)", r, []byte("a longer value than before"), 8)
	e.put(ruleHigherToken, r, 9, []byte("short"))
	e.expect(ruleRoundTrip, "Put(token 9, a shorter value)", r, []byte("short"), 9)
}

func testValueCopies(e *env) {
	r := e.res("copies")
	buf := []byte("original")
	e.put(ruleRoundTrip, r, 1, buf)
	copy(buf, "XXXXXXXX")
	if !e.expect(ruleCopy, "Put(\"original\") and then changing the caller's slice to \"XXXXXXXX\"", r, []byte("original"), 1) {
		return
	}

	v1, _, err := e.s.Get(e.ctx, r)
	if err != nil {
		e.fatalf(ruleRoundTrip, "Get(%q) = %v; want the value", r, err)
	}
	v2, _, err := e.s.Get(e.ctx, r)
	if err != nil {
		e.fatalf(ruleRoundTrip, "Get(%q) = %v; want the value", r, err)
	}
	for i := range v1 {
		v1[i] = 'Y'
	}
	if !bytes.Equal(v2, []byte("original")) {
		e.errorf(ruleCopy, "changing the slice one Get returned changed the slice another Get returned to %s", show(v2))
	}
	e.expect(ruleCopy, "changing the slice Get returned to \"YYYYYYYY\"", r, []byte("original"), 1)

	// A value with spare capacity: appending to the caller's slice after
	// Put must not show up either.
	spare := make([]byte, 3, 64)
	copy(spare, "abc")
	e.put(ruleRoundTrip, r, 2, spare)
	spare = append(spare, "def"...)
	spare[0] = 'Z'
	e.expect(ruleCopy, "Put(\"abc\" with spare capacity) and then changing and appending to the caller's slice", r, []byte("abc"), 2)
}

func testEmptyValue(e *env) {
	for _, c := range []struct {
		name  string
		value []byte
	}{{"nil", nil}, {"empty", []byte{}}} {
		r := e.res("empty-value-" + c.name)
		e.put(ruleRoundTrip, r, 1, c.value)
		v, tok, err := e.s.Get(e.ctx, r)
		if err != nil || len(v) != 0 || tok != 1 {
			e.errorf(ruleRoundTrip, "Put(%q, token 1, %s value), Get = (%s, token %d, %v); want an empty value, token 1, no error", r, c.name, show(v), tok, err)
		}
		// An empty value overwrites a non-empty one.
		e.put(ruleHigherToken, r, 2, []byte("not empty"))
		e.put(ruleHigherToken, r, 3, c.value)
		v, tok, err = e.s.Get(e.ctx, r)
		if err != nil || len(v) != 0 || tok != 3 {
			e.errorf(ruleRoundTrip, "Put(%q, token 2, \"not empty\"), Put(token 3, %s value), Get = (%s, token %d, %v); want an empty value, token 3, no error", r, c.name, show(v), tok, err)
		}
	}
}

func testBinaryValue(e *env) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	rev := make([]byte, 256)
	for i := range rev {
		rev[i] = byte(255 - i)
	}
	r := e.res("binary")
	e.put(ruleRoundTrip, r, 1, all)
	e.expect(ruleRoundTrip, "Put(bytes 0x00 to 0xff)", r, all, 1)
	e.put(ruleHigherToken, r, 2, rev)
	e.expect(ruleRoundTrip, "Put(bytes 0xff to 0x00)", r, rev, 2)
	for _, v := range [][]byte{{0}, []byte("\x00\x00"), []byte("\r\n$-1\r\n"), []byte("\xff\xfe invalid UTF-8 \xc3")} {
		r := e.res(fmt.Sprintf("binary-%x", v))
		e.put(ruleRoundTrip, r, 1, v)
		e.expect(ruleRoundTrip, fmt.Sprintf("Put(%q)", v), r, v, 1)
	}
}

func testLargeValue(e *env) {
	seed := time.Now().UnixNano()
	v := make([]byte, 1<<20)
	rand.New(rand.NewSource(seed)).Read(v)
	r := e.res("large")
	e.put(ruleRoundTrip, r, 1, v)
	if !e.expect(ruleRoundTrip, fmt.Sprintf("Put(1 MiB of random bytes, seed %d)", seed), r, v, 1) {
		return
	}
	small := []byte("small again")
	e.put(ruleHigherToken, r, 2, small)
	e.expect(ruleRoundTrip, "Put(1 MiB) and Put(token 2, \"small again\")", r, small, 2)
}

func testEqualToken(e *env) {
	r := e.res("equal")
	e.put(ruleRoundTrip, r, 5, []byte("first"))
	if err := e.s.Put(e.ctx, r, 5, []byte("second")); err != nil {
		e.fatalf(ruleEqualToken, "Put(%q, token 5) after Put with token 5 = %v; want it accepted (the same holder writes again)", r, err)
	}
	e.expect(ruleEqualToken, "two Puts with token 5", r, []byte("second"), 5)
	for i := 0; i < 3; i++ {
		v := []byte(fmt.Sprintf("write %d", i))
		if err := e.s.Put(e.ctx, r, 5, v); err != nil {
			e.fatalf(ruleEqualToken, "Put(%q, token 5, %s), the fence being 5 = %v; want it accepted", r, show(v), err)
		}
	}
	e.expect(ruleEqualToken, "five Puts with token 5", r, []byte("write 2"), 5)
}

func testHigherToken(e *env) {
	r := e.res("higher")
	e.put(ruleRoundTrip, r, 5, []byte("five"))
	for _, c := range []struct {
		token fencedlock.Token
		value string
	}{{6, "six"}, {1000, "thousand"}, {1_000_001, "million and one"}} {
		if err := e.s.Put(e.ctx, r, c.token, []byte(c.value)); err != nil {
			e.fatalf(ruleHigherToken, "Put(%q, token %d), the fence being lower = %v; want it accepted", r, c.token, err)
		}
		e.expect(ruleHigherToken, fmt.Sprintf("Put(token %d, %q)", c.token, c.value), r, []byte(c.value), c.token)
	}
}

func testLowerToken(e *env) {
	r := e.res("lower")
	e.put(ruleRoundTrip, r, 10, []byte("ten"))
	for _, token := range []fencedlock.Token{9, 1} {
		err := e.s.Put(e.ctx, r, token, []byte("stale"))
		e.expectStale(err, r, token, 10)
		e.expect(ruleUnchanged, fmt.Sprintf("Put(token 10, \"ten\") and a refused Put(token %d, \"stale\")", token), r, []byte("ten"), 10)
	}
	// A refusal does not move the fence: the holder of token 10 still
	// writes.
	if err := e.s.Put(e.ctx, r, 10, []byte("ten again")); err != nil {
		e.errorf(ruleEqualToken, "Put(%q, token 10) after refused lower tokens, the fence being 10 = %v; want it accepted", r, err)
	}
	e.put(ruleHigherToken, r, 11, []byte("eleven"))
	err := e.s.Put(e.ctx, r, 10, []byte("stale ten"))
	e.expectStale(err, r, 10, 11)
	e.expect(ruleUnchanged, "Put(token 11, \"eleven\") and a refused Put(token 10)", r, []byte("eleven"), 11)
}

func testZeroToken(e *env) {
	r := e.res("zero")
	err := e.s.Put(e.ctx, r, 0, []byte("zero"))
	if !errors.Is(err, fencedlock.ErrInvalidToken) {
		e.errorf(ruleZeroToken, "Put(%q, token 0) on a resource never written = %v; want an error wrapping fencedlock.ErrInvalidToken", r, err)
	}
	e.expectNotFound(ruleUnchanged, "a refused Put with token 0", r)

	e.put(ruleRoundTrip, r, 3, []byte("three"))
	err = e.s.Put(e.ctx, r, 0, []byte("zero"))
	if !errors.Is(err, fencedlock.ErrInvalidToken) {
		e.errorf(ruleZeroToken, "Put(%q, token 0), the fence being 3 = %v; want an error wrapping fencedlock.ErrInvalidToken", r, err)
	}
	e.expect(ruleUnchanged, "Put(token 3, \"three\") and a refused Put(token 0)", r, []byte("three"), 3)
}

func testTokenRange(e *env) {
	limit := maxGrantedToken
	var refused []fencedlock.Token
	defer func() {
		if len(refused) > 0 {
			e.t.Logf("the store refuses tokens %d with fencedlock.ErrInvalidToken", refused)
		}
	}()
	for _, c := range []struct {
		token    fencedlock.Token
		required bool
	}{
		{1<<31 - 1, true},
		{1 << 31, true},
		{1<<32 + 1, true},
		{1_764_000_000_000_000, true}, // a clock-seeded token: microseconds since 1970
		{1<<53 - 1, true},
		{1 << 53, true},
		{1<<53 + 1, true}, // the first integer a float64 cannot hold
		{limit - 1, true},
		{limit, true},
		{limit + 1, false},
		{1<<63 + 1, false},
		{math.MaxUint64 - 1, false},
		{math.MaxUint64, false},
	} {
		tok := c.token
		r := e.res(fmt.Sprintf("token-%d", tok))
		err := e.s.Put(e.ctx, r, tok, []byte("high"))
		if err != nil {
			if c.required || !errors.Is(err, fencedlock.ErrInvalidToken) {
				want := "want it accepted (a Locker can grant it)"
				if !c.required {
					want = "want it accepted or an error wrapping fencedlock.ErrInvalidToken"
				}
				e.errorf(ruleTokenRange, "Put(%q, token %d) on a resource never written = %v; %s", r, tok, err, want)
				continue
			}
			refused = append(refused, tok)
			e.expectNotFound(ruleUnchanged, fmt.Sprintf("a refused Put(token %d)", tok), r)
			continue
		}
		if !e.expect(ruleTokenRange, fmt.Sprintf("Put(token %d, \"high\")", tok), r, []byte("high"), tok) {
			continue
		}
		// The store must compare exactly: one less is stale, even where
		// a float64 would round both to one number.
		err = e.s.Put(e.ctx, r, tok-1, []byte("one less"))
		var se *fencedlock.StaleTokenError
		if errors.As(err, &se) {
			e.expectStale(err, r, tok-1, tok)
		} else {
			e.errorf(ruleTokenRange, "Put(%q, token %d) after Put(token %d) = %v; want *fencedlock.StaleTokenError{Token: %d, Current: %d}: tokens must be compared exactly",
				r, tok-1, tok, err, tok-1, tok)
		}
		e.expect(ruleTokenRange, fmt.Sprintf("Put(token %d, \"high\") and a refused Put(token %d)", tok, tok-1), r, []byte("high"), tok)
		if err := e.s.Put(e.ctx, r, tok, []byte("equal")); err != nil {
			e.errorf(ruleEqualToken, "Put(%q, token %d), the fence being %d = %v; want it accepted", r, tok, tok, err)
			continue
		}
		e.expect(ruleEqualToken, fmt.Sprintf("Put(token %d, \"high\") and Put(token %d, \"equal\")", tok, tok), r, []byte("equal"), tok)
		// Fences compare exactly too: one less than the fence a Put
		// raised is refused, and so is it after a Fence alone.
		e.expectRefused(ruleTokenRange, fmt.Sprintf("Put(token %d)", tok), "Fence", e.s.Fence(e.ctx, r, tok-1), r, tok-1, tok)
		f := e.res(fmt.Sprintf("fence-token-%d", tok))
		if err := e.s.Fence(e.ctx, f, tok); err != nil {
			e.errorf(ruleTokenRange, "Fence(%q, token %d) on a resource never written = %v; want it accepted", f, tok, err)
			continue
		}
		e.expectRefused(ruleTokenRange, fmt.Sprintf("Fence(token %d)", tok), "Put", e.s.Put(e.ctx, f, tok-1, []byte("one less")), f, tok-1, tok)
		e.expectRefused(ruleTokenRange, fmt.Sprintf("Fence(token %d)", tok), "Fence", e.s.Fence(e.ctx, f, tok-1), f, tok-1, tok)
	}
}

func testEmptyResource(e *env) {
	err := e.s.Put(e.ctx, "", 1, []byte("x"))
	if !errors.Is(err, fencedlock.ErrInvalidArgument) {
		e.errorf(ruleEmptyRes, "Put(\"\", token 1) = %v; want an error wrapping fencedlock.ErrInvalidArgument", err)
	}
	v, tok, err := e.s.Get(e.ctx, "")
	if !errors.Is(err, fencedlock.ErrInvalidArgument) {
		e.errorf(ruleEmptyRes, "Get(\"\") = (%s, token %d, %v); want an error wrapping fencedlock.ErrInvalidArgument", show(v), tok, err)
	}
}

func testIndependentResources(e *env) {
	a, b := e.res("a"), e.res("b")
	e.put(ruleRoundTrip, a, 100, []byte("a100"))
	if err := e.s.Put(e.ctx, b, 1, []byte("b1")); err != nil {
		e.fatalf(ruleIndependent, "Put(%q, token 1) after Put(%q, token 100) = %v; want it accepted", b, a, err)
	}
	e.put(ruleHigherToken, b, 2, []byte("b2"))
	e.expectStale(e.s.Put(e.ctx, a, 50, []byte("a50")), a, 50, 100)
	e.expect(ruleIndependent, fmt.Sprintf("Put(%q, token 100, \"a100\") and Put(%q, tokens 1 and 2)", a, b), a, []byte("a100"), 100)
	e.expect(ruleIndependent, fmt.Sprintf("Put(%q, token 100) and Put(%q, token 2, \"b2\")", a, b), b, []byte("b2"), 2)
	e.expectNotFound(ruleIndependent, fmt.Sprintf("Puts to %q and %q", a, b), e.res("c"))

	// A Fence on one resource fences no other either.
	f := e.res("fenced")
	e.fence(ruleFenceLower, f, 500)
	if err := e.s.Put(e.ctx, b, 3, []byte("b3")); err != nil {
		e.errorf(ruleIndependent, "Put(%q, token 3) after Fence(%q, token 500) = %v; want it accepted", b, f, err)
	}
	if err := e.s.Fence(e.ctx, e.res("c"), 1); err != nil {
		e.errorf(ruleIndependent, "Fence(%q, token 1) after Fence(%q, token 500) = %v; want it accepted", e.res("c"), f, err)
	}

	// Names that share a prefix or differ only in case, written with
	// falling tokens: a store that mixes them up refuses a later one or
	// returns another's value.
	base := "p" + e.suffix
	names := []string{base, base + "x", base + ":", base + ":value", base + "}", base + "/", "P" + e.suffix, "x" + base}
	for i, n := range names {
		tok := fencedlock.Token(1000 - 10*i)
		if err := e.s.Put(e.ctx, n, tok, []byte("value of "+n)); err != nil {
			e.errorf(ruleIndependent, "Put(%q, token %d) after Puts with higher tokens to %q = %v; want it accepted", n, tok, names[:i], err)
		}
	}
	for i, n := range names {
		e.expect(ruleIndependent, fmt.Sprintf("Puts to %q", names), n, []byte("value of "+n), fencedlock.Token(1000-10*i))
	}
}

// The names of rule resource-names: every store takes requiredNames;
// it may refuse optionalNames with fencedlock.ErrInvalidArgument.
var (
	requiredNames = []string{"a:b", "with space", "ünïcödé", "x{y}z"}
	optionalNames = []string{"{", "a}", "{}", "{{x}}", "slash/and\\backslash", "..", "/", "%2F?query#fragment", "🔒", "tab\tand\nnewline", strings.Repeat("long", 128)}
)

func testResourceNames(e *env) {
	type entry struct {
		name  string
		token fencedlock.Token
	}
	var stored []entry
	for i, name := range append(append([]string{}, requiredNames...), optionalNames...) {
		r := e.res(name)
		tok := fencedlock.Token(1000 - i)
		err := e.s.Put(e.ctx, r, tok, []byte("value of "+r))
		switch {
		case err == nil:
			stored = append(stored, entry{r, tok})
		case i >= len(requiredNames) && errors.Is(err, fencedlock.ErrInvalidArgument):
			e.t.Logf("the store refuses resource name %q: %v", r, err)
		default:
			e.errorf(ruleNames, "Put(%q, token %d) = %v; want it accepted", r, tok, err)
		}
	}
	for _, s := range stored {
		e.expect(ruleNames, "Puts to resources with unusual names", s.name, []byte("value of "+s.name), s.token)
	}
	for _, s := range stored {
		e.expectStale(e.s.Put(e.ctx, s.name, s.token-1, []byte("stale")), s.name, s.token-1, s.token)
	}
}

func testDoneContext(e *env) {
	r := e.res("done-context")
	e.put(ruleRoundTrip, r, 5, []byte("before"))

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel2()
	for _, c := range []struct {
		name string // "a cancelled" context
		slug string
		ctx  context.Context
	}{{"a cancelled", "cancelled", cancelled}, {"an expired", "expired", expired}} {
		err := e.s.Put(c.ctx, r, 6, []byte("after"))
		if err == nil {
			e.errorf(ruleContext, "Put(%q, token 6) with %s context = nil; want an error", r, c.name)
		}
		e.expect(ruleContext, fmt.Sprintf("Put(token 5, \"before\") and Put(token 6, \"after\") with %s context", c.name), r, []byte("before"), 5)

		fresh := e.res("done-context-" + c.slug)
		if err := e.s.Put(c.ctx, fresh, 1, []byte("x")); err == nil {
			e.errorf(ruleContext, "Put(%q, token 1) with %s context = nil; want an error", fresh, c.name)
		}
		e.expectNotFound(ruleContext, fmt.Sprintf("a Put with %s context", c.name), fresh)

		if v, tok, err := e.s.Get(c.ctx, r); err == nil {
			e.errorf(ruleContext, "Get(%q) with %s context = (%s, token %d, nil); want an error", r, c.name, show(v), tok)
		}
	}
}

// Sizes of the concurrent subtests: a few hundred operations each, so
// that they are fast on an in-memory store and modest on a networked one.
const (
	concurrentWriters = 8
	concurrentReaders = 4
	concurrentPuts    = 320 // Puts, or Puts and Fences; a multiple of concurrentWriters
	maxGetsPerReader  = 5000
	maxViolations     = 5 // per rule, to keep the report readable
)

// An op is one Put, Fence or Get of a concurrent subtest. inv and resp are
// ticks of a shared counter taken just before the call and just after
// it returned: op a returned before op b began when a.resp < b.inv.
type op struct {
	inv, resp int64
	token     fencedlock.Token // Put, Fence: the token sent; Get: the token read
	value     []byte           // Get: the value read
	err       error
}

// valueFor returns the value the concurrent subtests write with token:
// its length and content depend on the token, so a value read with
// another token's value shows.
func valueFor(token fencedlock.Token) []byte {
	unit := fmt.Sprintf("<value of token %d>", token)
	return []byte(strings.Repeat(unit, 1+int(token%7)))
}

// violations counts reports per rule and stops after maxViolations.
type violations struct {
	e *env
	n map[string]int
}

func (v *violations) report(r rule, format string, args ...any) {
	v.e.t.Helper()
	if v.n == nil {
		v.n = make(map[string]int)
	}
	v.n[r.name]++
	switch n := v.n[r.name]; {
	case n <= maxViolations:
		v.e.errorf(r, format, args...)
	case n == maxViolations+1:
		v.e.t.Errorf("more violations of rule %s follow; not reported", r.name)
	}
}

// maxBefore answers "what is the highest token of the ops that returned
// before tick t".
type maxBefore struct {
	resp []int64
	max  []fencedlock.Token // max[i]: the highest token among ops[:i+1] by resp
}

func newMaxBefore(ops []op) maxBefore {
	sorted := append([]op(nil), ops...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].resp < sorted[j].resp })
	m := maxBefore{resp: make([]int64, len(sorted)), max: make([]fencedlock.Token, len(sorted))}
	var hi fencedlock.Token
	for i, o := range sorted {
		if o.token > hi {
			hi = o.token
		}
		m.resp[i], m.max[i] = o.resp, hi
	}
	return m
}

func (m maxBefore) at(t int64) fencedlock.Token {
	i := sort.Search(len(m.resp), func(i int) bool { return m.resp[i] >= t })
	if i == 0 {
		return 0
	}
	return m.max[i-1]
}

// concurrentSchedule returns the tokens each round of the concurrent
// subtest writes, one per writer: tokens 1 to concurrentPuts, rising from
// round to round but shuffled across about three rounds, so that in most
// rounds Puts race both lower and higher tokens, and some are refused.
func concurrentSchedule(rng *rand.Rand) [][]fencedlock.Token {
	const spread = 3 * concurrentWriters
	type keyed struct {
		token fencedlock.Token
		key   float64
	}
	all := make([]keyed, concurrentPuts)
	for i := range all {
		all[i] = keyed{fencedlock.Token(i + 1), float64(i) + spread*rng.Float64()}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
	rounds := make([][]fencedlock.Token, concurrentPuts/concurrentWriters)
	for k := range rounds {
		rounds[k] = make([]fencedlock.Token, concurrentWriters)
		for w, i := range rng.Perm(concurrentWriters) {
			rounds[k][w] = all[k*concurrentWriters+i].token
		}
	}
	return rounds
}

// runSchedule runs the rounds of schedule on resource r: concurrentWriters
// goroutines call write with their token of each round, all at once in
// each round, while concurrentReaders goroutines Get r until the writers
// are done. It returns each writer's calls, with the token written and
// the error, and each reader's Gets.
func (e *env) runSchedule(r string, schedule [][]fencedlock.Token, write func(tok fencedlock.Token) error) (calls, gets [][]op) {
	// start[k] starts round k, and round waits for its calls to return.
	var (
		tick    atomic.Int64
		start   = make([]chan struct{}, len(schedule))
		round   sync.WaitGroup
		done    atomic.Bool
		writers sync.WaitGroup
		readers sync.WaitGroup
	)
	calls = make([][]op, concurrentWriters)
	gets = make([][]op, concurrentReaders)
	for k := range start {
		start[k] = make(chan struct{})
	}
	for w := 0; w < concurrentWriters; w++ {
		w := w
		writers.Add(1)
		go func() {
			defer writers.Done()
			for k, tokens := range schedule {
				<-start[k]
				tok := tokens[w]
				o := op{token: tok, inv: tick.Add(1)}
				o.err = write(tok)
				o.resp = tick.Add(1)
				calls[w] = append(calls[w], o)
				round.Done()
			}
		}()
	}
	for g := 0; g < concurrentReaders; g++ {
		g := g
		readers.Add(1)
		go func() {
			defer readers.Done()
			<-start[0]
			for i := 0; i < maxGetsPerReader && !done.Load(); i++ {
				o := op{inv: tick.Add(1)}
				o.value, o.token, o.err = e.s.Get(e.ctx, r)
				o.resp = tick.Add(1)
				gets[g] = append(gets[g], o)
			}
		}()
	}
	for k := range start {
		round.Add(concurrentWriters)
		close(start[k])
		round.Wait()
	}
	writers.Wait()
	done.Store(true)
	readers.Wait()
	return calls, gets
}

func testConcurrent(e *env) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	e.t.Logf("%d writers Put tokens 1 to %d in rounds, in an order drawn with seed %d; %d readers Get", concurrentWriters, concurrentPuts, seed, concurrentReaders)
	r := e.res("concurrent")
	puts, gets := e.runSchedule(r, concurrentSchedule(rng), func(tok fencedlock.Token) error {
		return e.s.Put(e.ctx, r, tok, valueFor(tok))
	})

	v := &violations{e: e}
	accepted := make(map[fencedlock.Token]op)
	var acceptedOps []op
	var highest fencedlock.Token
	for _, ops := range puts {
		for _, o := range ops {
			if o.err == nil {
				accepted[o.token] = o
				acceptedOps = append(acceptedOps, o)
				if o.token > highest {
					highest = o.token
				}
			}
		}
	}

	// (b) Every refusal is a *StaleTokenError naming an accepted, higher
	// token that was written before the refusal returned.
	for _, ops := range puts {
		for _, o := range ops {
			if o.err == nil {
				continue
			}
			var se *fencedlock.StaleTokenError
			if !errors.As(o.err, &se) {
				v.report(ruleAtomic, "concurrent Put(%q, token %d) = %v; want it accepted or a *fencedlock.StaleTokenError", r, o.token, o.err)
				continue
			}
			if se.Resource != r || se.Token != o.token {
				v.report(ruleStaleToken, "concurrent Put(%q, token %d) = &StaleTokenError{Resource: %q, Token: %d}; want Resource %q, Token %d", r, o.token, se.Resource, se.Token, r, o.token)
			}
			w, ok := accepted[se.Current]
			switch {
			case se.Current <= o.token:
				v.report(ruleAtomic, "concurrent Put(%q, token %d) was refused with Current %d, not above its token", r, o.token, se.Current)
			case !ok:
				v.report(ruleAtomic, "concurrent Put(%q, token %d) was refused with Current %d, a token no accepted Put wrote", r, o.token, se.Current)
			case w.inv > o.resp:
				v.report(ruleAtomic, "concurrent Put(%q, token %d) was refused with Current %d, written by a Put that began after the refusal returned", r, o.token, se.Current)
			}
		}
	}

	// (c) No Put is accepted after a Put with a higher token returned.
	doneBefore := newMaxBefore(acceptedOps)
	for _, o := range acceptedOps {
		if hi := doneBefore.at(o.inv); hi > o.token {
			v.report(ruleAtomic, "concurrent Put(%q, token %d) was accepted although Put(token %d) had been accepted and returned before it began", r, o.token, hi)
		}
	}

	// (a) The store ends with the highest accepted token and its value.
	val, tok, err := e.s.Get(e.ctx, r)
	switch {
	case err != nil:
		v.report(ruleAtomic, "after concurrent Puts, Get(%q) = %v; want token %d", r, err, highest)
	case tok != highest || !bytes.Equal(val, valueFor(tok)):
		v.report(ruleAtomic, "after concurrent Puts of tokens 1 to %d, Get(%q) = (%s, token %d); want token %d, the highest accepted, with %s",
			concurrentPuts, r, show(val), tok, highest, show(valueFor(highest)))
	}

	// Gets: each read a pair one accepted Put wrote, no older than what
	// completed before it began, and never going back.
	var allGets []op
	for g, ops := range gets {
		var last fencedlock.Token
		for i, o := range ops {
			if o.err != nil && !errors.Is(o.err, fencedlock.ErrNotFound) {
				v.report(ruleRoundTrip, "concurrent Get(%q) = %v; want a value or an error wrapping fencedlock.ErrNotFound", r, o.err)
				continue
			}
			if o.err != nil {
				o.token, o.value = 0, nil
			} else {
				w, ok := accepted[o.token]
				switch {
				case !ok:
					v.report(ruleTornRead, "concurrent Get(%q) = (%s, token %d): no accepted Put wrote token %d", r, show(o.value), o.token, o.token)
				case !bytes.Equal(o.value, valueFor(o.token)):
					v.report(ruleTornRead, "concurrent Get(%q) = (%s, token %d); the Put with token %d wrote %s", r, show(o.value), o.token, o.token, show(valueFor(o.token)))
				case w.inv > o.resp:
					v.report(ruleStaleRead, "concurrent Get(%q) returned token %d, written by a Put that began after the Get returned", r, o.token)
				}
			}
			if hi := doneBefore.at(o.inv); o.token < hi {
				v.report(ruleStaleRead, "concurrent Get(%q) = token %d (0: not found), but Put(token %d) had been accepted and returned before the Get began", r, o.token, hi)
			}
			if o.token < last {
				v.report(ruleMonotonic, "reader %d: Get %d of %q = token %d (0: not found) after an earlier Get read token %d", g, i, r, o.token, last)
			}
			last = o.token
			allGets = append(allGets, o)
		}
	}
	readBefore := newMaxBefore(allGets)
	for _, o := range allGets {
		if hi := readBefore.at(o.inv); o.token < hi {
			v.report(ruleStaleRead, "concurrent Get(%q) = token %d (0: not found), but another Get that returned before it began read token %d", r, o.token, hi)
		}
	}
	e.t.Logf("%d of %d Puts accepted, %d Gets", len(acceptedOps), concurrentPuts, len(allGets))
}

func testFenceLowerToken(e *env) {
	r := e.res("fence-lower")
	e.fence(ruleFenceLower, r, 10)
	for _, tok := range []fencedlock.Token{9, 1} {
		e.expectRefused(ruleFenceLower, "Fence(token 10)", "Put", e.s.Put(e.ctx, r, tok, []byte("stale")), r, tok, 10)
		e.expectRefused(ruleFenceLower, "Fence(token 10)", "Fence", e.s.Fence(e.ctx, r, tok), r, tok, 10)
	}
	// An equal token passes, for a Fence and for a Put.
	if err := e.s.Fence(e.ctx, r, 10); err != nil {
		e.errorf(ruleFenceLower, "Fence(%q, token 10), the fence being 10 = %v; want it accepted", r, err)
	}
	if err := e.s.Put(e.ctx, r, 10, []byte("ten")); err != nil {
		e.fatalf(ruleFenceLower, "Put(%q, token 10, \"ten\"), the fence being 10 = %v; want it accepted", r, err)
	}
	e.expect(ruleRoundTrip, "Fence(token 10) and Put(token 10, \"ten\")", r, []byte("ten"), 10)

	// A Fence above a written value refuses even the writer's token.
	w := e.res("fence-lower-written")
	e.put(ruleRoundTrip, w, 5, []byte("five"))
	e.fence(ruleFenceLower, w, 8)
	read := e.expect(ruleFenceNoValue, "Put(token 5, \"five\") and Fence(token 8)", w, []byte("five"), 5)
	for _, tok := range []fencedlock.Token{7, 5} {
		e.expectRefused(ruleFenceLower, "Put(token 5) and Fence(token 8)", "Put", e.s.Put(e.ctx, w, tok, []byte("stale")), w, tok, 8)
	}
	e.expectRefused(ruleFenceLower, "Put(token 5) and Fence(token 8)", "Fence", e.s.Fence(e.ctx, w, 6), w, 6, 8)
	if read {
		e.expect(ruleUnchanged, "Put(token 5, \"five\"), Fence(token 8), refused Puts with tokens 7 and 5 and a refused Fence(token 6)", w, []byte("five"), 5)
	}
	if err := e.s.Put(e.ctx, w, 8, []byte("eight")); err != nil {
		e.fatalf(ruleFenceLower, "Put(%q, token 8, \"eight\") after Fence(token 8) = %v; want it accepted", w, err)
	}
	e.expect(ruleRoundTrip, "Fence(token 8) and Put(token 8, \"eight\")", w, []byte("eight"), 8)

	// The fence a Put raised refuses a lower Fence.
	e.put(ruleHigherToken, w, 12, []byte("twelve"))
	e.expectRefused(ruleFenceLower, "Put(token 12)", "Fence", e.s.Fence(e.ctx, w, 11), w, 11, 12)
	e.expect(ruleUnchanged, "Put(token 12, \"twelve\") and a refused Fence(token 11)", w, []byte("twelve"), 12)
}

func testFenceNeverLowers(e *env) {
	r := e.res("fence-never-lowers")
	e.fence(ruleFenceLower, r, 10)
	e.expectRefused(ruleFenceLower, "Fence(token 10)", "Fence", e.s.Fence(e.ctx, r, 5), r, 5, 10)
	// Between the refused token and the fence, every token is still
	// refused; the fence's own passes.
	for _, tok := range []fencedlock.Token{5, 7, 9} {
		e.expectRefused(ruleNeverLowers, "Fence(token 10) and a refused Fence(token 5)", "Put", e.s.Put(e.ctx, r, tok, []byte("between")), r, tok, 10)
	}
	e.expectRefused(ruleNeverLowers, "Fence(token 10) and a refused Fence(token 5)", "Fence", e.s.Fence(e.ctx, r, 8), r, 8, 10)
	if err := e.s.Put(e.ctx, r, 10, []byte("ten")); err != nil {
		e.fatalf(ruleNeverLowers, "Put(%q, token 10) after Fence(token 10) and refused lower calls = %v; want it accepted", r, err)
	}
	e.expect(ruleRoundTrip, "Fence(token 10), refused lower calls and Put(token 10, \"ten\")", r, []byte("ten"), 10)

	// The same above a fence that a Put raised.
	e.put(ruleHigherToken, r, 20, []byte("twenty"))
	e.expectRefused(ruleFenceLower, "Put(token 20)", "Fence", e.s.Fence(e.ctx, r, 15), r, 15, 20)
	e.expectRefused(ruleNeverLowers, "Put(token 20) and a refused Fence(token 15)", "Put", e.s.Put(e.ctx, r, 17, []byte("between")), r, 17, 20)
	e.expectRefused(ruleNeverLowers, "Put(token 20) and a refused Fence(token 15)", "Fence", e.s.Fence(e.ctx, r, 16), r, 16, 20)
	e.expect(ruleUnchanged, "Put(token 20, \"twenty\") and refused calls with tokens 15 to 17", r, []byte("twenty"), 20)
}

func testFenceHoldsNoValue(e *env) {
	r := e.res("fence-no-value")
	e.fence(ruleFenceLower, r, 3)
	e.expectNotFound(ruleFenceNoValue, "Fence(token 3) on a resource never written", r)
	e.fence(ruleFenceLower, r, 5)
	e.fence(ruleFenceLower, r, 5)
	e.expectNotFound(ruleFenceNoValue, "Fence(token 3), Fence(token 5) and Fence(token 5) on a resource never written", r)

	// A value written at the fence, then a higher fence: Get returns
	// the value with the token that wrote it.
	if err := e.s.Put(e.ctx, r, 5, []byte("v5")); err != nil {
		e.fatalf(ruleFenceLower, "Put(%q, token 5, \"v5\"), the fence being 5 = %v; want it accepted", r, err)
	}
	e.expect(ruleRoundTrip, "Fence(token 5) and Put(token 5, \"v5\")", r, []byte("v5"), 5)
	e.fence(ruleFenceLower, r, 9)
	e.expect(ruleFenceNoValue, "Put(token 5, \"v5\") and Fence(token 9)", r, []byte("v5"), 5)
	e.fence(ruleFenceLower, r, 9)
	e.fence(ruleFenceLower, r, 12)
	e.expect(ruleFenceNoValue, "Put(token 5, \"v5\") and Fences with tokens 9, 9 and 12", r, []byte("v5"), 5)
	e.put(ruleFenceLower, r, 12, []byte("v12"))
	e.expect(ruleRoundTrip, "Fence(token 12) and Put(token 12, \"v12\")", r, []byte("v12"), 12)

	// A Fence with the writer's own token leaves the value as well.
	w := e.res("fence-no-value-equal")
	e.put(ruleRoundTrip, w, 4, []byte("four"))
	e.fence(ruleFenceLower, w, 4)
	e.expect(ruleFenceNoValue, "Put(token 4, \"four\") and Fence(token 4)", w, []byte("four"), 4)
}

func testFenceInput(e *env) {
	r := e.res("fence-input")
	if err := e.s.Fence(e.ctx, r, 0); !errors.Is(err, fencedlock.ErrInvalidToken) {
		e.errorf(ruleFenceInput, "Fence(%q, token 0) on a resource never written = %v; want an error wrapping fencedlock.ErrInvalidToken", r, err)
	}
	e.put(ruleRoundTrip, r, 3, []byte("three"))
	if err := e.s.Fence(e.ctx, r, 0); !errors.Is(err, fencedlock.ErrInvalidToken) {
		e.errorf(ruleFenceInput, "Fence(%q, token 0), the fence being 3 = %v; want an error wrapping fencedlock.ErrInvalidToken", r, err)
	}
	// A store that took token 0 as the new fence would take token 2.
	e.expectRefused(ruleFenceInput, "Put(token 3) and a refused Fence(token 0)", "Put", e.s.Put(e.ctx, r, 2, []byte("two")), r, 2, 3)
	e.expect(ruleUnchanged, "Put(token 3, \"three\"), a refused Fence(token 0) and a refused Put(token 2)", r, []byte("three"), 3)

	if err := e.s.Fence(e.ctx, "", 1); !errors.Is(err, fencedlock.ErrInvalidArgument) {
		e.errorf(ruleFenceInput, "Fence(\"\", token 1) = %v; want an error wrapping fencedlock.ErrInvalidArgument", err)
	}
	long := e.res("too-long-") + strings.Repeat("n", fencedlock.MaxResourceLen)
	if err := e.s.Fence(e.ctx, long, 1); !errors.Is(err, fencedlock.ErrInvalidArgument) {
		e.errorf(ruleFenceInput, "Fence(a name of %d bytes, above fencedlock.MaxResourceLen = %d, token 1) = %v; want an error wrapping fencedlock.ErrInvalidArgument",
			len(long), fencedlock.MaxResourceLen, err)
	}

	// The names of resource-names: those every store takes must be
	// fenced; stranger ones may be refused with ErrInvalidArgument.
	for i, name := range append(append([]string{}, requiredNames...), optionalNames...) {
		n := e.res(name)
		tok := fencedlock.Token(1000 - i)
		err := e.s.Fence(e.ctx, n, tok)
		switch {
		case err == nil:
			e.expectRefused(ruleFenceInput, fmt.Sprintf("Fence(token %d)", tok), "Put", e.s.Put(e.ctx, n, tok-1, []byte("stale")), n, tok-1, tok)
			e.expectNotFound(ruleFenceNoValue, fmt.Sprintf("Fence(token %d) and a refused Put", tok), n)
		case i >= len(requiredNames) && errors.Is(err, fencedlock.ErrInvalidArgument):
			e.t.Logf("the store refuses to fence resource name %q: %v", n, err)
		default:
			e.errorf(ruleFenceInput, "Fence(%q, token %d) = %v; want it accepted", n, tok, err)
		}
	}

	// A Fence with a done context fails and leaves the fence where it
	// was: a later Put below the Fence's token passes.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel2()
	for _, c := range []struct {
		name string // "a cancelled" context
		slug string
		ctx  context.Context
	}{{"a cancelled", "cancelled", cancelled}, {"an expired", "expired", expired}} {
		w := e.res("fence-done-context-" + c.slug)
		e.put(ruleRoundTrip, w, 5, []byte("before"))
		if err := e.s.Fence(c.ctx, w, 10); err == nil {
			e.errorf(ruleFenceInput, "Fence(%q, token 10) with %s context = nil; want an error", w, c.name)
		}
		if err := e.s.Put(e.ctx, w, 7, []byte("after")); err != nil {
			e.errorf(ruleFenceInput, "Put(%q, token 7) after Put(token 5) and Fence(token 10) with %s context = %v; want it accepted: the failed Fence must leave the fence at 5", w, c.name, err)
		} else {
			e.expect(ruleRoundTrip, fmt.Sprintf("Put(token 5), Fence(token 10) with %s context and Put(token 7, \"after\")", c.name), w, []byte("after"), 7)
		}

		fresh := e.res("fence-done-context-fresh-" + c.slug)
		if err := e.s.Fence(c.ctx, fresh, 10); err == nil {
			e.errorf(ruleFenceInput, "Fence(%q, token 10) with %s context = nil; want an error", fresh, c.name)
		}
		e.expectNotFound(ruleFenceNoValue, fmt.Sprintf("a Fence with %s context", c.name), fresh)
		if err := e.s.Put(e.ctx, fresh, 1, []byte("x")); err != nil {
			e.errorf(ruleFenceInput, "Put(%q, token 1) after Fence(token 10) with %s context = %v; want it accepted: the failed Fence must leave no fence", fresh, c.name, err)
		}
	}
}

func testFenceConcurrent(e *env) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	schedule := concurrentSchedule(rng)
	// fences[t]: token t is a Fence's; the others are Puts'.
	fences := make(map[fencedlock.Token]bool)
	for _, round := range schedule {
		for _, tok := range round {
			fences[tok] = rng.Intn(2) == 0
		}
	}
	call := func(tok fencedlock.Token) string {
		if fences[tok] {
			return "Fence"
		}
		return "Put"
	}
	e.t.Logf("%d writers Fence or Put tokens 1 to %d in rounds, about half of them Fences, in an order drawn with seed %d; %d readers Get",
		concurrentWriters, concurrentPuts, seed, concurrentReaders)
	r := e.res("fence-concurrent")
	calls, gets := e.runSchedule(r, schedule, func(tok fencedlock.Token) error {
		if fences[tok] {
			return e.s.Fence(e.ctx, r, tok)
		}
		return e.s.Put(e.ctx, r, tok, valueFor(tok))
	})

	v := &violations{e: e}
	accepted := make(map[fencedlock.Token]op)
	var acceptedOps, acceptedPuts []op
	var highest, highestPut fencedlock.Token
	for _, ops := range calls {
		for _, o := range ops {
			if o.err != nil {
				continue
			}
			accepted[o.token] = o
			acceptedOps = append(acceptedOps, o)
			if o.token > highest {
				highest = o.token
			}
			if !fences[o.token] {
				acceptedPuts = append(acceptedPuts, o)
				if o.token > highestPut {
					highestPut = o.token
				}
			}
		}
	}
	doneBefore := newMaxBefore(acceptedOps)

	// Every refusal is a *StaleTokenError naming a higher token that an
	// accepted call used, one that began before the refusal returned,
	// and no lower than any accepted before the refused call began.
	for _, ops := range calls {
		for _, o := range ops {
			if o.err == nil {
				continue
			}
			c := call(o.token)
			var se *fencedlock.StaleTokenError
			if !errors.As(o.err, &se) {
				v.report(ruleFenceAtomic, "concurrent %s(%q, token %d) = %v; want it accepted or a *fencedlock.StaleTokenError", c, r, o.token, o.err)
				continue
			}
			if se.Resource != r || se.Token != o.token {
				v.report(ruleFenceLower, "concurrent %s(%q, token %d) = &StaleTokenError{Resource: %q, Token: %d}; want Resource %q, Token %d", c, r, o.token, se.Resource, se.Token, r, o.token)
			}
			w, ok := accepted[se.Current]
			switch {
			case se.Current <= o.token:
				v.report(ruleFenceAtomic, "concurrent %s(%q, token %d) was refused with Current %d, not above its token", c, r, o.token, se.Current)
			case !ok:
				v.report(ruleFenceAtomic, "concurrent %s(%q, token %d) was refused with Current %d, a token no accepted Put or Fence used", c, r, o.token, se.Current)
			case w.inv > o.resp:
				v.report(ruleFenceAtomic, "concurrent %s(%q, token %d) was refused with Current %d, used by a %s that began after the refusal returned", c, r, o.token, se.Current, call(se.Current))
			}
			if hi := doneBefore.at(o.inv); se.Current < hi {
				v.report(ruleFenceAtomic, "concurrent %s(%q, token %d) was refused with Current %d, although %s(token %d) had been accepted and returned before it began: the fence went down",
					c, r, o.token, se.Current, call(hi), hi)
			}
		}
	}

	// No call is accepted after one with a higher token returned: above
	// all, no Put gets under a Fence that has returned.
	for _, o := range acceptedOps {
		if hi := doneBefore.at(o.inv); hi > o.token {
			v.report(ruleFenceAtomic, "concurrent %s(%q, token %d) was accepted although %s(token %d) had been accepted and returned before it began",
				call(o.token), r, o.token, call(hi), hi)
		}
	}

	// The store ends with the highest accepted Put's value and token,
	// and the highest accepted token as its fence.
	val, tok, err := e.s.Get(e.ctx, r)
	switch {
	case highestPut == 0 && errors.Is(err, fencedlock.ErrNotFound):
	case err != nil:
		v.report(ruleFenceAtomic, "after concurrent Fences and Puts, Get(%q) = %v; want token %d, the highest accepted Put's", r, err, highestPut)
	case fences[tok]:
		v.report(ruleFenceNoValue, "after concurrent Fences and Puts, Get(%q) = (%s, token %d), a token only a Fence used; want token %d, the highest accepted Put's", r, show(val), tok, highestPut)
	case tok != highestPut || !bytes.Equal(val, valueFor(tok)):
		v.report(ruleFenceAtomic, "after concurrent Fences and Puts, Get(%q) = (%s, token %d); want token %d, the highest accepted Put's, with %s",
			r, show(val), tok, highestPut, show(valueFor(highestPut)))
	}
	if highest > 1 {
		e.expectRefused(ruleFenceAtomic, fmt.Sprintf("concurrent Fences and Puts, the highest accepted token %d", highest), "Fence", e.s.Fence(e.ctx, r, highest-1), r, highest-1, highest)
	}
	if highest > 0 {
		if err := e.s.Fence(e.ctx, r, highest); err != nil {
			v.report(ruleFenceAtomic, "after concurrent Fences and Puts, Fence(%q, token %d), the highest accepted token = %v; want it accepted", r, highest, err)
		}
	}

	// Gets: each read a pair one accepted Put wrote, never a Fence's
	// token, and nothing older than a Put that returned before it began.
	putsBefore := newMaxBefore(acceptedPuts)
	n := 0
	for _, ops := range gets {
		for _, o := range ops {
			n++
			if o.err != nil && !errors.Is(o.err, fencedlock.ErrNotFound) {
				v.report(ruleRoundTrip, "concurrent Get(%q) = %v; want a value or an error wrapping fencedlock.ErrNotFound", r, o.err)
				continue
			}
			if o.err != nil {
				o.token, o.value = 0, nil
			} else {
				w, ok := accepted[o.token]
				switch {
				case fences[o.token]:
					v.report(ruleFenceNoValue, "concurrent Get(%q) = (%s, token %d), a token only a Fence used", r, show(o.value), o.token)
				case !ok:
					v.report(ruleTornRead, "concurrent Get(%q) = (%s, token %d): no accepted Put wrote token %d", r, show(o.value), o.token, o.token)
				case !bytes.Equal(o.value, valueFor(o.token)):
					v.report(ruleTornRead, "concurrent Get(%q) = (%s, token %d); the Put with token %d wrote %s", r, show(o.value), o.token, o.token, show(valueFor(o.token)))
				case w.inv > o.resp:
					v.report(ruleStaleRead, "concurrent Get(%q) returned token %d, written by a Put that began after the Get returned", r, o.token)
				}
			}
			if hi := putsBefore.at(o.inv); o.token < hi {
				v.report(ruleStaleRead, "concurrent Get(%q) = token %d (0: not found), but Put(token %d) had been accepted and returned before the Get began", r, o.token, hi)
			}
		}
	}
	e.t.Logf("%d of %d Puts and Fences accepted (%d Puts), %d Gets", len(acceptedOps), concurrentPuts, len(acceptedPuts), n)
}
