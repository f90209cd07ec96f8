// Package history checks what clients saw of a fenced store against the
// fenced register, one register per resource. It is the one history
// checker of fencedlock's tests: the root package's store tests and the
// fault-injection safety suite (package safety, its checker C) use it.
//
// The register's state is the last accepted value, the token that wrote
// it, and the fence: the highest token an accepted Put or Fence carried.
// A Put with token t:
//   - answered OK: t is not below the fence, and the state becomes
//     (value, t) with fence t;
//   - answered Stale with current c: t is below the fence, which is c, and
//     nothing changes;
//   - with an Unknown answer: either of the above, whichever the rule
//     allows (or nothing), at any point up to the end of the history,
//     since a write held in the network can land after its client gave up.
//
// A Fence with token t is a Put that writes no value: answered OK, t is
// not below the fence and the fence becomes t (the value and its token
// stay); answered Stale with current c, t is below the fence, which is c;
// with an Unknown answer, either, or nothing, as for a Put.
//
// A Get returns the stored value and the token that wrote it (not the
// fence), or NotFound before the first accepted Put, fences or not. A Get
// whose client did not learn the token (Token 0) is checked by its value
// alone. Gets with an Unknown answer say nothing and are dropped.
//
// A history is legal when it is linearizable with respect to that register
// (checked with porcupine): every call took effect at one instant between
// its call and its return (Unknown Puts and Fences: up to the end of the
// history, the Final Gets excepted). Check adds a rule on what a refusal
// reports.
package history

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencedlock/fencedlock"
)

// Kind says what an Op did.
type Kind int

// The operations of a fenced store.
const (
	Put   Kind = iota // Store.Put with a token
	Get               // Store.Get
	Fence             // Store.Fence with a token
)

// Outcome is how an Op ended, as its client saw it.
type Outcome string

// The outcomes.
const (
	OK       Outcome = "ok"       // Put, Fence: accepted; Get: returned a value
	Stale    Outcome = "stale"    // Put, Fence: refused with a *fencedlock.StaleTokenError
	NotFound Outcome = "notfound" // Get: the store holds no value
	Unknown  Outcome = "unknown"  // any other error: the Put or Fence may have landed, or may land later
)

// Op is one call to a store. Call and Return are timestamps on one clock
// common to all clients (ticks of an atomic counter, or wall-clock
// nanoseconds): a.Return < b.Call means a returned before b was called.
type Op struct {
	Client   int
	Resource string
	Kind     Kind
	Call     int64
	Return   int64
	Outcome  Outcome
	// Token is the token a Put was written with, or a Fence raised to, or
	// the token a Get read: 0 when the client read the value without it
	// (fencedlock.Update gives fn the value alone); the value, unique per
	// resource, still names the write it read.
	Token   fencedlock.Token
	Value   string           // Put: written (unique per resource); Get: read
	Current fencedlock.Token // Put or Fence refused as Stale: the store's fence
	// Final marks a Get made once no write could land any more: Unknown
	// Puts and Fences take effect before it, if at all.
	Final bool
	// Refusal is the error of a Stale Put or Fence, when the client kept
	// it: Check requires that it names the op's own resource and token
	// and the Current above.
	Refusal *fencedlock.StaleTokenError
}

func (o Op) String() string {
	kind := "Put"
	switch o.Kind {
	case Get:
		kind = "Get"
	case Fence:
		kind = "Fence"
	}
	s := fmt.Sprintf("c%d %s(%s, token %d, %q) %s", o.Client, kind, o.Resource, o.Token, o.Value, o.Outcome)
	if o.Outcome == Stale {
		s += fmt.Sprintf(" (current %d)", o.Current)
	}
	return s + fmt.Sprintf(" @[%d,%d]", o.Call, o.Return)
}

// Check checks ops and returns one line per violation, none for a legal
// history: every refusal reports its own Put or Fence (when Refusal is
// set), and the history is linearizable with respect to the fenced
// register. It waits as long as the linearizability check takes.
func Check(ops []Op) []string {
	var bad []string
	for _, o := range ops {
		if o.Kind == Get || o.Outcome != Stale || o.Refusal == nil {
			continue
		}
		r := o.Refusal
		if r.Resource != o.Resource || r.Token != o.Token {
			bad = append(bad, fmt.Sprintf("%v refused with %+v, naming another op", o, *r))
		}
		if r.Current != o.Current {
			bad = append(bad, fmt.Sprintf("%v refused with %+v, whose Current is not the op's", o, *r))
		}
	}
	sort.Strings(bad)
	if res, _ := Linearizable(ops, 0); res != porcupine.Ok {
		bad = append(bad, fmt.Sprintf("the %d ops are not linearizable with respect to the fenced register: %s", len(ops), res))
	}
	return bad
}

// Linearizable checks that ops are linearizable with respect to the fenced
// register, giving up after timeout (0: none) with porcupine.Unknown. The
// info is what Visualize shows.
func Linearizable(ops []Op, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(model, operations(ops), timeout)
}

