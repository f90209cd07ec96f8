package fencetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fencedlock/fencedlock"
)

// The negative controls of FuzzStore: each store has one flaw, and the
// seeds alone must catch it, naming the rule it breaks.
func TestFuzzStoreCatchesBrokenStores(t *testing.T) {
	for _, c := range []struct {
		flaw fuzzFlaw
		want string // in the message of the first failing seed
	}{
		{acceptsLower, "violates rule stale-token"},
		{wrongGetToken, "violates rule round-trip"},
		{rejectsEqualToken, "violates rule equal-token"},
		{writesWhenRefused, "violates rule refused-unchanged"},
		{swapsStaleFields, "&StaleTokenError{Resource: \"fuzz-"},
		{acceptsZeroToken, "violates rule zero-token"},
		{untypedNotFound, "violates rule not-found"},
		{loses1Byte, "violates rule round-trip"},
		{sharesFence, "violates rule"},
		{networkError, "connection reset by peer"},
		{fenceDoesNotRaise, "violates rule fence-refuses-lower"},
		{fenceWritesValue, "violates rule fence-holds-no-value"},
		{fenceLowersWhenRefused, "violates rule fence-never-lowers"},
		{getReturnsFence, "violates rule fence-holds-no-value"},
		{fenceAcceptsZeroToken, "violates rule fence-input"},
		{putIgnoresFence, "violates rule fence-refuses-lower"},
	} {
		c := c
		t.Run(c.flaw.String(), func(t *testing.T) {
			s := &fuzzBroken{flaw: c.flaw}
			var first error
			failed := 0
			for i, seed := range fuzzSeeds() {
				if err := checkOps(context.Background(), s, fuzzNames("neg", uint64(i)), seed); err != nil {
					failed++
					if first == nil {
						first = err
					}
				}
			}
			if first == nil {
				t.Fatalf("no seed failed on a store that %v", c.flaw)
			}
			if !strings.Contains(first.Error(), c.want) {
				t.Errorf("the first failure does not contain %q:\n%v", c.want, first)
			}
			t.Logf("%d of %d seeds fail; the first:\n%v", failed, len(fuzzSeeds()), first)
		})
	}
}

// The positive controls: correct stores pass every seed, also when one
// store serves all of them.
func TestFuzzStoreSeedsPassCorrectStores(t *testing.T) {
	for _, c := range []struct {
		name string
		s    fencedlock.Store
	}{
		{"MemoryStore", fencedlock.NewMemoryStore()},
		{"zero MemoryStore", new(fencedlock.MemoryStore)},
		{"fuzzBroken without a flaw", &fuzzBroken{}},
	} {
		for i, seed := range fuzzSeeds() {
			if err := checkOps(context.Background(), c.s, fuzzNames("pos", uint64(i)), seed); err != nil {
				t.Errorf("%s, seed %d: %v", c.name, i, err)
			}
		}
	}
}

// A failure message lists the operations that led to it, with the
// resource names, so that it can be reproduced by hand.
func TestCheckOpsMessage(t *testing.T) {
	in := bytes.Join([][]byte{
		encodeOp(fuzzPut, 2, tok8, "new"),
		encodeOp(fuzzGet, 2, 0, ""),
		encodeOp(fuzzPut, 2, tok3, "old"),
		encodeOp(fuzzGet, 2, 0, ""),
	}, nil)
	names := fuzzNames("msg", 1)
	err := checkOps(context.Background(), &fuzzBroken{flaw: acceptsLower}, names, in)
	if err == nil {
		t.Fatal("checkOps passed a store that accepts a lower token")
	}
	for _, want := range []string{
		"operations that passed: 2",
		"then operation 2:",
		names[2],
		` 0: Put(r2, token 8, "new")`,
		" 1: Get(r2)",
		`Put(r2, token 3, "old") while the fence is 8 = <nil>; want a *fencedlock.StaleTokenError`,
		"violates rule stale-token",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message does not contain %q:\n%v", want, err)
		}
	}
}

