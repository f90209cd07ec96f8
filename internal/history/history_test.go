package history_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/history"
)

func put(tok fencedlock.Token, value string, call, ret int64) history.Op {
	return history.Op{Resource: "r", Kind: history.Put, Token: tok, Value: value, Outcome: history.OK, Call: call, Return: ret}
}

// stale is a refused Put whose refusal, as the client kept it, names it.
func stale(tok, cur fencedlock.Token, value string, call, ret int64) history.Op {
	return history.Op{Resource: "r", Kind: history.Put, Token: tok, Value: value, Outcome: history.Stale, Current: cur,
		Refusal: &fencedlock.StaleTokenError{Resource: "r", Token: tok, Current: cur}, Call: call, Return: ret}
}

func unknownPut(tok fencedlock.Token, value string, call, ret int64) history.Op {
	return history.Op{Resource: "r", Kind: history.Put, Token: tok, Value: value, Outcome: history.Unknown, Call: call, Return: ret}
}

func fence(tok fencedlock.Token, call, ret int64) history.Op {
	return history.Op{Resource: "r", Kind: history.Fence, Token: tok, Outcome: history.OK, Call: call, Return: ret}
}

// staleFence is a refused Fence whose refusal, as the client kept it,
// names it.
func staleFence(tok, cur fencedlock.Token, call, ret int64) history.Op {
	return history.Op{Resource: "r", Kind: history.Fence, Token: tok, Outcome: history.Stale, Current: cur,
		Refusal: &fencedlock.StaleTokenError{Resource: "r", Token: tok, Current: cur}, Call: call, Return: ret}
}

func unknownFence(tok fencedlock.Token, call, ret int64) history.Op {
	return history.Op{Resource: "r", Kind: history.Fence, Token: tok, Outcome: history.Unknown, Call: call, Return: ret}
}

func get(tok fencedlock.Token, value string, call, ret int64) history.Op {
	return history.Op{Resource: "r", Kind: history.Get, Token: tok, Value: value, Outcome: history.OK, Call: call, Return: ret}
}

func notFound(call, ret int64) history.Op {
	return history.Op{Resource: "r", Kind: history.Get, Outcome: history.NotFound, Call: call, Return: ret}
}

func final(o history.Op) history.Op { o.Final = true; return o }

func on(resource string, o history.Op) history.Op {
	o.Resource = resource
	if o.Refusal != nil {
		r := *o.Refusal
		r.Resource = resource
		o.Refusal = &r
	}
	return o
}

