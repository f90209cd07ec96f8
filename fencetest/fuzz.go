package fencetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencedlock/fencedlock"
)

// FuzzStore fuzzes s with sequences of Puts, Fences and Gets over three
// resources, checking each result against a model of the Store contract
// kept by the helper: for every resource its fence, its value and the
// token that wrote it, and whether a Put was ever accepted. Call it from
// a fuzz target of the implementation's package:
//
//	func FuzzStore(f *testing.F) { fencetest.FuzzStore(f, mystore.New(f.TempDir())) }
//
// FuzzStore adds its own seed inputs with f.Add (rising, equal, falling
// and zero tokens, Gets of resources never written, the highest token,
// Fences above, below and between Puts), so that plain go test runs them
// as ordinary subtests; go test -fuzz explores from there. It then calls
// f.Fuzz: a fuzz target must call nothing else after it.
//
// An input is a sequence of operations, one header byte each, read from
// the start:
//
//   - bit 0: 0 for a Put; 1 for a Get, or for a Fence when bit 7 is set
//     too.
//   - bits 1-2: the resource, 0, 1 or 2 (3 is resource 0).
//   - bits 3-5: the token of a Put or Fence, an index into 0, 1, 2, 3,
//     5, 8, 13 and 2^63-1 (the highest token a Locker grants, which every
//     store must accept), so that equal and lower tokens are common.
//   - bits 6-7: the length of a Put's value, 0 to 3 bytes, taken from the
//     bytes after the header (fewer where the input ends). A Get or Fence
//     has no value; bit 6 means nothing to them.
//
// Operations after the 64th are ignored, so one input costs at most 67
// round trips on a networked store: after the operations, FuzzStore reads
// back all three resources.
//
// The rules checked are those of the package documentation that one
// goroutine can see: a Put with the zero token fails with an error
// wrapping fencedlock.ErrInvalidToken (zero-token), and so does a Fence
// (fence-input); a Put or Fence with a token below the fence fails with a
// *fencedlock.StaleTokenError carrying the resource, the rejected token
// and the fence (stale-token, or fence-refuses-lower where a Fence raised
// the fence, or fence-never-lowers where a refused Fence's token would
// have let it through); all of these change nothing (refused-unchanged);
// a Put or Fence with an equal or higher token is accepted (equal-token,
// higher-token, fence-refuses-lower); Get of a resource never written
// fails with an error wrapping fencedlock.ErrNotFound (not-found), also
// when it was fenced (fence-holds-no-value); and Get returns the value
// and token of the last accepted Put (round-trip), whatever Fences came
// after it (fence-holds-no-value). A failure names the rule, and lists
// the resource names and the operations that led to it; a store that
// mixes resources up (independent-resources) fails one of these rules.
// Any other error, such as a network error, fails the input too, named
// as the rule of the operation it broke.
//
// s is shared by every input, and fuzzing runs inputs one after another
// on the same store: FuzzStore gives each input resource names of its
// own ("fuzz-<random>-<input>-<resource>"), so s need not be empty and
// may be shared with other tests. Each input is bounded by a one-minute
// timeout.
func FuzzStore(f *testing.F, s fencedlock.Store) {
	f.Helper()
	if s == nil {
		f.Fatal("fencetest: FuzzStore called with a nil Store")
	}
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	run := newSuffix()
	var inputs atomic.Uint64
	f.Fuzz(func(t *testing.T, ops []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		names := fuzzNames(run, inputs.Add(1))
		if err := checkOps(ctx, s, names, ops); err != nil {
			t.Fatal(err)
		}
	})
}

// maxFuzzOps is the most operations one input runs.
const maxFuzzOps = 64

// fuzzTokens are the tokens a Put or Fence chooses from, by bits 3-5 of
// its header.
var fuzzTokens = [8]fencedlock.Token{0, 1, 2, 3, 5, 8, 13, maxGrantedToken}

// fuzzKind is the method an operation calls.
type fuzzKind int

const (
	fuzzPut fuzzKind = iota
	fuzzGet
	fuzzFence
)

// fuzzOp is one decoded operation.
type fuzzOp struct {
	kind  fuzzKind
	res   int // 0, 1 or 2
	token fencedlock.Token
	value []byte // a Put's; never nil for a Put
}