func TestDecodeOps(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []byte
		want []fuzzOp
	}{
		{"empty", nil, nil},
		{"get", []byte{0x01, 0x03, 0x05, 0x07}, []fuzzOp{{kind: fuzzGet, res: 0}, {kind: fuzzGet, res: 1}, {kind: fuzzGet, res: 2}, {kind: fuzzGet, res: 0}}},
		{"put, every token", []byte{0x00, 0x08, 0x10, 0x18, 0x20, 0x28, 0x30, 0x3a}, []fuzzOp{
			{token: 0, value: []byte{}}, {token: 1, value: []byte{}}, {token: 2, value: []byte{}}, {token: 3, value: []byte{}},
			{token: 5, value: []byte{}}, {token: 8, value: []byte{}}, {token: 13, value: []byte{}}, {res: 1, token: 1<<63 - 1, value: []byte{}},
		}},
		{"fence, every token", []byte{0x81, 0x89, 0x91, 0x99, 0xa1, 0xa9, 0xb1, 0xbd}, []fuzzOp{
			{kind: fuzzFence, token: 0}, {kind: fuzzFence, token: 1}, {kind: fuzzFence, token: 2}, {kind: fuzzFence, token: 3},
			{kind: fuzzFence, token: 5}, {kind: fuzzFence, token: 8}, {kind: fuzzFence, token: 13}, {kind: fuzzFence, res: 2, token: 1<<63 - 1},
		}},
		{"values", []byte{0x5c, 'a', 0x9c, 'b', 'c', 0xdc, 'd', 'e', 'f', 0x01}, []fuzzOp{
			{res: 2, token: 3, value: []byte("a")}, {res: 2, token: 3, value: []byte("bc")}, {res: 2, token: 3, value: []byte("def")}, {kind: fuzzGet},
		}},
		{"value cut short", []byte{0xc0, 'x'}, []fuzzOp{{token: 0, value: []byte("x")}}},
		{"header last", []byte{0xc0}, []fuzzOp{{token: 0, value: []byte{}}}},
		// Bit 6 means nothing to a Get or a Fence: the next byte is
		// the next header.
		{"get bits ignored", []byte{0x79, 0x01}, []fuzzOp{{kind: fuzzGet, res: 0}, {kind: fuzzGet, res: 0}}},
		{"fence bit 6 ignored", []byte{0xff, 0x01}, []fuzzOp{{kind: fuzzFence, res: 0, token: 1<<63 - 1}, {kind: fuzzGet, res: 0}}},
	} {
		got := decodeOps(c.in)
		if fmt.Sprint(got) != fmt.Sprint(c.want) || len(got) != len(c.want) {
			t.Errorf("%s: decodeOps(%q) = %v; want %v", c.name, c.in, got, c.want)
		}
		for i := range got {
			if i < len(c.want) && (got[i].kind != c.want[i].kind || (got[i].value == nil) != (c.want[i].value == nil)) {
				t.Errorf("%s: op %d: kind %d, value %#v; want kind %d, value %#v", c.name, i, got[i].kind, got[i].value, c.want[i].kind, c.want[i].value)
			}
		}
	}
	if n := len(decodeOps(make([]byte, 10*maxFuzzOps))); n != maxFuzzOps {
		t.Errorf("decodeOps of %d zero bytes = %d operations; want %d", 10*maxFuzzOps, n, maxFuzzOps)
	}
}

// encodeOp and decodeOps agree on every operation the seeds can name.
func TestEncodeOp(t *testing.T) {
	for res := 0; res < 3; res++ {
		if got := decodeOps(encodeOp(fuzzGet, res, 0, "")); len(got) != 1 || got[0].kind != fuzzGet || got[0].res != res {
			t.Errorf("Get(r%d) decodes as %v", res, got)
		}
		for tok := range fuzzTokens {
			want := fuzzOp{kind: fuzzFence, res: res, token: fuzzTokens[tok]}
			if got := decodeOps(encodeOp(fuzzFence, res, tok, "")); len(got) != 1 || got[0].String() != want.String() || got[0].kind != fuzzFence {
				t.Errorf("%v decodes as %v", want, got)
			}
			for _, v := range []string{"", "a", "bc", "def"} {
				want := fuzzOp{res: res, token: fuzzTokens[tok], value: []byte(v)}
				got := decodeOps(encodeOp(fuzzPut, res, tok, v))
				if len(got) != 1 || got[0].String() != want.String() || got[0].kind != fuzzPut {
					t.Errorf("%v decodes as %v", want, got)
				}
			}
		}
	}
}

// fuzzFlaw is the one defect of a fuzzBroken.
type fuzzFlaw int

const (
	noFlaw                 fuzzFlaw = iota
	acceptsLower                    // Put accepts a token below the fence
	wrongGetToken                   // Get returns the first token accepted, not the last
	rejectsEqualToken               // Put refuses a token equal to the fence
	writesWhenRefused               // a stale Put writes its value and still returns the error
	swapsStaleFields                // StaleTokenError has Token and Current swapped
	acceptsZeroToken                // Put accepts the zero token
	untypedNotFound                 // Get of a missing resource returns an error not wrapping ErrNotFound
	loses1Byte                      // values of one byte read back empty
	sharesFence                     // one fence for all resources
	networkError                    // the fourth call fails as a network would
	fenceDoesNotRaise               // Fence checks the token but leaves the fence
	fenceWritesValue                // Fence writes an empty value with its token
	fenceLowersWhenRefused          // a refused Fence sets the fence to its token
	getReturnsFence                 // Get returns the fence as the value's token
	fenceAcceptsZeroToken           // Fence with the zero token returns nil
	putIgnoresFence                 // Put checks against the last Put's token, not the fence
)

