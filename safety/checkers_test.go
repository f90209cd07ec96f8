package safety

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/fencedlock/fencedlock"
)

// The checkers, on histories built by hand: a legal history passes each,
// and each kind of violation is caught by the checker meant for it. If
// these fail, the scenarios prove nothing.

// ms is a timestamp in a hand-built history.
func ms(n int64) int64 { return n * 1e6 }

// legalHistory: c1 holds r with token 10, writes a and is refused later
// when, after a pause, it writes again; c2 got token 11 meanwhile and wrote
// b; a write of c3 with an unknown answer (held in the network) lands late
// and is refused; reads see what they must.
func legalHistory() ([]op, []ledgerEntry) {
	ops := []op{
		{Client: 1, Resource: "r", Kind: opGet, Call: ms(0), Return: ms(1), Outcome: outNotFound},
		{Client: 1, Resource: "r", Kind: opAcquire, Call: ms(1), Return: ms(2), Outcome: outOK, Token: 10},
		{Client: 1, Resource: "r", Kind: opPut, Call: ms(3), Return: ms(4), Outcome: outOK, Token: 10, Value: "c1-1"},
		{Client: 3, Resource: "r", Kind: opPut, Call: ms(5), Return: ms(6), Outcome: outUnknown, Token: 10, Value: "c3-1"},
		{Client: 2, Resource: "r", Kind: opAcquire, Call: ms(250), Return: ms(251), Outcome: outOK, Token: 11},
		{Client: 2, Resource: "r", Kind: opGet, Call: ms(252), Return: ms(253), Outcome: outOK, Token: 10, Value: "c1-1"},
		{Client: 2, Resource: "r", Kind: opPut, Call: ms(254), Return: ms(255), Outcome: outOK, Token: 11, Value: "c2-1"},
		{Client: 1, Resource: "r", Kind: opPut, Call: ms(300), Return: ms(301), Outcome: outStale, Token: 10, Value: "c1-2", Current: 11, Paused: true},
		{Client: 2, Resource: "r", Kind: opGet, Call: ms(302), Return: ms(303), Outcome: outOK, Token: 11, Value: "c2-1"},
		{Client: 2, Resource: "r", Kind: opGet, Call: ms(304), Return: ms(305), Outcome: outUnknown},
		// c4 on another resource, and a second grant on r with a token
		// above every earlier one.
		{Client: 4, Resource: "s", Kind: opAcquire, Call: ms(0), Return: ms(2), Outcome: outOK, Token: 5},
		{Client: 4, Resource: "s", Kind: opPut, Call: ms(3), Return: ms(4), Outcome: outOK, Token: 5, Value: "c4-1"},
		{Client: 1, Resource: "r", Kind: opAcquire, Call: ms(310), Return: ms(311), Outcome: outOK, Token: 12},
	}
	ledger := []ledgerEntry{
		{Resource: "r", Token: 10, Value: "c1-1", Accepted: true, At: ms(3)},
		{Resource: "s", Token: 5, Value: "c4-1", Accepted: true, At: ms(3)},
		{Resource: "r", Token: 11, Value: "c2-1", Accepted: true, At: ms(254)},
		{Resource: "r", Token: 10, Value: "c1-2", Current: 11, At: ms(300)},
		{Resource: "r", Token: 10, Value: "c3-1", Current: 11, At: ms(900)}, // late
	}
	return ops, ledger
}

func TestCheckersPassALegalHistory(t *testing.T) {
	ops, entries := legalHistory()
	if r := checkLedger(entries); !r.ok() || r.Accepted != 3 || r.Rejected != 2 {
		t.Errorf("checker A: %+v", r)
	}
	if r := checkDeliveries(ops, entries); !r.ok() || r.Late != 1 || r.LateRejected != 1 {
		t.Errorf("deliveries: %+v", r)
	}
	if r := checkGrants(ops); r.Duplicates != 0 || r.Inversions != 0 || r.Grants != 4 {
		t.Errorf("checker B: %+v", r)
	}
	if r := checkLinearizable(ops, 0, nil, ""); r.Result != porcupine.Ok {
		t.Errorf("checker C: %v", r)
	}
}

// The unknown write may also have landed: a later read of its value is
// legal, and so is the refusal of a write that the landed one outdated.
func TestCheckerCAllowsAnUnknownWriteToLandLate(t *testing.T) {
	ops := []op{
		{Client: 1, Resource: "r", Kind: opPut, Call: ms(0), Return: ms(1), Outcome: outUnknown, Token: 12, Value: "c1-1"},
		{Client: 2, Resource: "r", Kind: opPut, Call: ms(10), Return: ms(11), Outcome: outOK, Token: 11, Value: "c2-1"},
		{Client: 2, Resource: "r", Kind: opGet, Call: ms(12), Return: ms(13), Outcome: outOK, Token: 11, Value: "c2-1"},
		{Client: 2, Resource: "r", Kind: opGet, Call: ms(20), Return: ms(21), Outcome: outOK, Token: 12, Value: "c1-1"},
		{Client: 2, Resource: "r", Kind: opPut, Call: ms(22), Return: ms(23), Outcome: outStale, Token: 11, Value: "c2-2", Current: 12},
	}
	if r := checkLinearizable(ops, 0, nil, ""); r.Result != porcupine.Ok {
		t.Errorf("checker C: %v", r)
	}
}

func TestCheckerACatchesAStaleWriteAccepted(t *testing.T) {
	_, entries := legalHistory()
	entries[3].Accepted, entries[3].Current = true, 0 // c1's write with token 10 after token 11
	r := checkLedger(entries)
	if r.StaleAccepted != 1 || r.Lost != 1 || r.ok() {
		t.Errorf("checker A: %+v", r)
	}
	t.Log(r.Violations)
}