func (op fuzzOp) String() string {
	switch op.kind {
	case fuzzGet:
		return fmt.Sprintf("Get(r%d)", op.res)
	case fuzzFence:
		return fmt.Sprintf("Fence(r%d, token %d)", op.res, op.token)
	}
	return fmt.Sprintf("Put(r%d, token %d, %q)", op.res, op.token, op.value)
}

// decodeOps decodes an input as FuzzStore documents it.
func decodeOps(in []byte) []fuzzOp {
	var ops []fuzzOp
	for len(in) > 0 && len(ops) < maxFuzzOps {
		h := in[0]
		in = in[1:]
		op := fuzzOp{res: int(h>>1&3) % 3}
		switch {
		case h&1 == 0:
			op.token = fuzzTokens[h>>3&7]
			n := int(h >> 6)
			if n > len(in) {
				n = len(in)
			}
			op.value = append([]byte{}, in[:n]...)
			in = in[n:]
		case h&0x80 != 0:
			op.kind = fuzzFence
			op.token = fuzzTokens[h>>3&7]
		default:
			op.kind = fuzzGet
		}
		ops = append(ops, op)
	}
	return ops
}

// encodeOp is the inverse of decodeOps for one operation, for the seeds:
// tokenIdx indexes fuzzTokens (a Get ignores it), and value, a Put's, has
// at most 3 bytes.
func encodeOp(kind fuzzKind, res, tokenIdx int, value string) []byte {
	switch kind {
	case fuzzGet:
		return []byte{byte(res<<1 | 1)}
	case fuzzFence:
		return []byte{byte(0x80 | tokenIdx<<3 | res<<1 | 1)}
	}
	return append([]byte{byte(len(value)<<6 | tokenIdx<<3 | res<<1)}, value...)
}

// Indexes into fuzzTokens, for the seeds.
const (
	tok0 = iota
	tok1
	tok2
	tok3
	tok5
	tok8
	tok13
	tokMax
)

// fuzzSeeds returns FuzzStore's seed inputs.
func fuzzSeeds() [][]byte {
	put := func(res, tok int, v string) []byte { return encodeOp(fuzzPut, res, tok, v) }
	get := func(res int) []byte { return encodeOp(fuzzGet, res, 0, "") }
	fence := func(res, tok int) []byte { return encodeOp(fuzzFence, res, tok, "") }
	seq := func(ops ...[]byte) []byte { return bytes.Join(ops, nil) }
	return [][]byte{
		// Gets of resources never written.
		seq(get(0), get(1), get(2)),
		// Rising tokens, values of every length, an empty one among them.
		seq(put(0, tok1, "a"), get(0), put(0, tok2, "bb"), get(0), put(0, tok3, ""), get(0), put(0, tok13, "xyz"), get(0)),
		// Equal tokens: one holder writing many times.
		seq(put(1, tok5, "one"), put(1, tok5, "two"), get(1), put(1, tok5, ""), get(1), put(1, tok5, "3"), get(1)),
		// Falling tokens: refused, and the value stays.
		seq(put(2, tok13, "new"), put(2, tok8, "old"), get(2), put(2, tok1, ""), get(2), put(2, tok13, "eq"), get(2)),
		// The zero token, on a resource never written and on one written.
		seq(put(0, tok0, "z"), get(0), put(0, tok3, "v"), put(0, tok0, "zz"), get(0), put(0, tok2, "lo"), get(0)),
		// The highest token every store accepts, then lower ones.
		seq(put(1, tokMax, "max"), get(1), put(1, tok13, "lo"), get(1), put(1, tokMax, ""), get(1)),
		// Resources side by side: a token on one fences no other.
		seq(put(0, tok8, "r0"), put(1, tok2, "r1"), put(2, tok0, "r2"), get(0), get(1), get(2),
			put(1, tok5, "r1b"), put(0, tok3, "r0b"), put(2, tok1, ""), get(0), get(1), get(2)),
		// Raw bytes: a Fence with the highest token (every bit set),
		// resource 3 (read as 0), and a value cut short by the end of
		// the input.
		{0xff, 0xfe, 'a', 'b', 'c', 0xd6, 'x'},
		// A Fence on a resource never written: no value, lower tokens
		// refused, the fence's own passes.
		seq(fence(0, tok5), get(0), put(0, tok3, "lo"), get(0), fence(0, tok3), get(0), put(0, tok5, "eq"), get(0), fence(0, tok5), get(0)),
		// A Fence above a written value: Get returns the writer's token,
		// and the writer's token is refused.
		seq(put(1, tok2, "v"), fence(1, tok8), get(1), put(1, tok5, "x"), put(1, tok2, "y"), get(1), fence(1, tok3), get(1),
			put(1, tok8, "w"), get(1), fence(1, tok13), get(1), fence(1, tok8), get(1)),
		// A refused Fence leaves the fence where it was.
		seq(fence(2, tok13), fence(2, tok2), put(2, tok3, "a"), put(2, tok8, "b"), fence(2, tok5), get(2), put(2, tok13, "c"), get(2),
			fence(2, tok1), put(2, tok2, "d"), get(2)),
		// The zero token and the highest one in Fences.
		seq(fence(0, tok0), get(0), put(0, tok2, "a"), fence(0, tok0), put(0, tok1, "b"), get(0),
			fence(1, tokMax), get(1), put(1, tok13, "lo"), get(1), put(1, tokMax, "max"), fence(1, tokMax), get(1)),
		// Fences side by side: a fence on one resource fences no other.
		seq(fence(0, tok8), fence(1, tok1), put(1, tok2, "r1"), put(2, tok1, "r2"), fence(2, tok1), fence(0, tok3),
			get(0), get(1), get(2), put(0, tok8, "r0"), get(0)),
	}
}