func (f fuzzFlaw) String() string {
	return [...]string{"noFlaw", "acceptsLower", "wrongGetToken", "rejectsEqualToken", "writesWhenRefused",
		"swapsStaleFields", "acceptsZeroToken", "untypedNotFound", "loses1Byte", "sharesFence", "networkError",
		"fenceDoesNotRaise", "fenceWritesValue", "fenceLowersWhenRefused", "getReturnsFence", "fenceAcceptsZeroToken",
		"putIgnoresFence"}[f]
}

// fuzzBroken is a Store in memory with one flaw; without one it is
// correct. It is safe for concurrent use.
type fuzzBroken struct {
	flaw fuzzFlaw

	mu    sync.Mutex // protects the fields below
	data  map[string]fuzzEntry
	first map[string]fencedlock.Token // the first token accepted, by resource
	fence fencedlock.Token            // the highest token accepted on any resource
	calls int
}

// start counts a call and fails it when the flaw says so; it makes the
// maps. The caller holds s.mu.
func (s *fuzzBroken) start() error {
	s.calls++
	if s.flaw == networkError && s.calls%4 == 0 {
		return errors.New("read tcp 127.0.0.1:51234->127.0.0.1:6379: read: connection reset by peer")
	}
	if s.data == nil {
		s.data = make(map[string]fuzzEntry)
		s.first = make(map[string]fencedlock.Token)
	}
	return nil
}

// check applies the rule, and the flaws that bend it, to a Put or Fence
// with token on resource. The caller holds s.mu.
func (s *fuzzBroken) check(resource string, token fencedlock.Token) error {
	current := s.data[resource].fence
	switch s.flaw {
	case sharesFence:
		current = s.fence
	case putIgnoresFence:
		current = s.data[resource].token
	}
	err := fencedlock.CheckToken(resource, token, current)
	var se *fencedlock.StaleTokenError
	switch {
	case s.flaw == acceptsLower && errors.As(err, &se):
		return nil
	case s.flaw == rejectsEqualToken && token == current:
		return &fencedlock.StaleTokenError{Resource: resource, Token: token, Current: current}
	case s.flaw == swapsStaleFields && errors.As(err, &se):
		return &fencedlock.StaleTokenError{Resource: resource, Token: current, Current: token}
	}
	return err
}

// raise raises resource's fence, and the shared one, to token. The caller
// holds s.mu.
func (s *fuzzBroken) raise(resource string, token fencedlock.Token) {
	e := s.data[resource]
	if token > e.fence {
		e.fence = token
		s.data[resource] = e
	}
	if token > s.fence {
		s.fence = token
	}
}

func (s *fuzzBroken) Put(ctx context.Context, resource string, token fencedlock.Token, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	var err error
	switch {
	case token == 0 && s.flaw != acceptsZeroToken:
		return fencedlock.CheckToken(resource, token, 0)
	case token != 0:
		err = s.check(resource, token)
	}
	var se *fencedlock.StaleTokenError
	if s.flaw == writesWhenRefused && errors.As(err, &se) {
		e := s.data[resource]
		s.data[resource] = fuzzEntry{exists: true, value: append([]byte{}, value...), token: e.fence, fence: e.fence}
		return err
	}
	if err != nil {
		return err
	}
	if s.flaw == loses1Byte && len(value) == 1 {
		value = nil
	}
	if _, ok := s.first[resource]; !ok {
		s.first[resource] = token
	}
	e := s.data[resource]
	s.data[resource] = fuzzEntry{exists: true, value: append([]byte{}, value...), token: token, fence: e.fence}
	s.raise(resource, token)
	return nil
}

func (s *fuzzBroken) Get(ctx context.Context, resource string) ([]byte, fencedlock.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return nil, 0, err
	}
	e := s.data[resource]
	if !e.exists {
		if s.flaw == untypedNotFound {
			return nil, 0, errors.New("no such resource")
		}
		return nil, 0, fmt.Errorf("%w: %q", fencedlock.ErrNotFound, resource)
	}
	switch s.flaw {
	case wrongGetToken:
		e.token = s.first[resource]
	case getReturnsFence:
		e.token = e.fence
	}
	return append([]byte{}, e.value...), e.token, nil
}

func (s *fuzzBroken) Fence(ctx context.Context, resource string, token fencedlock.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	if token == 0 {
		if s.flaw == fenceAcceptsZeroToken {
			return nil
		}
		return fencedlock.CheckToken(resource, token, 0)
	}
	err := s.check(resource, token)
	var se *fencedlock.StaleTokenError
	switch {
	case s.flaw == fenceLowersWhenRefused && errors.As(err, &se):
		e := s.data[resource]
		e.fence = token
		s.data[resource] = e
		return err
	case err != nil:
		return err
	case s.flaw == fenceDoesNotRaise:
		return nil
	case s.flaw == fenceWritesValue:
		e := s.data[resource]
		e.exists, e.value, e.token = true, []byte{}, token
		s.data[resource] = e
	}
	s.raise(resource, token)
	return nil
}
