package fencetest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencetest"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

func TestMemoryStore(t *testing.T) {
	fencetest.Store(t, func(t *testing.T) fencedlock.Store { return fencedlock.NewMemoryStore() })
}

func TestMemoryStoreZeroValue(t *testing.T) {
	fencetest.Store(t, func(t *testing.T) fencedlock.Store { return new(fencedlock.MemoryStore) })
}

// One store for every subtest: the suite's fresh resource names keep the
// subtests apart.
func TestMemoryStoreShared(t *testing.T) {
	s := fencedlock.NewMemoryStore()
	fencetest.Store(t, func(t *testing.T) fencedlock.Store { return s })
}

func TestRedisStore(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		var n atomic.Int64
		fencetest.Store(t, func(t *testing.T) fencedlock.Store {
			prefix := fmt.Sprintf("%s-s%d", b.Prefix, n.Add(1))
			return fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(prefix))
		})
	})
}

// One store, and the empty prefix: keys are "{<resource>}:value".
func TestRedisStoreSharedEmptyPrefix(t *testing.T) {
	b := redistest.Mini(t)
	s := fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(""))
	fencetest.Store(t, func(t *testing.T) fencedlock.Store { return s })
}

// recorder is a fencetest.TB that records failures instead of failing the
// test, so that the suite can be run on stores that must fail it.
type recorder struct {
	name string
	log  *failures

	mu       sync.Mutex // protects failed and cleanups
	failed   bool
	cleanups []func()
}

// failures is the log of one suite run, shared by its recorders.
type failures struct {
	mu      sync.Mutex // protects entries and logs
	entries []failure
	logs    []string
}

type failure struct{ test, msg string }

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }

func (r *recorder) Logf(format string, args ...any) {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	r.log.logs = append(r.log.logs, r.name+": "+fmt.Sprintf(format, args...))
}

func (r *recorder) Errorf(format string, args ...any) {
	r.log.mu.Lock()
	r.log.entries = append(r.log.entries, failure{r.name, fmt.Sprintf(format, args...)})
	r.log.mu.Unlock()
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}

// Fatalf ends the calling goroutine, which Run started, as t.Fatalf does.
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recorder) runCleanups() {
	r.mu.Lock()
	fs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// Run runs f on a goroutine of its own, so that its Fatalf ends only f,
// and waits for it, as testing.T.Run does.
func (r *recorder) Run(name string, f func(t fencetest.TB)) bool {
	c := &recorder{name: r.name + "/" + name, log: r.log}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.runCleanups()
		defer func() {
			if p := recover(); p != nil {
				c.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		f(c)
	}()
	<-done
	if c.Failed() {
		r.mu.Lock()
		r.failed = true
		r.mu.Unlock()
	}
	return !c.Failed()
}

// runRecorded runs the suite on a recorder, a fresh store from newStore for
// each subtest, and returns the failures.
func runRecorded(newStore func() fencedlock.Store) *recorder {
	root := &recorder{name: "Store", log: &failures{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer root.runCleanups()
		fencetest.RunSuite(root, func(fencetest.TB) fencedlock.Store { return newStore() })
	}()
	<-done
	return root
}

func (r *recorder) report() string {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	var b strings.Builder
	for _, f := range r.log.entries {
		fmt.Fprintf(&b, "--- %s: %s\n", f.test, f.msg)
	}
	return b.String()
}

// failedTests returns the names of the subtests that failed, in order.
func (r *recorder) failedTests() []string {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	var names []string
	seen := make(map[string]bool)
	for _, f := range r.log.entries {
		if !seen[f.test] {
			seen[f.test] = true
			names = append(names, f.test)
		}
	}
	return names
}

// caught reports whether subtest test reported a violation of rule.
func (r *recorder) caught(test, rule string) bool {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	for _, f := range r.log.entries {
		if f.test == "Store/"+test && strings.Contains(f.msg, "violates rule "+rule+": ") {
			return true
		}
	}
	return false
}

// The recorder itself: a correct store passes the suite run on it.
func TestRecorderPassesCorrectStores(t *testing.T) {
	for _, c := range []struct {
		name     string
		newStore func() fencedlock.Store
	}{
		{"MemoryStore", func() fencedlock.Store { return fencedlock.NewMemoryStore() }},
		{"model", func() fencedlock.Store { return newBroken(flawless) }},
	} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			rec := runRecorded(c.newStore)
			if rec.Failed() {
				t.Errorf("the suite failed a correct store:\n%s", rec.report())
			}
		})
	}
}

