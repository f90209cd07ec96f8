package safety

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// summary is one scenario's result, for its log line and the report.
type summary struct {
	Name         string
	Store        string // the scenario's store
	WorkloadKind string // the scenario's workload: workloadRegister, workloadAppend, workloadGetPut
	Seed         int64
	Workload     time.Duration
	Took         time.Duration // the whole scenario: setup, workload, checks
	Clients      string        // "4" or "4+2": in-process + child processes
	Ops          int
	Faults       map[string]int // by kind, the clients' pauses included
	Puts         int            // writes the clients attempted
	Stale        int            // writes the clients saw refused as stale
	Unknown      int            // writes whose outcome the clients did not learn
	// Fences counts the fences the clients made (Update's fenced reads),
	// FencesStale those refused as stale.
	Fences, FencesStale int
	// StaleAttempted counts the stale writes attempted: with a ledger,
	// the writes that reached the store with a token below the highest it
	// had accepted for the resource (rejected as stale + stale accepted);
	// without one, the writes the clients saw refused as stale.
	StaleAttempted int
	Causes         map[string]int // StaleAttempted by likely cause (staleCauses)
	Effects        string         // what the faults did (checkEffects)
	// FinalMismatches counts resources whose value read back at the end
	// is not the ledger's last accepted write. 0.
	FinalMismatches int
	// NotReplicated counts acquires refused with ErrNotReplicated.
	NotReplicated int
	// LocalWaiterReleases counts Releases called while a goroutine of the
	// same Locker waited in Acquire for the resource.
	LocalWaiterReleases int

	Ledger     *ledgerReport   // nil when the clients write to Redis directly
	Deliveries *deliveryReport // nil likewise
	Grants     grantReport
	Held       heldReport // checker D
	Lin        linResult
	Appends    *appendReport // checker E; nil in the register workload
	Negative   bool
}