// Operations returns how many of ops the linearizability check takes:
// Gets with an Unknown outcome are dropped.
func Operations(ops []Op) int { return len(operations(ops)) }

// Visualize writes porcupine's visualization of a check (an HTML page
// showing the longest linearizations it found and where they fail) to path.
func Visualize(info porcupine.LinearizationInfo, path string) error {
	return porcupine.VisualizePath(model, info, path)
}

type input struct {
	Resource string
	Kind     Kind
	Token    fencedlock.Token
	Value    string // written
}

type output struct {
	Outcome Outcome
	Token   fencedlock.Token // read
	Value   string           // read
	Current fencedlock.Token // refused as stale: the store's fence
}

type state struct {
	Value   string
	Token   fencedlock.Token // the token that wrote Value
	Written bool
	Fence   fencedlock.Token // at or above Token
}

// step returns the states the register can be in after the operation,
// none when the operation's output is impossible from s.
func step(s state, in input, out output) []any {
	if in.Kind == Put || in.Kind == Fence {
		next := s
		next.Fence = in.Token
		if in.Kind == Put {
			next.Value, next.Token, next.Written = in.Value, in.Token, true
		}
		passes := in.Token >= s.Fence // the fence rule, fencedlock.CheckToken
		switch out.Outcome {
		case OK:
			if passes {
				return []any{next}
			}
		case Stale:
			if !passes && out.Current == s.Fence {
				return []any{s}
			}
		default: // unknown: applied, if the rule lets it, or not
			if passes {
				return []any{s, next}
			}
			return []any{s}
		}
		return nil
	}
	switch out.Outcome {
	case OK:
		if s.Written && s.Value == out.Value && (s.Token == out.Token || out.Token == 0) {
			return []any{s}
		}
	case NotFound:
		if !s.Written {
			return []any{s}
		}
	}
	return nil
}

var nondeterministic = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byRes := map[string][]porcupine.Operation{}
		var order []string
		for _, o := range history {
			res := o.Input.(input).Resource
			if _, ok := byRes[res]; !ok {
				order = append(order, res)
			}
			byRes[res] = append(byRes[res], o)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, res := range order {
			parts = append(parts, byRes[res])
		}
		return parts
	},
	Init: func() []any { return []any{state{}} },
	StepContext: func(_ context.Context, s, in, out any) []any {
		return step(s.(state), in.(input), out.(output))
	},
	Hash: func(st any) uint64 {
		s := st.(state)
		h := fnv.New64a()
		h.Write([]byte(s.Value))
		h.Write([]byte(strconv.FormatUint(uint64(s.Token), 10)))
		if s.Written {
			h.Write([]byte{1})
		}
		h.Write([]byte(strconv.FormatUint(uint64(s.Fence), 10)))
		return h.Sum64()
	},
	DescribeOperation: func(i, o any) string {
		in, out := i.(input), o.(output)
		var call string
		switch in.Kind {
		case Put:
			call = fmt.Sprintf("put(%s, t%d)", in.Value, in.Token)
		case Fence:
			call = fmt.Sprintf("fence(t%d)", in.Token)
		}
		if call != "" {
			if out.Outcome == Stale {
				return fmt.Sprintf("%s -> stale (current t%d)", call, out.Current)
			}
			return fmt.Sprintf("%s -> %s", call, out.Outcome)
		}
		if out.Outcome == OK {
			return fmt.Sprintf("get() -> %s, t%d", out.Value, out.Token)
		}
		return "get() -> " + string(out.Outcome)
	},
	DescribeState: func(st any) string {
		s := st.(state)
		desc := "empty"
		if s.Written {
			desc = fmt.Sprintf("%s, t%d", s.Value, s.Token)
		}
		if s.Fence > s.Token {
			desc += fmt.Sprintf(", fence t%d", s.Fence)
		}
		return desc
	},
}

var model = nondeterministic.ToModel()

// operations turns ops into porcupine's operations. A Put or Fence with an
// unknown answer may take effect at any time after its call, so its return
// is the end of the history: after every op but the Final Gets.
func operations(ops []Op) []porcupine.Operation {
	var end int64
	for _, o := range ops {
		if !o.Final {
			end = max(end, o.Return)
		}
	}
	end++
	var out []porcupine.Operation
	for _, o := range ops {
		ret := o.Return
		var in input
		var res output
		switch o.Kind {
		case Put, Fence:
			in = input{Resource: o.Resource, Kind: o.Kind, Token: o.Token}
			if o.Kind == Put {
				in.Value = o.Value
			}
			res = output{Outcome: o.Outcome, Current: o.Current}
			if o.Outcome != OK && o.Outcome != Stale {
				res.Outcome = Unknown
				ret = end
			}
		case Get:
			if o.Outcome != OK && o.Outcome != NotFound {
				continue
			}
			in = input{Resource: o.Resource, Kind: Get}
			res = output{Outcome: o.Outcome, Token: o.Token, Value: o.Value}
		default:
			continue
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: in, Call: o.Call, Output: res, Return: ret})
	}
	return out
}
