package safety

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fencedlock/fencedlock/internal/history"
)

// Checker C: the clients' reads and writes, as they saw them, must be
// linearizable with respect to a fenced register, one per resource. This
// needs nothing from the store's side: it catches a store (or a transport)
// that accepts a stale write, loses an accepted one, or returns a value it
// should not, from the clients' observations alone.
//
// The register, its rules and the linearizability check are those of
// package internal/history, the checker the root package's store tests
// use too (see its doc for the rules).

// historyOps turns the recorded puts, fences and gets into the ops of the
// shared fenced-register checker, internal/history: a put or fence with
// an unknown answer (any outcome but ok and stale) may take effect at any
// time after its call up to the end of the workload, before the final
// reads (ops marked Final, made once nothing could land any more); gets
// with an unknown answer are dropped there.
func historyOps(ops []op) []history.Op {
	var out []history.Op
	for _, o := range ops {
		h := history.Op{Client: o.Client, Resource: o.Resource, Call: o.Call, Return: o.Return,
			Token: o.Token, Value: o.Value, Current: o.Current, Final: o.Final}
		switch o.Kind {
		case opPut:
			h.Kind = history.Put
		case opGet:
			h.Kind = history.Get
		case opFence:
			h.Kind = history.Fence
		default:
			continue
		}
		switch o.Outcome {
		case outOK:
			h.Outcome = history.OK
		case outStale:
			h.Outcome = history.Stale
		case outNotFound:
			h.Outcome = history.NotFound
		default:
			h.Outcome = history.Unknown
		}
		out = append(out, h)
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
	hops := historyOps(ops)
	start := time.Now()
	res, info := history.Linearizable(hops, timeout)
	r := linResult{Result: res, Ops: history.Operations(hops), Took: time.Since(start)}
	if res != porcupine.Illegal || vizDir == nil {
		return r
	}
	if dir := vizDir(); dir != "" {
		r.Viz = filepath.Join(dir, name+"-porcupine.html")
		r.VizErr = history.Visualize(info, r.Viz)
	}
	return r
}