// faultList formats fault counts: "pause×12, sigstop×5".
func faultList(faults map[string]int) string {
	kinds := make([]string, 0, len(faults))
	for k := range faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s×%d", k, faults[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// line is the scenario's one-line summary.
func (s summary) line() string {
	b := &strings.Builder{}
	fmt.Fprintf(b, "%s: %v, clients %s, ops %d, grants %d, faults [%s], puts %d (client-seen stale %d, unknown %d)",
		s.Name, s.Workload, s.Clients, s.Ops, s.Grants.Grants, faultList(s.Faults), s.Puts, s.Stale, s.Unknown)
	if s.Fences > 0 {
		fmt.Fprintf(b, "; fences %d (stale %d)", s.Fences, s.FencesStale)
	}
	fmt.Fprintf(b, "; stale attempted %d (%s)", s.StaleAttempted, formatCauses(s.Causes))
	if s.Ledger != nil {
		fmt.Fprintf(b, "; store: accepted %d, rejected %d, errors %d, stale accepted %d, lost %d",
			s.Ledger.Accepted, s.Ledger.Rejected, s.Ledger.Errors, s.Ledger.StaleAccepted, s.Ledger.Lost)
		fmt.Fprintf(b, "; late deliveries %d (rejected %d, accepted %d)", s.Deliveries.Late, s.Deliveries.LateRejected, s.Deliveries.LateAccepted)
	}
	if s.NotReplicated > 0 {
		fmt.Fprintf(b, "; acquires not replicated %d", s.NotReplicated)
	}
	fmt.Fprintf(b, "; duplicate tokens %d, inversions %d; porcupine %v", s.Grants.Duplicates, s.Grants.Inversions, s.Lin)
	fmt.Fprintf(b, "; Locks in Redis: %v; releases with a same-Locker waiter %d", s.Held, s.LocalWaiterReleases)
	if s.Effects != "" {
		fmt.Fprintf(b, "; effects: %s", s.Effects)
	}
	if s.Appends != nil {
		fmt.Fprintf(b, "; checker E: %v", *s.Appends)
	}
	return b.String()
}

// storeNames describe the stores in the report.
var storeNames = map[string]string{
	storeMemory:   "MemoryStore over HTTP",
	storeRedis:    "RedisStore over HTTP",
	storeUnfenced: "unfenced, over HTTP",
	storeDirect:   "RedisStore",
	storeSQLite:   "sqlstore, SQLite",
	storePostgres: "sqlstore, PostgreSQL",
	storeMariaDB:  "sqlstore, MariaDB",
}

// markdown is the report: one table row per scenario, then the negative
// control's findings.
func markdown(sums []summary, cfg runConfig) string {
	b := &strings.Builder{}
	mode := "quick"
	if cfg.long {
		mode = "long"
	}
	fmt.Fprintf(b, "Safety suite, %s mode: %v of workload per scenario, seed %d, TTL %v.\n\n", mode, cfg.duration, cfg.seed, lockTTL)
	b.WriteString("Stale writes attempted: writes that reached the store with a token below the highest token it had " +
		"already accepted for the resource, i.e. stale rejected + stale accepted (from the store's ledger; in " +
		"redis-store, which has no ledger, the writes the clients saw refused as stale). By likely cause, the first " +
		"that fits in this order: pause (the client slept past its TTL), sigstop (its process was stopped between " +
		"its acquire and its write), late (the write was delivered after its client gave up), store-slow (the store's network was held up or slowed " +
		"between its acquire and its write, its read among others), late-grant (a network " +
		"fault on its own lock connection during its acquire), lock-lost (a restart, flush or failover between its " +
		"acquire and its write), other. Porcupine's ops include one final read per resource, made once nothing " +
		"could land any more, which must also match the ledger's last accepted write. Checker D: right after a lock call " +
		"returned a Lock, its key was read on the lock Redis past the fault proxies; \"checked\" counts the Locks whose key was " +
		"read (held: their token; later: a higher token; gone: no key), \"not held\" those whose key held a lower token " +
		"(a Lock returned without its grant in Redis): 0.\n\n")
	b.WriteString("| scenario | workload | clients | ops | grants | faults injected | fault effects | puts | stale attempted | stale rejected | stale accepted | by cause | late deliveries (rejected / accepted) | lost | duplicate tokens | inversions | Locks checked in Redis (held / later / gone) | not held | same-Locker waiter at release | porcupine |\n")
	b.WriteString("|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range sums {
		rejected, late, staleAcc, lost := fmt.Sprint(s.Stale), "–", "–", "–"
		if s.Ledger != nil {
			rejected = fmt.Sprint(s.Ledger.Rejected)
			late = fmt.Sprintf("%d (%d / %d)", s.Deliveries.Late, s.Deliveries.LateRejected, s.Deliveries.LateAccepted)
			staleAcc, lost = fmt.Sprint(s.Ledger.StaleAccepted), fmt.Sprint(s.Ledger.Lost)
		}
		name := s.Name
		if s.Negative {
			name += " (unfenced)"
		}
		effects := s.Effects
		if effects == "" {
			effects = "–"
		}
		fmt.Fprintf(b, "| %s | %v | %s | %d | %d | %s | %s | %d | %d | %s | %s | %s | %s | %s | %d | %d | %d/%d (%d / %d / %d) | %d | %d | %s, %d ops, %v |\n",
			name, s.Workload, s.Clients, s.Ops, s.Grants.Grants, faultList(s.Faults), effects, s.Puts, s.StaleAttempted, rejected, staleAcc,
			formatCauses(s.Causes), late, lost, s.Grants.Duplicates, s.Grants.Inversions,
			s.Held.Checked, s.Held.Returned, s.Held.Held, s.Held.Later, s.Held.Missing, s.Held.Violations, s.LocalWaiterReleases,
			s.Lin.Result, s.Lin.Ops, s.Lin.Took.Round(time.Millisecond))
	}
	for _, s := range sums {
		if s.NotReplicated > 0 {
			fmt.Fprintf(b, "\n%s: %d acquires got their lock but were refused with ErrNotReplicated (the replica had not confirmed the grant within %v), against %d grants.\n",
				s.Name, s.NotReplicated, replicaTimeout, s.Grants.Grants)
		}
	}
	appendTable(b, sums)
	for _, s := range sums {
		if !s.Negative || s.Ledger == nil {
			continue
		}
		fmt.Fprintf(b, "\n### Negative control: %s\n\n", s.Name)
		fmt.Fprintf(b, "The same clients and faults against a store without the fence, which accepts every write. "+
			"The checkers must report it, or the suite could not fail. Of %d writes the store got, it accepted %d "+
			"with a token below one it had already accepted (stale accepted), and %d newer writes were lost, overwritten "+
			"by a stale holder; %d late deliveries were accepted. Porcupine: %s.\n",
			s.Ledger.Puts, s.Ledger.StaleAccepted, s.Ledger.Lost, s.Deliveries.LateAccepted, s.Lin.Result)
		if len(s.Ledger.Violations) > 0 {
			b.WriteString("\nThe first violations:\n\n")
			for _, v := range s.Ledger.Violations {
				fmt.Fprintf(b, "- %s\n", v)
			}
		}
	}
	return b.String()
}

// appendTable writes checker E's table, for the scenarios of the append
// workload, and what its negative control found.
func appendTable(b *strings.Builder, sums []summary) {
	var rows []summary
	for _, s := range sums {
		if s.Appends != nil {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n### The append workload (checker E)\n\n")
	b.WriteString("Each update appends a unique item to the resource's list with fencedlock.Update (in append-negative: Get, " +
		"then Put, without the Fence). Acknowledged: Update returned nil; its item must be in the final list exactly once. " +
		"Refused: ErrStaleToken, at the fence (fn was not called) or at the write; its item must not be there. By a fence " +
		"alone: refused at the write before the newer holder, whose fence refused it, had sent its own write; without the " +
		"Fence it would have been acknowledged and then overwritten. Unknown: any " +
		"other error; its item may be there (landed), once. Paused: fn slept past the TTL between the read and the write.\n\n")
	b.WriteString("| scenario | store | updates | acknowledged | refused stale (fence / write) | by a fence alone | unknown (landed) | paused past the TTL (refused / acknowledged / unknown) | items in the final lists | lost | duplicated | refused but present | foreign | porcupine |\n")
	b.WriteString("|---|---|---:|---:|---|---:|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, s := range rows {
		a := s.Appends
		fmt.Fprintf(b, "| %s | %s | %d | %d | %d (%d / %d) | %d | %d (%d) | %d (%d / %d / %d) | %d | %d | %d | %d | %d | %s |\n",
			s.Name, storeNames[s.Store], a.Updates, a.Acknowledged, a.Refused, a.RefusedAtFence, a.RefusedAtPut, a.RefusedByFence, a.Unknown, a.UnknownPresent,
			a.Paused, a.PausedRefused, a.PausedAcknowledged, a.PausedUnknown, a.Items, a.Lost, a.Duplicated, a.RefusedPresent, a.Foreign, s.Lin.Result)
	}
	for _, s := range rows {
		if s.WorkloadKind != workloadGetPut {
			continue
		}
		a := s.Appends
		fmt.Fprintf(b, "\n%s, checker E's negative control: the same workload with Get, then Put, without the Fence, on a fenced store. "+
			"Every write obeyed the fence rule (stale writes accepted: %s; porcupine: %s), and checker E found %d of the %d acknowledged appends lost: "+
			"a stale holder's write landed between a newer holder's read and write, was acknowledged, and was overwritten.\n",
			s.Name, staleAccepted(s), s.Lin.Result, a.Lost, a.Acknowledged)
		if len(a.Examples) > 0 {
			b.WriteString("\nThe first losses:\n\n")
			for _, e := range a.Examples {
				fmt.Fprintf(b, "- %s\n", e)
			}
		}
	}
}

// staleAccepted is checker A's count of stale writes accepted, or "–"
// without a ledger.
func staleAccepted(s summary) string {
	if s.Ledger == nil {
		return "–"
	}
	return fmt.Sprint(s.Ledger.StaleAccepted)
}
