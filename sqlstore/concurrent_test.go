package sqlstore_test

import (
	"database/sql"
	"errors"
	"math/rand"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
)

// Sizes of TestTxConcurrent: a few hundred transactions, a second or two
// under -race.
const (
	txGoroutines = 8
	txCalls      = 25 // per goroutine
	txSpread     = 12 // how far a token may be above the rising base
)

// txCall is one Tx, Put or Fence of TestTxConcurrent,
// TestTxAndPutConcurrent and TestFenceConcurrent. inv and resp are ticks
// of a shared counter taken just before the call and just after it
// returned: call a returned before call b began when a.resp < b.inv.
type txCall struct {
	id        int64
	kind      callKind // a Put writes the value id
	token     fencedlock.Token
	inv, resp int64
	ran       bool // fn was called (Tx)
	err       error
}

// callKind is what a txCall is.
type callKind int

const (
	callTx callKind = iota
	callPut
	callFence
)

// String returns "Tx", "Put" or "Fence".
func (k callKind) String() string {
	switch k {
	case callPut:
		return "Put"
	case callFence:
		return "Fence"
	}
	return "Tx"
}

// callMix says which calls runConcurrent makes: one call in put is a
// Put, and one in fence of the others a Fence (none when 0); the rest are
// Tx calls.
type callMix struct{ put, fence int }

func (m callMix) String() string {
	s := "no Put"
	if m.put > 0 {
		s = "one in " + strconv.Itoa(m.put) + " a Put"
	}
	if m.fence > 0 {
		s += ", one in " + strconv.Itoa(m.fence) + " of the others a Fence"
	}
	return s
}

// Many goroutines run Tx on one resource with tokens that rise but are
// shuffled, and fn writes a ledger row numbered inside the transaction.
// The fence must make the transactions take effect in token order:
//
//   - the ledger, in the order of its numbers (the commit order: each
//     transaction numbers its row under the lock that serializes them),
//     never goes down in token, and has no gap or duplicate number;
//   - every accepted call ran fn once and its row is there, and only
//     accepted calls have rows;
//   - every refused call got a *StaleTokenError with Current above Token,
//     Current a token an accepted call committed, and did not run fn;
//   - no call is accepted, and no refusal reports a Current, below the
//     token of a call accepted before it began;
//   - the fence ends at the highest accepted token.
func TestTxConcurrent(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) { runConcurrent(t, b, callMix{}) })
}

// TestTxConcurrent with one call in three a Put instead of a Tx, on the
// same resource: Put and Tx share the fence and the lock, so the checks
// of TestTxConcurrent hold for all the calls, Puts included (a refusal's
// Current may be a Put's token, and no call is accepted below a Put
// accepted before it began), and besides:
//
//   - each Tx's fn reads the value token of the Store's row and writes it
//     in its ledger row: it is never above the Tx's token, never goes
//     down along the ledger, is 0 or the token of an accepted Put, and is
//     not below the token of a Put accepted before the Tx began;
//   - Get returns, at the end, a value that an accepted Put with the
//     highest accepted Put token wrote, with that token.
func TestTxAndPutConcurrent(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) { runConcurrent(t, b, callMix{put: 3}) })
}

// TestTxAndPutConcurrent with Fence calls on the resource too, and with
// Put and Fence calls alone: Fence shares the fence and the lock with Put
// and Tx, so the checks hold for Fence calls as well (a refusal's Current
// may be a Fence's token, and no Put, Fence or Tx is accepted below a
// Fence accepted before it began), and a Fence never changes the value
// that Get returns at the end.
func TestFenceConcurrent(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		t.Run("Put and Fence", func(t *testing.T) { runConcurrent(t, b, callMix{put: 2, fence: 1}) })
		t.Run("Tx, Put and Fence", func(t *testing.T) { runConcurrent(t, b, callMix{put: 3, fence: 2}) })
	})
}