// The recorder: Fatalf ends the subtest, not the suite, and Cleanup runs.
func TestRecorderFatalEndsSubtestOnly(t *testing.T) {
	root := &recorder{name: "root", log: &failures{}}
	var after, cleaned, second bool
	root.Run("first", func(t fencetest.TB) {
		t.Cleanup(func() { cleaned = true })
		t.Fatalf("stop")
		after = true
	})
	root.Run("second", func(t fencetest.TB) { second = true })
	if after || !cleaned || !second || !root.Failed() {
		t.Errorf("after Fatalf: code after it ran %v, cleanup ran %v, next subtest ran %v, root failed %v; want false, true, true, true",
			after, cleaned, second, root.Failed())
	}
}

// The negative controls: stores with one flaw each, and the subtest and
// rule of the suite that must catch each.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	for _, c := range []struct {
		flaw flaw
		test string // the subtest that must fail
		rule string // the rule its message must name
		// only: when set, no other subtest may fail, but also if it is
		// set. Flaws that only concurrency shows use it, to prove the
		// concurrent checks are what finds them.
		only bool
		also string
	}{
		{ignoresToken, "LowerToken", "stale-token", false, ""},
		{ignoresToken, "Concurrent", "atomic-fence", false, ""},
		{nonAtomic, "Concurrent", "atomic-fence", true, "FenceConcurrent"},
		{tornReads, "Concurrent", "torn-read", true, "FenceConcurrent"},
		{keepsCallerSlice, "ValueCopies", "copy", true, ""},
		{returnsInternalSlice, "ValueCopies", "copy", true, ""},
		{notFoundUntyped, "GetNeverWritten", "not-found", false, ""},
		{rejectsEqual, "EqualToken", "equal-token", false, ""},
		{wrongStaleFields, "LowerToken", "stale-token", false, ""},
		{floatTokens, "TokenRange", "token-range", true, ""},
		{refusesAbove2p53, "TokenRange", "token-range", true, ""},
		{ignoresContext, "DoneContext", "context", true, ""},
		{sharedFence, "IndependentResources", "independent-resources", false, ""},
		{acceptsZero, "ZeroToken", "zero-token", true, ""},
		{acceptsEmptyResource, "EmptyResource", "empty-resource", true, ""},
		{sanitizesNames, "ResourceNames", "resource-names", false, ""},
		{fenceNoRaise, "FenceLowerToken", "fence-refuses-lower", false, ""},
		{fenceLowersWhenRefused, "FenceNeverLowers", "fence-never-lowers", false, ""},
		{fenceWritesValue, "FenceHoldsNoValue", "fence-holds-no-value", false, ""},
		{getReturnsFence, "FenceHoldsNoValue", "fence-holds-no-value", false, ""},
		{fenceAcceptsZero, "FenceInput", "fence-input", true, ""},
		{fenceAcceptsBadNames, "FenceInput", "fence-input", true, ""},
		{fenceIgnoresContext, "FenceInput", "fence-input", true, ""},
		{fenceRaisesOnDoneContext, "FenceInput", "fence-input", true, ""},
		{fenceNonAtomic, "FenceConcurrent", "fence-atomic", true, ""},
		{fenceRacesPut, "FenceConcurrent", "fence-atomic", true, ""},
		{fenceFloatTokens, "TokenRange", "token-range", true, ""},
		{fenceFloatFence, "TokenRange", "token-range", true, ""},
	} {
		c := c
		t.Run(fmt.Sprintf("%v/%s", c.flaw, c.test), func(t *testing.T) {
			// A race shows only when the goroutines interleave: give
			// the racy flaws three runs.
			var rec *recorder
			for attempt := 1; attempt <= 3; attempt++ {
				rec = runRecorded(func() fencedlock.Store { return newBroken(c.flaw) })
				if rec.caught(c.test, c.rule) {
					break
				}
				t.Logf("run %d did not catch it", attempt)
			}
			if !rec.caught(c.test, c.rule) {
				t.Fatalf("the suite did not report rule %s in subtest %s for a store that %v; it reported:\n%s", c.rule, c.test, c.flaw, rec.report())
			}
			if !rec.Failed() {
				t.Errorf("the suite reported rule %s but did not fail", c.rule)
			}
			if c.only {
				allowed := "Store/" + c.test
				if c.also != "" {
					allowed += " and Store/" + c.also
				}
				for _, f := range rec.failedTests() {
					if f != "Store/"+c.test && (c.also == "" || f != "Store/"+c.also) {
						t.Errorf("subtest %s failed; want only %s to fail:\n%s", f, allowed, rec.report())
					}
				}
			}
			report := strings.SplitAfter(rec.report(), "\n")
			if len(report) > 8 {
				report = append(report[:8], "...\n")
			}
			t.Logf("reported:\n%s", strings.Join(report, ""))
		})
	}
}