// Each rule rejects a history that breaks it, and the histories that keep
// them all pass.
func TestCheckRules(t *testing.T) {
	namesOther := stale(3, 9, "b", 3, 4)
	namesOther.Refusal = &fencedlock.StaleTokenError{Resource: "r", Token: 4, Current: 9}
	otherResource := stale(3, 9, "b", 3, 4)
	otherResource.Refusal = &fencedlock.StaleTokenError{Resource: "s", Token: 3, Current: 9}
	otherCurrent := stale(3, 9, "b", 3, 4)
	otherCurrent.Refusal = &fencedlock.StaleTokenError{Resource: "r", Token: 3, Current: 8}
	fenceNamesOther := staleFence(3, 9, 3, 4)
	fenceNamesOther.Refusal = &fencedlock.StaleTokenError{Resource: "r", Token: 4, Current: 9}
	unknownGet := history.Op{Resource: "r", Kind: history.Get, Outcome: history.Unknown, Token: 99, Value: "zzz", Call: 3, Return: 4}

	tests := []struct {
		name string
		ops  []history.Op
		ok   bool
	}{
		{"valid", []history.Op{notFound(1, 2), put(5, "a", 3, 4), put(5, "b", 5, 6), get(5, "b", 7, 8),
			put(7, "c", 9, 12), get(5, "b", 10, 11), stale(5, 7, "d", 13, 14), get(7, "c", 15, 16)}, true},
		{"overlapping calls may take effect in either order", []history.Op{put(5, "a", 1, 6), put(7, "b", 2, 5), get(5, "a", 3, 8)}, true},
		{"resources are independent", []history.Op{on("r1", put(7, "a", 1, 2)), on("r2", put(5, "b", 3, 4)), on("r2", notFound(0, 1))}, true},
		{"lower token accepted after a higher one", []history.Op{put(7, "a", 1, 2), put(5, "b", 3, 4)}, false},
		{"refused though not stale", []history.Op{put(5, "a", 1, 2), stale(6, 5, "b", 3, 4)}, false},
		{"refused reporting a current the store does not hold", []history.Op{put(11, "a", 1, 2), stale(10, 12, "b", 3, 4)}, false},
		{"refused reporting the stored current", []history.Op{put(11, "a", 1, 2), stale(10, 11, "b", 3, 4)}, true},
		{"refused with a current never written", []history.Op{put(5, "a", 1, 2), stale(3, 9, "b", 3, 4)}, false},
		{"refusal names another token", []history.Op{put(9, "a", 1, 2), namesOther}, false},
		{"refusal names another resource", []history.Op{put(9, "a", 1, 2), otherResource}, false},
		{"refusal reports another current than the op", []history.Op{put(9, "a", 1, 2), otherCurrent}, false},
		{"read of a value never written", []history.Op{put(5, "a", 1, 2), get(5, "zzz", 3, 4)}, false},
		{"read with the wrong token", []history.Op{put(5, "a", 1, 2), get(6, "a", 3, 4)}, false},
		{"read of a value written later", []history.Op{get(5, "a", 1, 2), put(5, "a", 3, 4)}, false},
		{"stale read, same token", []history.Op{put(5, "a", 1, 2), put(5, "b", 3, 4), get(5, "a", 5, 6)}, false},
		{"stale read, higher token", []history.Op{put(5, "a", 1, 3), put(7, "b", 2, 4), get(5, "a", 5, 6)}, false},
		{"not found after a write", []history.Op{put(5, "a", 1, 2), notFound(3, 4)}, false},
		{"a get with an unknown answer says nothing", []history.Op{put(5, "a", 1, 2), unknownGet}, true},
		{"an unknown write may land late", []history.Op{put(10, "a", 1, 2), unknownPut(11, "b", 3, 4), get(10, "a", 5, 6), get(11, "b", 7, 8)}, true},
		{"an unknown write may never land", []history.Op{put(10, "a", 1, 2), unknownPut(11, "b", 3, 4), get(10, "a", 5, 6)}, true},
		{"an unknown write with a lower token cannot land", []history.Op{put(10, "a", 1, 2), unknownPut(9, "b", 3, 4), get(9, "b", 5, 6)}, false},
		{"an unknown write lands before the final reads", []history.Op{put(10, "a", 1, 2), unknownPut(11, "b", 3, 4),
			final(get(10, "a", 10, 11)), final(get(11, "b", 12, 13))}, false},
		{"an unknown write that never landed before the final reads", []history.Op{put(10, "a", 1, 2), unknownPut(11, "b", 3, 4),
			final(get(10, "a", 10, 11))}, true},

		{"a read without its token matches by value", []history.Op{put(5, "a", 1, 2), put(6, "b", 3, 4), get(0, "b", 5, 6)}, true},
		{"a read without its token of an overwritten value", []history.Op{put(5, "a", 1, 2), put(6, "b", 3, 4), get(0, "a", 5, 6)}, false},
		{"a read without its token of a value never written", []history.Op{put(5, "a", 1, 2), get(0, "zzz", 3, 4)}, false},

		// Fences: a Fence raises the fence and writes no value.
		{"fence accepted; reads return the writer's token, not the fence", []history.Op{put(5, "a", 1, 2), fence(7, 3, 4),
			get(5, "a", 5, 6), fence(7, 7, 8), put(7, "b", 9, 10), get(7, "b", 11, 12)}, true},
		{"a read returns the fence as the value's token", []history.Op{put(5, "a", 1, 2), fence(7, 3, 4), get(7, "a", 5, 6)}, false},
		{"a fence alone holds no value", []history.Op{fence(7, 1, 2), notFound(3, 4), put(8, "a", 5, 6), get(8, "a", 7, 8)}, true},
		{"a read of a value after a fence alone", []history.Op{fence(7, 1, 2), get(7, "", 3, 4)}, false},
		{"fence refused against a write", []history.Op{put(9, "a", 1, 2), staleFence(7, 9, 3, 4)}, true},
		{"fence refused against a fence", []history.Op{fence(9, 1, 2), staleFence(7, 9, 3, 4), staleFence(8, 9, 5, 6)}, true},
		{"fence refused though not stale", []history.Op{put(9, "a", 1, 2), staleFence(9, 9, 3, 4)}, false},
		{"fence refused reporting a current the store does not hold", []history.Op{put(9, "a", 1, 2), staleFence(7, 10, 3, 4)}, false},
		{"fence refusal names another token", []history.Op{put(9, "a", 1, 2), fenceNamesOther}, false},
		{"a lower fence accepted after a higher write", []history.Op{put(9, "a", 1, 2), fence(8, 3, 4)}, false},
		{"a write refused because of an earlier fence", []history.Op{put(5, "a", 1, 2), fence(7, 3, 4),
			stale(6, 7, "b", 5, 6), get(5, "a", 7, 8)}, true},
		{"a write refused reporting the value's token though a fence is higher", []history.Op{put(5, "a", 1, 2), fence(7, 3, 4),
			stale(6, 5, "b", 5, 6)}, false},
		{"a write below a returned fence accepted", []history.Op{put(5, "a", 1, 2), fence(7, 3, 4), put(6, "b", 5, 6)}, false},
		{"a write below a returned fence accepted, on a resource without a value", []history.Op{fence(7, 1, 2), put(6, "b", 3, 4)}, false},
		{"a write overlapping a fence may go first", []history.Op{put(5, "a", 1, 2), fence(7, 3, 6), put(6, "b", 4, 5)}, true},
		{"an unknown fence may land and explain a refusal", []history.Op{put(5, "a", 1, 2), unknownFence(7, 3, 4),
			stale(6, 7, "b", 5, 6), get(5, "a", 7, 8)}, true},
		{"an unknown fence may never land", []history.Op{put(5, "a", 1, 2), unknownFence(7, 3, 4), put(6, "b", 5, 6)}, true},
		{"an unknown fence with a lower token cannot land", []history.Op{put(5, "a", 1, 2), unknownFence(4, 3, 4),
			stale(3, 4, "b", 5, 6)}, false},
	}
	for _, tc := range tests {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			bad := history.Check(tc.ops)
			if tc.ok && len(bad) != 0 {
				t.Errorf("a legal history was rejected: %q", bad)
			}
			if !tc.ok && len(bad) == 0 {
				t.Errorf("a history breaking the rule passed: %v", tc.ops)
			}
		})
	}
}

// Linearizable gives up with Unknown after its timeout, and Visualize
// shows an illegal history.
func TestLinearizableAndVisualize(t *testing.T) {
	ops := []history.Op{put(10, "a", 1, 2), put(11, "b", 3, 4), get(10, "a", 5, 6)}
	if n := history.Operations(ops); n != 3 {
		t.Errorf("Operations = %d, want 3", n)
	}
	res, info := history.Linearizable(ops, 0)
	if res != porcupine.Illegal {
		t.Fatalf("Linearizable = %v, want Illegal", res)
	}
	path := filepath.Join(t.TempDir(), "viz.html")
	if err := history.Visualize(info, path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Errorf("visualization: %v, %v", fi, err)
	}
	if res, _ := history.Linearizable(ops[:2], 0); res != porcupine.Ok {
		t.Errorf("Linearizable of the writes alone = %v, want Ok", res)
	}
}
