package safety

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencedlock/fencedlock"
)

// An append as the workload records it, without Redis: the fenced read
// (a fence and the read), the write, and the update, with their answers;
// a stale token refused at the fence or at the write, whichever the store
// saw; and the negative control's Get and Put without a fence.
func TestAppendItemRecordsItsCalls(t *testing.T) {
	ctx := context.Background()
	store := fencedlock.NewMemoryStore()
	rec := &recorder{}
	w := newWorker(clientSpec{ID: 1, Seed: 1, TTL: lockTTL, WorkMax: time.Millisecond}, nil, store, rec, nil, nil)

	w.appendItem(ctx, "r", 5, time.Time{})
	w.appendItem(ctx, "r", 7, time.Time{})
	w.appendItem(ctx, "r", 6, time.Time{}) // refused at the fence
	// Refused at the write: a holder with token 9 fences while fn sleeps.
	fences := make(chan op, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		o := op{Client: 9, Resource: "r", Kind: opFence, Token: 9, Call: now()}
		o.endPut(store.Fence(ctx, "r", 9))
		if o.Outcome != outOK {
			t.Error(o)
		}
		fences <- o
	}()
	w.appendItem(ctx, "r", 8, time.Now().Add(100*time.Millisecond))

	var got []string
	for _, o := range rec.snapshot() {
		s := fmt.Sprintf("%s %s t%d %q", o.Kind, o.Outcome, o.Token, o.Value)
		if o.Current != 0 {
			s += fmt.Sprintf(" cur%d", o.Current)
		}
		if o.Step != "" {
			s += " at " + string(o.Step)
		}
		if o.Paused {
			s += " paused"
		}
		got = append(got, s)
	}
	want := []string{
		`fence ok t5 ""`, `get notfound t0 ""`, `put ok t5 "c1-1"`, `update ok t5 "c1-1"`,
		`fence ok t7 ""`, `get ok t0 "c1-1"`, `put ok t7 "c1-1,c1-2"`, `update ok t7 "c1-2"`,
		`fence stale t6 "" cur7`, `update stale t6 "c1-3" cur7 at fence`,
		`fence ok t8 ""`, `get ok t0 "c1-1,c1-2"`, `pause ok t0 ""`, `put stale t8 "c1-1,c1-2,c1-4" cur9 paused`, `update stale t8 "c1-4" cur9 at put paused`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("recorded:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	ops := append(rec.snapshot(), <-fences)
	sortOps(ops)
	final := op{Client: finalReader, Resource: "r", Kind: opGet, Final: true, Call: now()}
	final.endGet(store.Get(ctx, "r"))
	ops = append(ops, final)
	if r := checkLinearizable(ops, 0, nil, ""); r.Result != porcupine.Ok {
		t.Errorf("checker C: %v", r)
	}
	// Without the other holder's fence, the refusal at the write names a
	// fence no op raised: checker C must reject it.
	var unfenced []op
	for _, o := range ops {
		if o.Client != 9 {
			unfenced = append(unfenced, o)
		}
	}
	if r := checkLinearizable(unfenced, 0, nil, ""); r.Result != porcupine.Illegal {
		t.Errorf("checker C without the fence that refused the write: %v, want Illegal", r)
	}
	r := checkAppends(ops)
	if !r.ok() || r.Acknowledged != 2 || r.Refused != 2 || r.RefusedAtFence != 1 || r.RefusedAtPut != 1 || r.RefusedByFence != 1 ||
		r.Paused != 1 || r.PausedRefused != 1 || r.Items != 2 {
		t.Errorf("checker E: %v", r)
	}

	// The negative control: a Get with its token, then the Put, no fence.
	rec2 := &recorder{}
	w2 := newWorker(clientSpec{ID: 2, Seed: 1, TTL: lockTTL, WorkMax: time.Millisecond, Workload: workloadGetPut}, nil, store, rec2, nil, nil)
	w2.appendItem(ctx, "r", 9, time.Time{})
	got = got[:0]
	for _, o := range rec2.snapshot() {
		got = append(got, fmt.Sprintf("%s %s t%d %q", o.Kind, o.Outcome, o.Token, o.Value))
	}
	want = []string{`get ok t7 "c1-1,c1-2"`, `put ok t9 "c1-1,c1-2,c2-1"`, `update ok t9 "c2-1"`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("recorded:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// Checker E on hand-built histories: a legal one passes with its counts,
// and each violation is caught.
func TestCheckerE(t *testing.T) {
	update := func(client int, res, item string, token fencedlock.Token, out outcome, ret int64) op {
		return op{Client: client, Resource: res, Kind: opUpdate, Token: token, Value: item, Outcome: out, Call: ret - ms(1), Return: ret, Step: opPut}
	}
	final := func(res, list string) op {
		o := op{Client: finalReader, Resource: res, Kind: opGet, Final: true, Outcome: outOK, Value: list, Call: ms(100), Return: ms(101)}
		if list == "" {
			o.Outcome = outNotFound
		}
		return o
	}
	legal := []op{
		update(1, "r", "c1-1", 5, outOK, ms(2)),
		update(2, "r", "c2-1", 7, outOK, ms(4)),
		{Client: 1, Resource: "r", Kind: opUpdate, Token: 6, Value: "c1-2", Outcome: outStale, Current: 7, Step: opFence, Call: ms(5), Return: ms(6)},
		// Refused at the write by token 9's fence; 9's write came after.
		{Client: 2, Resource: "r", Kind: opPut, Token: 8, Value: "c1-1,c2-1,c2-2", Outcome: outStale, Current: 9, Call: ms(9), Return: ms(10), Paused: true},
		{Client: 2, Resource: "r", Kind: opUpdate, Token: 8, Value: "c2-2", Outcome: outStale, Current: 9, Step: opPut, Call: ms(7), Return: ms(10), Paused: true},
		{Client: 3, Resource: "r", Kind: opPut, Token: 9, Value: "c1-1,c2-1,c3-1", Outcome: outOK, Call: ms(11), Return: ms(12)},
		update(3, "r", "c3-1", 9, outOK, ms(12)),
		// Refused at the write by token 11, whose write had been sent.
		{Client: 4, Resource: "r", Kind: opPut, Token: 11, Value: "c1-1,c2-1,c3-1,c4-1", Outcome: outOK, Call: ms(13), Return: ms(14)},
		update(4, "r", "c4-1", 11, outOK, ms(14)),
		{Client: 1, Resource: "r", Kind: opUpdate, Token: 10, Value: "c1-3", Outcome: outStale, Current: 11, Step: opPut, Call: ms(12), Return: ms(15)},
		// Refused at the write by token 9, whose write had been sent.
		{Client: 4, Resource: "r", Kind: opUpdate, Token: 4, Value: "c4-3", Outcome: outStale, Current: 9, Step: opPut, Call: ms(3), Return: ms(20)},
		update(1, "r", "c1-4", 12, outUnknown, ms(16)), // landed
		update(2, "r", "c2-3", 13, outUnknown, ms(17)), // did not
		update(3, "s", "c3-2", 3, outOK, ms(18)),       // another resource
		update(4, "t", "c4-2", 3, outUnknown, ms(19)),  // never written
		final("r", "c1-1,c2-1,c3-1,c4-1,c1-4"),
		final("s", "c3-2"),
		final("t", ""),
	}
	r := checkAppends(legal)
	if !r.ok() || r.Updates != 12 || r.Acknowledged != 5 || r.Refused != 4 || r.RefusedAtFence != 1 || r.RefusedAtPut != 3 || r.RefusedByFence != 1 ||
		r.Unknown != 3 || r.UnknownPresent != 1 || r.Paused != 1 || r.PausedRefused != 1 || r.Items != 6 {
		t.Errorf("checker E on a legal history: %v", r)
	}

	for _, tc := range []struct {
		name  string
		lists map[string]string // replaces the final lists
		check func(appendReport) bool
	}{
		{"an acknowledged item lost", map[string]string{"r": "c1-1,c3-1,c4-1"}, func(r appendReport) bool { return r.Lost == 1 }},
		{"an item twice", map[string]string{"r": "c1-1,c2-1,c3-1,c4-1,c2-1"}, func(r appendReport) bool { return r.Duplicated == 1 }},
		{"an unknown item twice", map[string]string{"r": "c1-1,c2-1,c1-4,c3-1,c4-1,c1-4"}, func(r appendReport) bool { return r.Duplicated == 1 }},
		{"a refused item present", map[string]string{"r": "c1-1,c2-1,c3-1,c4-1,c1-2"}, func(r appendReport) bool { return r.RefusedPresent == 1 }},
		{"an item nobody appended", map[string]string{"r": "c1-1,c2-1,c3-1,c4-1,c9-9"}, func(r appendReport) bool { return r.Foreign == 1 }},
		{"an item of another resource", map[string]string{"t": "c3-2"}, func(r appendReport) bool { return r.Foreign == 1 }},
		{"an acknowledged item in another resource's list", map[string]string{"s": "", "t": "c3-2"},
			func(r appendReport) bool { return r.Lost == 1 && r.Foreign == 1 }},
		{"a final read that failed", map[string]string{"s": "-"}, func(r appendReport) bool { return r.Unread == 1 }},
	} {
		ops := append([]op(nil), legal[:len(legal)-3]...)
		for _, res := range []string{"r", "s", "t"} {
			list := map[string]string{"r": "c1-1,c2-1,c3-1,c4-1,c1-4", "s": "c3-2", "t": ""}[res]
			if l, ok := tc.lists[res]; ok {
				list = l
			}
			if list == "-" {
				ops = append(ops, op{Resource: res, Kind: opGet, Final: true, Outcome: outUnknown})
				continue
			}
			ops = append(ops, final(res, list))
		}
		if r := checkAppends(ops); r.ok() || !tc.check(r) {
			t.Errorf("%s: checker E: %v", tc.name, r)
		}
	}
}