// flaw is the one defect of a brokenStore.
type flaw int

const (
	flawless                 flaw = iota
	ignoresToken                  // accepts every token
	nonAtomic                     // checks the token and writes in separate critical sections
	tornReads                     // keeps values and tokens apart, written and read in two steps
	keepsCallerSlice              // Put keeps the caller's slice
	returnsInternalSlice          // Get returns the stored slice
	notFoundUntyped               // Get of a missing resource returns an error not wrapping ErrNotFound
	rejectsEqual                  // refuses a token equal to the fence
	wrongStaleFields              // StaleTokenError with Token and Current swapped
	floatTokens                   // compares tokens as float64, as a Lua script would
	ignoresContext                // Put and Get work on with a done context
	sharedFence                   // one fence for all resources
	acceptsZero                   // Put treats the zero token as the lowest token
	acceptsEmptyResource          // Put and Get store under ""
	sanitizesNames                // replaces unusual characters in names, so names collide
	refusesAbove2p53              // refuses tokens a float64 cannot hold, though a Locker grants them
	fenceNoRaise                  // Fence checks the token but does not raise the fence
	fenceLowersWhenRefused        // a refused Fence sets the fence to its token
	fenceWritesValue              // Fence writes an empty value with its token
	getReturnsFence               // Get returns the fence as the value's token
	fenceAcceptsZero              // Fence with the zero token returns nil
	fenceAcceptsBadNames          // Fence takes an empty name and one longer than MaxResourceLen
	fenceIgnoresContext           // Fence works on with a done context
	fenceRaisesOnDoneContext      // Fence with a done context raises the fence, then returns ctx.Err()
	fenceNonAtomic                // Fence checks the token and sets the fence in separate critical sections
	fenceRacesPut                 // Puts exclude each other but not Fences: a Fence between a Put's check and write is undone
	fenceFloatTokens              // Fence (not Put) compares tokens as float64, as a Lua script using tonumber would
	fenceFloatFence               // and keeps the fence it raises as a float64 too
)

func (f flaw) String() string {
	return [...]string{
		"is correct", "ignores the token", "checks and writes non-atomically", "has torn reads",
		"keeps the caller's slice", "returns its own slice", "returns an untyped not-found error",
		"refuses an equal token", "swaps Token and Current", "compares tokens as float64",
		"ignores the context", "shares one fence between resources", "accepts the zero token",
		"accepts the empty resource", "sanitizes resource names", "refuses tokens above 2^53",
		"fences without raising the fence", "lowers the fence on a refused Fence", "writes a value on Fence",
		"reads the fence as the value's token", "fences with the zero token", "fences bad names",
		"fences with a done context", "raises the fence with a done context", "fences non-atomically",
		"lets a Put undo a concurrent Fence", "fences comparing tokens as float64",
		"fences comparing and keeping tokens as float64",
	}[f]
}