// fuzzNames returns the resource names of one input: unique to the run
// and the input, so inputs sharing a store do not see each other.
func fuzzNames(run string, input uint64) [3]string {
	var names [3]string
	for i := range names {
		names[i] = fmt.Sprintf("fuzz-%s-%d-%d", run, input, i)
	}
	return names
}

// fuzzEntry is the state of one resource: the model's, and the test
// store's.
type fuzzEntry struct {
	exists bool             // a Put was accepted
	value  []byte           // the last accepted Put's
	token  fencedlock.Token // the last accepted Put's
	fence  fencedlock.Token // the highest token an accepted Put or Fence used

	// The model's notes, to name the rule a wrong answer breaks.
	suspect       rule             // the rule of the last call that could have changed the value wrongly, if any
	refused       int              // Puts and Fences refused since the last accepted Put
	fenced        int              // Fences accepted since the last accepted Put
	lowestRefused fencedlock.Token // the lowest token of the Fences refused since the fence last rose
	lowRule       rule             // the rule of that Fence (fence-never-lowers, or fence-input for token 0); none if no Fence was refused
}

// refuseFence notes a Fence refused with token, under rule r.
func (m *fuzzEntry) refuseFence(token fencedlock.Token, r rule) {
	if m.lowRule.name == "" || token < m.lowestRefused {
		m.lowestRefused, m.lowRule = token, r
	}
}

