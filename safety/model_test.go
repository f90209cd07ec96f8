package safety

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencedlock/fencedlock"
)

// Checker C: the clients' reads and writes, as they saw them, must be
// linearizable with respect to a fenced register, one per resource. This
// needs nothing from the store's side: it catches a store (or a transport)
// that accepts a stale write, loses an accepted one, or returns a value it
// should not, from the clients' observations alone.
//
// The register's state is the last accepted value and its token. A write
// with token t:
//   - answered ok: t >= the stored token, and the state becomes (value, t);
//   - answered stale with current c: t < the stored token, which is c, and
//     nothing changes;
//   - with an unknown answer: either of the above, whichever the rule
//     allows (or nothing), at any point up to the end of the history,
//     since a write held in the network can land after its client gave up.
// A read returns the stored value and token, or "not found" before the
// first write. Reads with an unknown answer say nothing and are dropped.

type regInput struct {
	Resource string
	Put      bool
	Token    fencedlock.Token
	Value    string // written
}

type regOutput struct {
	Outcome outcome
	Token   fencedlock.Token // read
	Value   string           // read
	Current fencedlock.Token // refused as stale: the store's token
}

type regState struct {
	Value   string
	Token   fencedlock.Token
	Written bool
}

// stepRegister returns the states the register can be in after the
// operation, none when the operation's output is impossible from state.
func stepRegister(state, input, output any) []any {
	s, in, out := state.(regState), input.(regInput), output.(regOutput)
	if in.Put {
		next := regState{Value: in.Value, Token: in.Token, Written: true}
		passes := in.Token >= s.Token // the fence rule, fencedlock.CheckToken
		switch out.Outcome {
		case outOK:
			if passes {
				return []any{next}
			}
		case outStale:
			if !passes && out.Current == s.Token {
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
	case outOK:
		if s.Written && s.Value == out.Value && s.Token == out.Token {
			return []any{s}
		}
	case outNotFound:
		if !s.Written {
			return []any{s}
		}
	}
	return nil
}

var registerNondeterministic = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byRes := map[string][]porcupine.Operation{}
		var order []string
		for _, o := range history {
			res := o.Input.(regInput).Resource
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
	Init: func() []any { return []any{regState{}} },
	StepContext: func(_ context.Context, state, input, output any) []any {
		return stepRegister(state, input, output)
	},
	Hash: func(state any) uint64 {
		s := state.(regState)
		h := fnv.New64a()
		h.Write([]byte(s.Value))
		h.Write([]byte(strconv.FormatUint(uint64(s.Token), 10)))
		if s.Written {
			h.Write([]byte{1})
		}
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if in.Put {
			switch out.Outcome {
			case outStale:
				return fmt.Sprintf("put(%s, t%d) -> stale (current t%d)", in.Value, in.Token, out.Current)
			default:
				return fmt.Sprintf("put(%s, t%d) -> %s", in.Value, in.Token, out.Outcome)
			}
		}
		if out.Outcome == outOK {
			return fmt.Sprintf("get() -> %s, t%d", out.Value, out.Token)
		}
		return "get() -> " + string(out.Outcome)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		if !s.Written {
			return "empty"
		}
		return fmt.Sprintf("%s, t%d", s.Value, s.Token)
	},
}

var registerModel = registerNondeterministic.ToModel()

// porcupineOps turns the recorded puts and gets into porcupine's
// operations. A put with an unknown answer may take effect at any time
// after its call, so its return is the end of the history: the end of the
// workload, before the final reads (ops marked Final, made once nothing
// could land any more).
func porcupineOps(ops []op) []porcupine.Operation {
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
		var in regInput
		var res regOutput
		switch o.Kind {
		case opPut:
			in = regInput{Resource: o.Resource, Put: true, Token: o.Token, Value: o.Value}
			res = regOutput{Outcome: o.Outcome, Current: o.Current}
			if o.Outcome != outOK && o.Outcome != outStale {
				res.Outcome = outUnknown
				ret = end
			}
		case opGet:
			if o.Outcome != outOK && o.Outcome != outNotFound {
				continue
			}
			in = regInput{Resource: o.Resource}
			res = regOutput{Outcome: o.Outcome, Token: o.Token, Value: o.Value}
		default:
			continue
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: in, Call: o.Call, Output: res, Return: ret})
	}
	return out
}

// linResult is checker C's result.
type linResult struct {
	Result porcupine.CheckResult
	Ops    int           // reads and writes checked
	Took   time.Duration // the check's time
	Viz    string        // the visualization's path, written for an Illegal history when a directory was given
	VizErr error
}

func (r linResult) String() string {
	return fmt.Sprintf("%s (%d ops, %v)", r.Result, r.Ops, r.Took.Round(time.Millisecond))
}

// checkLinearizable runs checker C with a timeout (0: none). For an
// Illegal history it writes porcupine's visualization (an HTML page showing
// the longest linearizations it found and where they fail) to the
// directory vizDir returns, unless vizDir is nil or returns "".
func checkLinearizable(ops []op, timeout time.Duration, vizDir func() string, name string) linResult {
	history := porcupineOps(ops)
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(registerModel, history, timeout)
	r := linResult{Result: res, Ops: len(history), Took: time.Since(start)}
	if res != porcupine.Illegal || vizDir == nil {
		return r
	}
	if dir := vizDir(); dir != "" {
		r.Viz = filepath.Join(dir, name+"-porcupine.html")
		r.VizErr = porcupine.VisualizePath(registerModel, info, r.Viz)
	}
	return r
}