// brokenStore is a Store with one flaw; without one it is correct. It is
// safe for concurrent use.
type brokenStore struct {
	flaw flaw

	mu     sync.Mutex                  // protects data, fences and fence
	data   map[string]entry            // the values, except for tornReads
	fences map[string]fencedlock.Token // the fence of each resource
	fence  fencedlock.Token            // sharedFence: the highest token of any resource

	putMu sync.Mutex                  // tornReads: serializes Puts and Fences; fenceRacesPut: serializes Puts
	valMu sync.Mutex                  // tornReads: protects vals
	vals  map[string][]byte           // tornReads: the values
	tokMu sync.Mutex                  // tornReads: protects toks
	toks  map[string]fencedlock.Token // tornReads: the tokens
}

type entry struct {
	value []byte
	token fencedlock.Token
}

func newBroken(f flaw) *brokenStore {
	return &brokenStore{flaw: f, data: make(map[string]entry), fences: make(map[string]fencedlock.Token),
		vals: make(map[string][]byte), toks: make(map[string]fencedlock.Token)}
}

func (s *brokenStore) key(resource string) string {
	if s.flaw == sanitizesNames {
		return strings.Map(func(r rune) rune {
			if r == '#' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
				return r
			}
			return '_'
		}, resource)
	}
	return resource
}

func (s *brokenStore) check(resource string, current, token fencedlock.Token) error {
	if token == 0 && s.flaw != acceptsZero {
		return fencedlock.CheckToken(resource, token, current)
	}
	switch s.flaw {
	case ignoresToken:
		return nil
	case rejectsEqual:
		if token <= current {
			return &fencedlock.StaleTokenError{Resource: resource, Token: token, Current: current}
		}
		return nil
	case wrongStaleFields:
		if token < current {
			return &fencedlock.StaleTokenError{Resource: resource, Token: current, Current: token}
		}
		return nil
	case floatTokens:
		if float64(token) < float64(current) {
			return &fencedlock.StaleTokenError{Resource: resource, Token: token, Current: current}
		}
		return nil
	case acceptsZero:
		if token < current {
			return &fencedlock.StaleTokenError{Resource: resource, Token: token, Current: current}
		}
		return nil
	}
	return fencedlock.CheckToken(resource, token, current)
}

// current returns the fence that a call on key k checks against. The
// caller holds s.mu.
func (s *brokenStore) current(k string) fencedlock.Token {
	if s.flaw == sharedFence {
		return s.fence
	}
	return s.fences[k]
}

// raise sets k's fence to token, and the shared fence to the highest of
// all. The caller holds s.mu.
func (s *brokenStore) raise(k string, token fencedlock.Token) {
	s.fences[k] = token
	if token > s.fence {
		s.fence = token
	}
}