// runConcurrent runs the calls of TestTxConcurrent on a fresh table, the
// kinds of call drawn as mix says, and checks them.
func runConcurrent(t *testing.T, b *backend, mix callMix) {
	ctx := testCtx(t)
	s := b.newStore(t)
	ledger := b.name(t, "ledger")
	b.exec(t, `CREATE TABLE `+ledger+` (resource VARCHAR(64) NOT NULL, seq BIGINT NOT NULL, token BIGINT NOT NULL, call_id BIGINT NOT NULL, seen BIGINT NOT NULL, PRIMARY KEY (resource, seq))`)
	const r = "concurrent"
	nextSeq := b.sql(`SELECT COALESCE(MAX(seq), 0) + 1 FROM ` + ledger + ` WHERE resource = $1`)
	valueToken := b.sql(`SELECT COALESCE(value_token, 0) FROM ` + s.Table() + ` WHERE resource = $1`)
	insert := b.sql(`INSERT INTO ` + ledger + ` (resource, seq, token, call_id, seen) VALUES ($1, $2, $3, $4, $5)`)

	seed := time.Now().UnixNano()
	t.Logf("%d goroutines, %d calls each (%v), tokens drawn with seed %d", txGoroutines, txCalls, mix, seed)
	var (
		base, tick atomic.Int64
		wg         sync.WaitGroup
		start      = make(chan struct{})
		results    = make([][]txCall, txGoroutines)
	)
	for g := 0; g < txGoroutines; g++ {
		g := g
		rng := rand.New(rand.NewSource(seed + int64(g)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < txCalls; i++ {
				c := txCall{id: int64(g*txCalls + i + 1)}
				switch {
				case mix.put > 0 && rng.Intn(mix.put) == 0:
					c.kind = callPut
				case mix.fence > 0 && rng.Intn(mix.fence) == 0:
					c.kind = callFence
				}
				c.token = fencedlock.Token(base.Add(1) + rng.Int63n(txSpread))
				pause := rng.Intn(4) == 0
				c.inv = tick.Add(1)
				switch c.kind {
				case callPut:
					c.err = s.Put(ctx, r, c.token, []byte(strconv.FormatInt(c.id, 10)))
				case callFence:
					c.err = s.Fence(ctx, r, c.token)
				}
				if c.kind != callTx {
					c.resp = tick.Add(1)
					results[g] = append(results[g], c)
					continue
				}
				c.err = s.Tx(ctx, r, c.token, func(tx *sql.Tx) error {
					c.ran = true
					var seq, seen int64
					if err := tx.QueryRowContext(ctx, nextSeq, r).Scan(&seq); err != nil {
						return err
					}
					if err := tx.QueryRowContext(ctx, valueToken, r).Scan(&seen); err != nil {
						return err
					}
					// Now and then a pause between the reads and the
					// write, to widen the window a broken lock leaves.
					if pause {
						time.Sleep(200 * time.Microsecond)
					}
					_, err := tx.ExecContext(ctx, insert, r, seq, int64(c.token), c.id, seen)
					return err
				})
				c.resp = tick.Add(1)
				results[g] = append(results[g], c)
			}
		}()
	}
	close(start)
	wg.Wait()

	var all []txCall
	for _, rs := range results {
		all = append(all, rs...)
	}
	checkTxCalls(t, b, all, ledger, r)
	var max, maxPut fencedlock.Token
	putValues := make(map[string]fencedlock.Token) // of the accepted Puts
	for _, c := range all {
		if c.err == nil && c.token > max {
			max = c.token
		}
		if c.err == nil && c.kind == callPut {
			putValues[strconv.FormatInt(c.id, 10)] = c.token
			if c.token > maxPut {
				maxPut = c.token
			}
		}
	}
	if f, err := s.CurrentFence(ctx, r); err != nil || f != max {
		t.Errorf("CurrentFence = (%d, %v) at the end; want %d, the highest accepted token", f, err, max)
	}
	if mix.put > 0 {
		v, tok, err := s.Get(ctx, r)
		if tokV, ok := putValues[string(v)]; err != nil || tok != maxPut || !ok || tokV != tok {
			t.Errorf("Get = (%q, %d, %v) at the end; want the value of an accepted Put with token %d, the highest accepted Put token", v, tok, err, maxPut)
		}
	}
}

// checkTxCalls checks the calls of TestTxConcurrent (and
// TestTxAndPutConcurrent, TestFenceConcurrent) and the ledger they
// wrote.
func checkTxCalls(t *testing.T, b *backend, all []txCall, ledger, r string) {
	t.Helper()
	// Each check reports at most five violations, so that every check
	// that fails shows.
	reports := make(map[string]int)
	report := func(check, format string, args ...any) {
		t.Helper()
		switch reports[check]++; reports[check] {
		case 1, 2, 3, 4, 5:
			t.Errorf(check+": "+format, args...)
		case 6:
			t.Errorf("%s: more violations follow; not reported", check)
		}
	}

	accepted := make(map[int64]txCall)
	committed := make(map[fencedlock.Token]bool)
	putTokens := make(map[fencedlock.Token]bool) // of the accepted Puts
	var acceptedCalls, refused []txCall
	kindAccepted, kindRefused := make(map[callKind]int), make(map[callKind]int)
	for _, c := range all {
		var se *fencedlock.StaleTokenError
		switch {
		case c.err == nil:
			accepted[c.id] = c
			acceptedCalls = append(acceptedCalls, c)
			committed[c.token] = true
			kindAccepted[c.kind]++
			if c.kind == callPut {
				putTokens[c.token] = true
			}
			if !c.ran && c.kind == callTx {
				report("calls", "Tx call %d (token %d) was accepted without running fn", c.id, c.token)
			}
		case errors.As(c.err, &se):
			refused = append(refused, c)
			kindRefused[c.kind]++
			if c.ran {
				report("calls", "Tx call %d (token %d) was refused (%v) after running fn", c.id, c.token, c.err)
			}
			if se.Resource != r || se.Token != c.token || se.Current <= c.token {
				report("calls", "%s call %d (token %d): StaleTokenError{%q, Token %d, Current %d}; want {%q, Token %d, Current above it}", c.kind, c.id, c.token, se.Resource, se.Token, se.Current, r, c.token)
			}
		default:
			report("calls", "%s call %d (token %d, fn ran: %v) = %v; want nil or a *fencedlock.StaleTokenError", c.kind, c.id, c.token, c.ran, c.err)
		}
	}
	t.Logf("%d calls accepted, %d refused; of them Puts: %d accepted, %d refused; Fences: %d accepted, %d refused",
		len(acceptedCalls), len(refused), kindAccepted[callPut], kindRefused[callPut], kindAccepted[callFence], kindRefused[callFence])
	if len(acceptedCalls) < txGoroutines || len(refused) == 0 {
		t.Errorf("%d calls accepted, %d refused: the test did not make the calls race", len(acceptedCalls), len(refused))
	}
	for _, k := range []callKind{callPut, callFence} {
		if a, r := kindAccepted[k], kindRefused[k]; a+r > 0 && (a == 0 || r == 0) {
			t.Errorf("%d %s calls accepted, %d refused: the test did not make them race with the others", a, k, r)
		}
	}
	for _, c := range refused {
		var se *fencedlock.StaleTokenError
		if errors.As(c.err, &se) && !committed[se.Current] {
			report("calls", "call %d (token %d) was refused with Current %d, which no accepted call committed", c.id, c.token, se.Current)
		}
	}

	// Real time: the highest token accepted (by any call, or by a Put)
	// before a call began.
	sort.Slice(acceptedCalls, func(i, j int) bool { return acceptedCalls[i].resp < acceptedCalls[j].resp })
	highestBefore := func(inv int64, putsOnly bool) (fencedlock.Token, int64) {
		var hi fencedlock.Token
		var id int64
		for _, a := range acceptedCalls {
			if a.resp >= inv {
				break
			}
			if a.token > hi && (a.kind == callPut || !putsOnly) {
				hi, id = a.token, a.id
			}
		}
		return hi, id
	}
	for _, c := range all {
		hi, id := highestBefore(c.inv, false)
		var se *fencedlock.StaleTokenError
		switch {
		case c.err == nil && c.token < hi:
			report("real time", "%s call %d was accepted with token %d after %s call %d with token %d had been accepted", c.kind, c.id, c.token, accepted[id].kind, id, hi)
		case errors.As(c.err, &se) && se.Current < hi:
			report("real time", "%s call %d was refused with Current %d after %s call %d with token %d had been accepted", c.kind, c.id, se.Current, accepted[id].kind, id, hi)
		}
	}

	// The ledger in commit order.
	rows, err := b.db.Query(b.sql(`SELECT seq, token, call_id, seen FROM `+ledger+` WHERE resource = $1 ORDER BY seq`), r)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := make(map[int64]bool)
	var (
		n             int64
		prev          txCall
		prevValueSeen fencedlock.Token
	)
	for rows.Next() {
		var seq, token, call, valueSeen int64
		if err := rows.Scan(&seq, &token, &call, &valueSeen); err != nil {
			t.Fatal(err)
		}
		n++
		if seq != n {
			report("ledger", "ledger row %d has number %d: a gap or a duplicate", n, seq)
		}
		c, ok := accepted[call]
		switch {
		case !ok:
			report("ledger", "ledger row %d was written by call %d, which was not accepted", seq, call)
		case c.kind != callTx:
			report("ledger", "ledger row %d was written by call %d, a %s", seq, call, c.kind)
		case seen[call]:
			report("ledger", "ledger row %d: call %d wrote two rows", seq, call)
		case fencedlock.Token(token) != c.token:
			report("ledger", "ledger row %d: call %d wrote token %d; its token was %d", seq, call, token, c.token)
		}
		seen[call] = true
		if n > 1 && fencedlock.Token(token) < prev.token {
			report("ledger", "ledger row %d (call %d, token %d) was committed after row %d (call %d, token %d): the tokens went down", seq, call, token, seq-1, prev.id, prev.token)
		}
		prev = txCall{id: call, token: fencedlock.Token(token)}

		// The value token the Tx saw: the token of the last Put
		// committed before it.
		vs := fencedlock.Token(valueSeen)
		switch {
		case vs > fencedlock.Token(token):
			report("puts", "ledger row %d: Tx call %d (token %d) saw value token %d, above its own", seq, call, token, vs)
		case vs != 0 && !putTokens[vs]:
			report("puts", "ledger row %d: Tx call %d saw value token %d, which no accepted Put used", seq, call, vs)
		case vs < prevValueSeen:
			report("puts", "ledger row %d: Tx call %d saw value token %d, below the %d that row %d saw", seq, call, vs, prevValueSeen, seq-1)
		}
		if hi, id := highestBefore(c.inv, true); ok && vs < hi {
			report("puts", "ledger row %d: Tx call %d saw value token %d after Put call %d with token %d had been accepted", seq, call, vs, id, hi)
		}
		prevValueSeen = vs
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, c := range accepted {
		if !seen[id] && c.kind == callTx {
			report("ledger", "Tx call %d (token %d) was accepted but its ledger row is missing", id, c.token)
		}
	}
}