// A lost write without a stale accept: the store accepted tokens 10, 12,
// then 11, so 12's write is lost; and 11 is stale against 12.
func TestCheckerACatchesALostWrite(t *testing.T) {
	entries := []ledgerEntry{
		{Resource: "r", Token: 10, Value: "a", Accepted: true},
		{Resource: "r", Token: 12, Value: "b", Accepted: true},
		{Resource: "r", Token: 11, Value: "c", Accepted: true},
		{Resource: "r", Token: 12, Value: "d", Accepted: true},
	}
	r := checkLedger(entries)
	if r.Lost != 1 || r.StaleAccepted != 1 {
		t.Errorf("checker A: %+v", r)
	}
	t.Log(r.Violations)
}

func TestCheckerACatchesAWrongRejection(t *testing.T) {
	entries := []ledgerEntry{
		{Resource: "r", Token: 10, Value: "a", Accepted: true},
		{Resource: "r", Token: 10, Value: "b", Current: 10}, // equal passes: refusing it is wrong
	}
	if r := checkLedger(entries); r.BadRejections != 1 {
		t.Errorf("checker A: %+v", r)
	}
}

func TestCheckerBCatchesADuplicateToken(t *testing.T) {
	ops, _ := legalHistory()
	ops = append(ops, op{Client: 3, Resource: "r", Kind: opAcquire, Call: ms(400), Return: ms(401), Outcome: outOK, Token: 11})
	r := checkGrants(ops)
	if r.Duplicates != 1 {
		t.Errorf("checker B: %+v", r)
	}
	// Token 11 after token 12 had been granted is an inversion too.
	if r.Inversions != 1 {
		t.Errorf("checker B inversions: %+v", r)
	}
	t.Log(r.Examples)
}

func TestCheckerBCountsAnInversion(t *testing.T) {
	ops := []op{
		{Client: 1, Resource: "r", Kind: opAcquire, Call: ms(0), Return: ms(1), Outcome: outOK, Token: 20},
		{Client: 2, Resource: "r", Kind: opAcquire, Call: ms(0), Return: ms(5), Outcome: outOK, Token: 19}, // concurrent: fine
		{Client: 3, Resource: "r", Kind: opAcquire, Call: ms(6), Return: ms(7), Outcome: outOK, Token: 18}, // after both: inverted
		{Client: 3, Resource: "s", Kind: opAcquire, Call: ms(8), Return: ms(9), Outcome: outOK, Token: 1},  // another resource: unrelated
	}
	if r := checkGrants(ops); r.Inversions != 1 || r.Duplicates != 0 {
		t.Errorf("checker B: %+v", r)
	}
}

// A read that returns an overwritten value after the overwrite returned
// is not linearizable, though every write was fenced correctly.
func TestCheckerCCatchesAStaleRead(t *testing.T) {
	ops := []op{
		{Client: 1, Resource: "r", Kind: opPut, Call: ms(0), Return: ms(1), Outcome: outOK, Token: 10, Value: "a"},
		{Client: 2, Resource: "r", Kind: opPut, Call: ms(2), Return: ms(3), Outcome: outOK, Token: 11, Value: "b"},
		{Client: 1, Resource: "r", Kind: opGet, Call: ms(4), Return: ms(5), Outcome: outOK, Token: 10, Value: "a"},
	}
	dir := t.TempDir()
	r := checkLinearizable(ops, 0, func() string { return dir }, "stale-read")
	if r.Result != porcupine.Illegal {
		t.Fatalf("checker C: %v", r)
	}
	if r.VizErr != nil || r.Viz == "" {
		t.Errorf("visualization %q: %v", r.Viz, r.VizErr)
	}
}

// What the clients see of an unfenced store: a write with a lower token
// accepted after a higher one returned.
func TestCheckerCCatchesAStaleWriteAccepted(t *testing.T) {
	ops := []op{
		{Client: 2, Resource: "r", Kind: opPut, Call: ms(0), Return: ms(1), Outcome: outOK, Token: 11, Value: "b"},
		{Client: 1, Resource: "r", Kind: opPut, Call: ms(2), Return: ms(3), Outcome: outOK, Token: 10, Value: "a"},
	}
	if r := checkLinearizable(ops, 0, nil, ""); r.Result != porcupine.Illegal {
		t.Errorf("checker C: %v", r)
	}
	// A refusal must report the stored token.
	ops[1].Outcome, ops[1].Current = outStale, 12
	if r := checkLinearizable(ops, 0, nil, ""); r.Result != porcupine.Illegal {
		t.Errorf("checker C, wrong current: %v", r)
	}
	ops[1].Current = 11
	if r := checkLinearizable(ops, 0, nil, ""); r.Result != porcupine.Ok {
		t.Errorf("checker C, right current: %v", r)
	}
}

func TestCheckDeliveriesCatchesAMismatch(t *testing.T) {
	ops, entries := legalHistory()
	entries[2].Accepted, entries[2].Current = false, fencedlock.Token(12) // c2 saw ok
	if r := checkDeliveries(ops, entries); r.Mismatches != 1 {
		t.Errorf("deliveries: %+v", r)
	}
	entries = append(entries, ledgerEntry{Resource: "r", Token: 13, Value: "nobody", Accepted: true})
	if r := checkDeliveries(ops, entries); r.Orphans != 1 {
		t.Errorf("deliveries: %+v", r)
	}
}
