package safety

import (
	"fmt"
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

// A failed write that may have landed: the final read may find it, or
// the last accepted write; nothing else.
func TestCheckFinalReadsAllowsAFailedWriteThatLanded(t *testing.T) {
	entries := []ledgerEntry{
		{Resource: "r", Token: 10, Value: "a", Accepted: true},
		{Resource: "r", Token: 11, Value: "b", Err: "timeout"},
	}
	r := checkLedger(entries)
	for _, tc := range []struct {
		value string
		token fencedlock.Token
		bad   int
	}{{"a", 10, 0}, {"b", 11, 0}, {"c", 11, 1}} {
		final := []op{{Resource: "r", Kind: opGet, Final: true, Outcome: outOK, Value: tc.value, Token: tc.token}}
		if bad := checkFinalReads(r, final); len(bad) != tc.bad {
			t.Errorf("final read %s/%d: %v, want %d mismatches", tc.value, tc.token, bad, tc.bad)
		}
	}
	// Not found while writes were accepted.
	if bad := checkFinalReads(r, []op{{Resource: "r", Kind: opGet, Final: true, Outcome: outNotFound}}); len(bad) != 1 {
		t.Errorf("final read not found: %v, want a mismatch", bad)
	}
}

// A final read must be linearized after every write, the unknown ones
// included: an unknown write cannot be placed after it.
func TestCheckerCPlacesUnknownWritesBeforeTheFinalReads(t *testing.T) {
	ops := []op{
		{Client: 1, Resource: "r", Kind: opPut, Call: ms(0), Return: ms(1), Outcome: outOK, Token: 10, Value: "a"},
		{Client: 2, Resource: "r", Kind: opPut, Call: ms(2), Return: ms(3), Outcome: outUnknown, Token: 11, Value: "b"},
		{Client: finalReader, Resource: "r", Kind: opGet, Final: true, Call: ms(10), Return: ms(11), Outcome: outOK, Token: 10, Value: "a"},
		{Client: finalReader, Resource: "r", Kind: opGet, Final: true, Call: ms(12), Return: ms(13), Outcome: outOK, Token: 11, Value: "b"},
	}
	if r := checkLinearizable(ops, 0, nil, ""); r.Result != porcupine.Illegal {
		t.Errorf("checker C: %v, want Illegal", r)
	}
	if r := checkLinearizable(ops[:3], 0, nil, ""); r.Result != porcupine.Ok {
		t.Errorf("checker C without the second final read: %v", r)
	}
}

// Every scenario is a valid combination; the guards refuse the ones that
// would run and silently test less.
func TestScenariosAreValid(t *testing.T) {
	names := map[string]bool{}
	for _, sc := range scenarios {
		if err := sc.validate(); err != nil {
			t.Error(err)
		}
		if names[sc.name] {
			t.Errorf("two scenarios named %q", sc.name)
		}
		names[sc.name] = true
	}
	for _, sc := range []scenario{
		{name: "children-direct", topology: topoSingle, store: storeDirect, children: 2, faults: []string{faultSigstop}},
		{name: "negative-direct", topology: topoSingle, store: storeDirect, negative: true},
		{name: "negative-fenced", topology: topoSingle, store: storeMemory, negative: true},
		{name: "proxy-cluster", topology: topoCluster, store: storeMemory, faults: []string{faultProxy}},
		{name: "restart-failover", topology: topoFailover, store: storeMemory, faults: []string{faultRestart}},
		{name: "kill-master-single", topology: topoSingle, store: storeMemory, faults: []string{faultKillMaster}},
		{name: "flushall-sentinel", topology: topoSentinel, store: storeMemory, faults: []string{faultFlushAll}},
		{name: "replicas-single", topology: topoSingle, store: storeMemory, replicas: 1},
		{name: "sigstop-alone", topology: topoSingle, store: storeMemory, faults: []string{faultSigstop}},
		{name: "register-sqlite", topology: topoSingle, store: storeSQLite},
		{name: "late-write-sqlite", topology: topoSingle, store: storeSQLite, workload: workloadAppend, faults: []string{faultLateWrite}},
		{name: "store-proxy-sqlite", topology: topoSingle, store: storeSQLite, workload: workloadAppend, faults: []string{faultStoreProxy}},
		{name: "store-proxy-http", topology: topoSingle, store: storeMemory, workload: workloadAppend, faults: []string{faultStoreProxy}},
		{name: "children-postgres", topology: topoSingle, store: storePostgres, workload: workloadAppend, children: 2, faults: []string{faultSigstop}},
		{name: "late-reply-append", topology: topoSingle, store: storeMemory, workload: workloadAppend, faults: []string{faultLateReply}},
		{name: "get-put-unfenced", topology: topoSingle, store: storeUnfenced, workload: workloadGetPut, negative: true},
		{name: "get-put-direct", topology: topoSingle, store: storeDirect, workload: workloadGetPut},
		{name: "unknown-workload", topology: topoSingle, store: storeMemory, workload: "appendx"},
	} {
		if err := sc.validate(); err == nil {
			t.Errorf("%s: validated", sc.name)
		}
	}
}

// The attribution of stale writes, and the stops counted while holding.
func TestStaleCausesAndStops(t *testing.T) {
	ops := []op{
		{Client: 1, Resource: "r", Kind: opAcquire, Call: ms(0), Return: ms(1), Outcome: outOK, Token: 5},
		{Client: 1, Resource: "r", Kind: opPut, Call: ms(400), Return: ms(401), Outcome: outStale, Token: 5, Value: "p", Paused: true},
		{Client: 1, Resource: "r", Kind: opRelease, Call: ms(402), Return: ms(403), Outcome: outFail, Token: 5},
		{Client: 4, Resource: "r", Kind: opAcquire, Call: ms(0), Return: ms(2), Outcome: outOK, Token: 6},
		{Client: 4, Resource: "r", Kind: opPut, Call: ms(500), Return: ms(501), Outcome: outStale, Token: 6, Value: "s"},
		{Client: 4, Resource: "r", Kind: opRelease, Call: ms(502), Return: ms(503), Outcome: outFail, Token: 6},
		{Client: 2, Resource: "r", Kind: opAcquire, Call: ms(0), Return: ms(600), Outcome: outOK, Token: 7},
		{Client: 2, Resource: "r", Kind: opPut, Call: ms(601), Return: ms(602), Outcome: outStale, Token: 7, Value: "g"},
		{Client: 3, Resource: "r", Kind: opAcquire, Call: ms(0), Return: ms(1), Outcome: outOK, Token: 8},
		{Client: 3, Resource: "r", Kind: opPut, Call: ms(10), Return: ms(11), Outcome: outUnknown, Token: 8, Value: "l"},
		{Client: 3, Resource: "q", Kind: opAcquire, Call: ms(20), Return: ms(21), Outcome: outOK, Token: 2},
		{Client: 3, Resource: "q", Kind: opPut, Call: ms(700), Return: ms(701), Outcome: outStale, Token: 2, Value: "x"},
		{Client: 3, Resource: "q", Kind: opPut, Call: ms(702), Return: ms(703), Outcome: outStale, Token: 9, Value: "o"},
		{Client: 5, Resource: "q", Kind: opAcquire, Call: ms(1000), Return: ms(1001), Outcome: outOK, Token: 3},
		{Client: 5, Resource: "q", Kind: opPut, Call: ms(1500), Return: ms(1501), Outcome: outStale, Token: 3, Value: "h"},
	}
	sortOps(ops)
	events := []faultEvent{
		{Kind: faultSigstop, Clients: []int{4}, Start: ms(100), End: ms(400)},
		{Kind: "proxy-delay", Clients: []int{2, 3}, Start: ms(50), End: ms(60)},
		{Kind: faultRestart, Start: ms(300), End: ms(301)},
		{Kind: faultSigstop, Clients: []int{4}, Start: ms(600), End: ms(900)},
		{Kind: faultLateWrite, Start: ms(1100), End: ms(1200)},
	}
	applied := map[string]int64{"l": ms(900)}
	got := staleCauses([]string{"p", "s", "g", "l", "x", "o", "h"}, ops, events, applied)
	want := map[string]int{causePause: 1, causeSigstop: 1, causeLateGrant: 1, causeLate: 1, causeStoreSlow: 1, causeLockLost: 1, causeOther: 1}
	for _, c := range causeOrder {
		if got[c] != want[c] {
			t.Errorf("causes: %v, want %v", got, want)
			break
		}
	}
	if stops, holding := stopsWhileHolding(ops, events); stops != 2 || holding != 1 {
		t.Errorf("stops while holding: %d/%d, want 1/2", holding, stops)
	}
}

// lockValue is a lock key's value for a hand-built history: owner n's
// 32-hex nonce and the token.
func lockValue(n int, token fencedlock.Token) string {
	return fmt.Sprintf("%032x:%d", n, token)
}

// Checker D: a key found holding the Lock's token, a higher one or none
// passes; a lower token, a value that is no lock's, or one token under
// two owners fails; reads that failed or were skipped are not checks.
func TestCheckerDCatchesALockWithoutItsGrant(t *testing.T) {
	acq := func(client int, token fencedlock.Token, kr keyRead, kv string) op {
		return op{Client: client, Resource: "r", Kind: opAcquire, Call: ms(int64(token)), Return: ms(int64(token) + 1), Outcome: outOK, Token: token, KeyRead: kr, KeyValue: kv}
	}
	legal := []op{
		acq(0, 10, keyFound, lockValue(1, 10)),
		acq(2, 11, keyFound, lockValue(2, 12)), // a later grant already
		acq(1, 12, keyFound, lockValue(2, 12)),
		acq(3, 13, keyMissing, ""),
		acq(3, 14, keyError, "connection refused"),
		acq(2, 15, keySkipped, ""),
		{Client: 0, Resource: "r", Kind: opAcquire, Outcome: outFail},
	}
	r := checkHeld(legal, lockerOf)
	if r.Violations != 0 || r.Returned != 6 || r.Checked != 4 || r.Held != 2 || r.Later != 1 || r.Missing != 1 || r.Errors != 1 || r.Skipped != 1 {
		t.Errorf("checker D on a legal history: %+v", r)
	}
	bad := append(legal,
		acq(1, 20, keyFound, lockValue(1, 10)),   // c0's token 10: the same Locker's
		acq(2, 21, keyFound, lockValue(9, 12)),   // c1's token 12: another Locker's
		acq(4, 22, keyFound, lockValue(5, 19)),   // a grant nobody saw returned
		acq(2, 23, keyFound, "not a lock value"), // garbage
	)
	r = checkHeld(bad, lockerOf)
	if r.Violations != 4 || r.Own != 1 || r.Other != 2 {
		t.Errorf("checker D: %+v, want 4 violations, 1 of its own Locker and 2 of others", r)
	}
	t.Log(r.Examples)
	// The same token under two owners.
	twice := []op{acq(0, 30, keyFound, lockValue(1, 30)), acq(2, 30, keyFound, lockValue(2, 30))}
	if r := checkHeld(twice, lockerOf); r.Violations != 1 {
		t.Errorf("checker D, one token under two owners: %+v", r)
	}
}

// Checker A with fences: a write refused because of an earlier fence is
// the rule; a write or fence accepted below an accepted fence, and a
// refusal that reports anything but the fence, are violations.
func TestCheckerAAccountsForFences(t *testing.T) {
	legal := []ledgerEntry{
		{Resource: "r", Token: 5, Value: "a", Accepted: true},
		{Resource: "r", Fence: true, Token: 7, Accepted: true},
		{Resource: "r", Token: 6, Value: "b", Current: 7},           // refused: the fence is 7
		{Resource: "r", Fence: true, Token: 6, Current: 7},          // refused too
		{Resource: "r", Fence: true, Token: 7, Accepted: true},      // equal passes
		{Resource: "r", Token: 7, Value: "c", Accepted: true},       // the fence's holder writes
		{Resource: "s", Fence: true, Token: 3, Accepted: true},      // a fence alone holds no value
		{Resource: "s", Token: 2, Value: "d", Current: 3},           // refused
		{Resource: "r", Fence: true, Token: 9, Err: "timeout"},      // may have landed
		{Resource: "r", Token: 8, Value: "e", Current: 9},           // ... it had
		{Resource: "r", Fence: true, Token: 10, Err: "timeout"},     // may have landed
		{Resource: "r", Token: 10, Value: "f", Accepted: true},      // ... whether or not
		{Resource: "r", Fence: true, Token: 11, Accepted: true},     //
		{Resource: "r", Fence: true, Token: 12, Err: "unreachable"}, // never landed, as far as anyone knows
	}
	r := checkLedger(legal)
	if !r.ok() || r.Accepted != 3 || r.Rejected != 3 || r.Fences != 8 || r.FencesAccepted != 4 || r.FencesRejected != 1 || r.FenceErrors != 3 {
		t.Errorf("checker A on a legal history: %+v", r)
	}
	final := func(res, value string, token fencedlock.Token) []op {
		o := op{Resource: res, Kind: opGet, Final: true, Outcome: outOK, Value: value, Token: token}
		if value == "" {
			o.Outcome = outNotFound
		}
		return []op{o}
	}
	if bad := checkFinalReads(r, append(final("r", "f", 10), final("s", "", 0)...)); len(bad) != 0 {
		t.Errorf("final reads: %v", bad)
	}
	// A fence is no value: the final read may not find a fence's token
	// as the value's.
	if bad := checkFinalReads(r, final("r", "", 12)); len(bad) != 1 {
		t.Errorf("final read of a fence as a value: %v, want a mismatch", bad)
	}

	for _, tc := range []struct {
		name    string
		entries []ledgerEntry
		want    func(ledgerReport) bool
	}{
		{"a write below an accepted fence accepted", []ledgerEntry{
			{Resource: "r", Fence: true, Token: 7, Accepted: true},
			{Resource: "r", Token: 6, Value: "b", Accepted: true},
		}, func(r ledgerReport) bool { return r.StaleAccepted == 1 && r.Lost == 0 }},
		{"a fence below an accepted write accepted", []ledgerEntry{
			{Resource: "r", Token: 7, Value: "a", Accepted: true},
			{Resource: "r", Fence: true, Token: 6, Accepted: true},
		}, func(r ledgerReport) bool { return r.StaleAccepted == 1 }},
		{"a write refused reporting the value's token, not the fence", []ledgerEntry{
			{Resource: "r", Token: 5, Value: "a", Accepted: true},
			{Resource: "r", Fence: true, Token: 7, Accepted: true},
			{Resource: "r", Token: 6, Value: "b", Current: 5},
		}, func(r ledgerReport) bool { return r.BadRejections == 1 }},
		{"a fence refused though not stale", []ledgerEntry{
			{Resource: "r", Fence: true, Token: 7, Accepted: true},
			{Resource: "r", Fence: true, Token: 7, Current: 7},
		}, func(r ledgerReport) bool { return r.BadRejections == 1 }},
		{"a failed fence below the fence cannot explain a refusal", []ledgerEntry{
			{Resource: "r", Token: 8, Value: "a", Accepted: true},
			{Resource: "r", Fence: true, Token: 7, Err: "timeout"},
			{Resource: "r", Token: 6, Value: "b", Current: 7},
		}, func(r ledgerReport) bool { return r.BadRejections == 1 }},
	} {
		if r := checkLedger(tc.entries); r.ok() || !tc.want(r) {
			t.Errorf("%s: checker A: %+v", tc.name, r)
		}
	}
}

// The deliveries match fences by resource and token: a fence the client
// saw accepted must have been accepted, one the store got must have been
// sent.
func TestCheckDeliveriesMatchesFences(t *testing.T) {
	ops := []op{
		{Client: 1, Resource: "r", Kind: opFence, Token: 7, Outcome: outOK, Call: ms(0), Return: ms(1)},
		{Client: 2, Resource: "r", Kind: opFence, Token: 6, Outcome: outStale, Current: 7, Call: ms(2), Return: ms(3)},
		{Client: 3, Resource: "r", Kind: opFence, Token: 8, Outcome: outUnknown, Call: ms(4), Return: ms(5)},
		{Client: 1, Resource: "r", Kind: opPut, Token: 7, Value: "a", Outcome: outStale, Current: 8, Call: ms(10), Return: ms(11)},
	}
	entries := []ledgerEntry{
		{Resource: "r", Fence: true, Token: 7, Accepted: true, At: ms(0)},
		{Resource: "r", Fence: true, Token: 6, Current: 7, At: ms(2)},
		{Resource: "r", Fence: true, Token: 8, Accepted: true, At: ms(9)}, // late
		{Resource: "r", Token: 7, Value: "a", Current: 8, At: ms(10)},
	}
	if r := checkDeliveries(ops, entries); !r.ok() || r.Late != 1 || r.LateAccepted != 1 {
		t.Errorf("deliveries: %+v", r)
	}
	if r := checkLedger(entries); !r.ok() {
		t.Errorf("checker A: %+v", r)
	}
	refused := append([]ledgerEntry(nil), entries...)
	refused[0].Accepted, refused[0].Current = false, 9
	if r := checkDeliveries(ops, refused); r.Mismatches != 1 {
		t.Errorf("deliveries, a fence seen accepted that the store refused: %+v", r)
	}
	orphan := append(append([]ledgerEntry(nil), entries...), ledgerEntry{Resource: "s", Fence: true, Token: 7, Accepted: true})
	if r := checkDeliveries(ops, orphan); r.Orphans != 1 {
		t.Errorf("deliveries, a fence nobody sent: %+v", r)
	}
	if r := checkDeliveries(ops, entries[1:]); r.Mismatches != 1 {
		t.Errorf("deliveries, a fence seen accepted that the store never got: %+v", r)
	}
}