func (s *brokenStore) Put(ctx context.Context, resource string, token fencedlock.Token, value []byte) error {
	if resource == "" && s.flaw != acceptsEmptyResource {
		return fmt.Errorf("%w: empty resource", fencedlock.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil && s.flaw != ignoresContext {
		return err
	}
	if s.flaw == refusesAbove2p53 && token > 1<<53-1 {
		return fmt.Errorf("%w: token %d is above 2^53-1", fencedlock.ErrInvalidToken, token)
	}
	v := append([]byte{}, value...)
	if s.flaw == keepsCallerSlice {
		v = value
	}
	k := s.key(resource)
	switch s.flaw {
	case nonAtomic, fenceRacesPut:
		if s.flaw == fenceRacesPut {
			s.putMu.Lock()
			defer s.putMu.Unlock()
		}
		s.mu.Lock()
		current := s.current(k)
		s.mu.Unlock()
		if err := s.check(resource, current, token); err != nil {
			return err
		}
		time.Sleep(50 * time.Microsecond)
		s.mu.Lock()
		s.data[k] = entry{v, token}
		s.raise(k, token)
		s.mu.Unlock()
		return nil
	case tornReads:
		s.putMu.Lock()
		defer s.putMu.Unlock()
		s.mu.Lock()
		current := s.current(k)
		s.mu.Unlock()
		if err := s.check(resource, current, token); err != nil {
			return err
		}
		s.valMu.Lock()
		s.vals[k] = v
		s.valMu.Unlock()
		time.Sleep(20 * time.Microsecond)
		s.tokMu.Lock()
		s.toks[k] = token
		s.tokMu.Unlock()
		s.mu.Lock()
		s.raise(k, token)
		s.mu.Unlock()
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(resource, s.current(k), token); err != nil {
		return err
	}
	s.data[k] = entry{v, token}
	s.raise(k, token)
	return nil
}

func (s *brokenStore) Get(ctx context.Context, resource string) ([]byte, fencedlock.Token, error) {
	if resource == "" && s.flaw != acceptsEmptyResource {
		return nil, 0, fmt.Errorf("%w: empty resource", fencedlock.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil && s.flaw != ignoresContext {
		return nil, 0, err
	}
	k := s.key(resource)
	var e entry
	var ok bool
	if s.flaw == tornReads {
		s.valMu.Lock()
		e.value, ok = s.vals[k]
		s.valMu.Unlock()
		time.Sleep(20 * time.Microsecond)
		s.tokMu.Lock()
		e.token = s.toks[k]
		s.tokMu.Unlock()
	} else {
		s.mu.Lock()
		e, ok = s.data[k]
		if s.flaw == getReturnsFence {
			e.token = s.fences[k]
		}
		s.mu.Unlock()
	}
	if !ok {
		if s.flaw == notFoundUntyped {
			return nil, 0, errors.New("not found")
		}
		return nil, 0, fmt.Errorf("%w: %q", fencedlock.ErrNotFound, resource)
	}
	if s.flaw == returnsInternalSlice {
		return e.value, e.token, nil
	}
	return append([]byte{}, e.value...), e.token, nil
}

func (s *brokenStore) Fence(ctx context.Context, resource string, token fencedlock.Token) error {
	if (resource == "" || len(resource) > fencedlock.MaxResourceLen) && s.flaw != fenceAcceptsBadNames {
		return fmt.Errorf("%w: resource name of %d bytes", fencedlock.ErrInvalidArgument, len(resource))
	}
	if err := ctx.Err(); err != nil && s.flaw != fenceIgnoresContext && s.flaw != fenceRaisesOnDoneContext {
		return err
	}
	if token == 0 {
		if s.flaw == fenceAcceptsZero {
			return nil
		}
		return fencedlock.CheckToken(resource, token, 0)
	}
	k := s.key(resource)
	switch s.flaw {
	case tornReads:
		s.putMu.Lock()
		defer s.putMu.Unlock()
	case fenceNonAtomic:
		s.mu.Lock()
		current := s.current(k)
		s.mu.Unlock()
		if err := s.check(resource, current, token); err != nil {
			return err
		}
		time.Sleep(50 * time.Microsecond)
		s.mu.Lock()
		s.raise(k, token)
		s.mu.Unlock()
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.check(resource, s.current(k), token)
	if s.flaw == fenceFloatTokens || s.flaw == fenceFloatFence {
		err = nil
		if current := s.current(k); float64(token) < float64(current) {
			err = &fencedlock.StaleTokenError{Resource: resource, Token: token, Current: current}
		}
		if err == nil && s.flaw == fenceFloatFence {
			token = fencedlock.Token(float64(token))
		}
	}
	switch {
	case err != nil && s.flaw == fenceLowersWhenRefused:
		s.raise(k, token)
		return err
	case err != nil:
		return err
	case s.flaw == fenceNoRaise:
		return nil
	case s.flaw == fenceWritesValue:
		s.data[k] = entry{[]byte{}, token}
	}
	if token > s.fences[k] {
		s.raise(k, token)
	}
	if s.flaw == fenceRaisesOnDoneContext {
		return ctx.Err()
	}
	return nil
}