// checkOps runs the operations of input on s and on the model, resources
// names[0], names[1] and names[2] starting out never written, and returns
// an error describing the first difference, or the first unexpected
// error of s, with the operations before it.
func checkOps(ctx context.Context, s fencedlock.Store, names [3]string, input []byte) error {
	ops := decodeOps(input)
	var model [3]fuzzEntry
	fail := func(i int, r rule, format string, args ...any) error {
		var b strings.Builder
		fmt.Fprintf(&b, "fencetest: resources r0..r2 = %q; operations that passed: %d", names, i)
		for j, op := range ops[:i] {
			fmt.Fprintf(&b, "\n\t%2d: %v", j, op)
		}
		if i == len(ops) {
			b.WriteString("\nthen, reading back every resource after the last operation:")
		} else {
			fmt.Fprintf(&b, "\nthen operation %d:", i)
		}
		return errors.New(b.String() + "\n" + msg(r, format, args...))
	}
	get := func(i int, res int) error {
		m := &model[res]
		v, tok, err := s.Get(ctx, names[res])
		// A wrong answer after a refused call or an accepted Fence is
		// most likely the last one's doing.
		notFound, roundTrip, note := ruleNotFound, ruleRoundTrip, ""
		if m.suspect.name != "" {
			notFound, roundTrip = m.suspect, m.suspect
			note = fmt.Sprintf(", after %d refused calls and %d accepted Fences", m.refused, m.fenced)
		}
		switch {
		case !m.exists && !errors.Is(err, fencedlock.ErrNotFound):
			return fail(i, notFound, "Get(r%d) of a resource never written%s = (%s, token %d, %v); want an error wrapping fencedlock.ErrNotFound", res, note, show(v), tok, err)
		case !m.exists:
			return nil
		case err != nil:
			return fail(i, ruleRoundTrip, "Get(r%d) = %v; want (%s, token %d)", res, err, show(m.value), m.token)
		case !bytes.Equal(v, m.value) || tok != m.token:
			return fail(i, roundTrip, "Get(r%d)%s = (%s, token %d); want (%s, token %d)", res, note, show(v), tok, show(m.value), m.token)
		}
		return nil
	}
	// refused checks that err is the refusal of op, a Put or Fence whose
	// token is below the fence, and notes it.
	refused := func(i int, op fuzzOp, err error) error {
		m := &model[op.res]
		r := ruleStaleToken
		switch {
		case m.lowRule.name != "" && op.token >= m.lowestRefused:
			r = m.lowRule
		case op.kind == fuzzFence || m.fence > m.token:
			r = ruleFenceLower
		}
		m.refused++
		m.suspect = ruleUnchanged
		if op.kind == fuzzFence {
			m.refuseFence(op.token, ruleNeverLowers)
		}
		call := fmt.Sprintf("%v while the fence is %d", op, m.fence)
		var se *fencedlock.StaleTokenError
		if !errors.As(err, &se) {
			return fail(i, r, "%s = %v; want a *fencedlock.StaleTokenError", call, err)
		}
		if se.Resource != names[op.res] || se.Token != op.token || se.Current != m.fence {
			return fail(i, r, "%s = &StaleTokenError{Resource: %q, Token: %d, Current: %d}; want {Resource: %q, Token: %d, Current: %d}",
				call, se.Resource, se.Token, se.Current, names[op.res], op.token, m.fence)
		}
		if !errors.Is(err, fencedlock.ErrStaleToken) {
			return fail(i, r, "%s = %v: errors.Is(err, fencedlock.ErrStaleToken) = false, want true", call, err)
		}
		return nil
	}
	for i, op := range ops {
		m := &model[op.res]
		var err error
		switch op.kind {
		case fuzzGet:
			if err := get(i, op.res); err != nil {
				return err
			}
			continue
		case fuzzPut:
			err = s.Put(ctx, names[op.res], op.token, op.value)
		case fuzzFence:
			err = s.Fence(ctx, names[op.res], op.token)
		}
		switch {
		case op.token == 0:
			r := ruleZeroToken
			if op.kind == fuzzFence {
				r = ruleFenceInput
				m.refuseFence(0, ruleFenceInput)
			}
			m.refused++
			m.suspect = ruleUnchanged
			if !errors.Is(err, fencedlock.ErrInvalidToken) {
				return fail(i, r, "%v = %v; want an error wrapping fencedlock.ErrInvalidToken", op, err)
			}
		case op.token < m.fence:
			if err := refused(i, op, err); err != nil {
				return err
			}
		case op.kind == fuzzFence:
			if err != nil {
				return fail(i, ruleFenceLower, "%v while the fence is %d = %v; want it accepted", op, m.fence, err)
			}
			if op.token > m.fence {
				m.fence = op.token
				m.lowRule = rule{}
			}
			m.fenced++
			m.suspect = ruleFenceNoValue
		default:
			r := ruleHigherToken
			if op.token == m.fence {
				r = ruleEqualToken
			}
			if err != nil {
				return fail(i, r, "Put(r%d, token %d, %s) while the fence is %d = %v; want it accepted", op.res, op.token, show(op.value), m.fence, err)
			}
			*m = fuzzEntry{exists: true, value: op.value, token: op.token, fence: op.token}
		}
	}
	// A refused call that changed the store shows here if no Get
	// followed.
	for res := range model {
		if err := get(len(ops), res); err != nil {
			return err
		}
	}
	return nil
}
