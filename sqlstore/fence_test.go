package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/sqlstore"
)

// CurrentFence reads the fence that Put, Fence and Tx leave: the highest
// token any of them was accepted with.
func TestCurrentFence(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		ctx := testCtx(t)
		s := b.newStore(t)
		if f, err := s.CurrentFence(ctx, "r"); !errors.Is(err, fencedlock.ErrNotFound) || f != 0 {
			t.Errorf("CurrentFence of a resource never used = (%d, %v); want (0, ErrNotFound)", f, err)
		}
		steps := []struct {
			op    string
			token fencedlock.Token
			fence fencedlock.Token // after the step
		}{
			{"put", 5, 5},
			{"tx", 8, 8},
			{"put", 7, 8}, // refused
			{"tx", 6, 8},  // refused
			{"put", 8, 8},
			{"fence", 10, 10},
			{"fence", 9, 10}, // refused
			{"put", 9, 10},   // refused
			{"put", 12, 12},
		}
		for _, st := range steps {
			switch st.op {
			case "put":
				s.Put(ctx, "r", st.token, []byte("v"))
			case "fence":
				s.Fence(ctx, "r", st.token)
			default:
				s.Tx(ctx, "r", st.token, func(*sql.Tx) error { return nil })
			}
			if f, err := s.CurrentFence(ctx, "r"); err != nil || f != st.fence {
				t.Fatalf("after %s(%d): CurrentFence = (%d, %v); want %d", st.op, st.token, f, err, st.fence)
			}
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.CurrentFence(cancelled, "r"); !errors.Is(err, context.Canceled) {
			t.Errorf("CurrentFence with a cancelled context = %v; want context.Canceled", err)
		}
	})
}

// Fence raises the fence without writing a value. An equal token passes;
// a lower one is refused with the fence as Current and changes nothing,
// so the fence never goes down; Get goes on returning the value and the
// token that wrote it. Fence, Put and Tx share the one fence.
func TestFence(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		ctx, s := e.ctx, e.s
		expectValue := func(after, want string, token fencedlock.Token) {
			t.Helper()
			v, tok, err := s.Get(ctx, "r")
			if want == "" {
				if !errors.Is(err, fencedlock.ErrNotFound) {
					t.Errorf("Get after %s = (%q, %d, %v); want ErrNotFound", after, v, tok, err)
				}
				return
			}
			if err != nil || string(v) != want || tok != token {
				t.Errorf("Get after %s = (%q, %d, %v); want (%q, %d)", after, v, tok, err, want, token)
			}
		}

		// A resource only fenced has a fence and no value.
		if err := s.Fence(ctx, "r", 5); err != nil {
			t.Fatalf("Fence(5) on a new resource = %v", err)
		}
		e.expectFence("r", 5)
		expectValue("Fence(5) alone", "", 0)
		if err := s.Fence(ctx, "r", 5); err != nil {
			t.Errorf("Fence(5) at the fence = %v; want an equal token to pass", err)
		}
		expectStale(t, s.Fence(ctx, "r", 4), "r", 4, 5)
		expectStale(t, s.Put(ctx, "r", 4, []byte("four")), "r", 4, 5)
		e.expectFence("r", 5)
		expectValue("a refused Fence(4) and Put(4)", "", 0)

		// Get returns the token that wrote the value, not the fence.
		if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
			t.Fatalf("Put(5) at the fence = %v", err)
		}
		if err := s.Fence(ctx, "r", 9); err != nil {
			t.Fatalf("Fence(9) = %v", err)
		}
		expectValue("Put(5) and Fence(9)", "five", 5)
		e.expectFence("r", 9)
		expectStale(t, s.Put(ctx, "r", 8, []byte("eight")), "r", 8, 9)
		expectStale(t, s.Fence(ctx, "r", 6), "r", 6, 9)
		expectValue("a refused Put(8) and Fence(6)", "five", 5)
		e.expectFence("r", 9)

		// Tx below the fence is refused without calling fn; at the
		// fence it passes.
		ran, err := e.tx("r", 8, "eight")
		expectStale(t, err, "r", 8, 9)
		if ran {
			t.Error("Tx(8) after Fence(9) ran fn")
		}
		e.mustTx("r", 9, "nine")

		// A fence a Tx committed refuses a lower Fence.
		e.mustTx("r", 12, "twelve")
		expectStale(t, s.Fence(ctx, "r", 11), "r", 11, 12)
		if err := s.Fence(ctx, "r", 12); err != nil {
			t.Errorf("Fence(12) after Tx(12) = %v; want it accepted", err)
		}

		// A Tx that rolled back raised nothing.
		boom := errors.New("boom")
		if err := s.Tx(ctx, "r", 20, func(*sql.Tx) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("Tx(20) = %v; want fn's error", err)
		}
		if err := s.Fence(ctx, "r", 15); err != nil {
			t.Errorf("Fence(15) after Tx(20) rolled back = %v; want it accepted", err)
		}
		if err := s.Put(ctx, "r", 15, []byte("fifteen")); err != nil {
			t.Errorf("Put(15) after Fence(15) = %v; want it accepted", err)
		}
		expectValue("Put(15)", "fifteen", 15)
		e.expectFence("r", 15)
		e.expectNotes("r", "nine,twelve")

		// Resources are fenced apart.
		if err := s.Fence(ctx, "other", 1); err != nil {
			t.Errorf("Fence(\"other\", 1) = %v", err)
		}
		e.expectFence("other", 1)
		e.expectFence("r", 15)
		e.expectIdle()
	})
}

// A Fence whose ctx has ended before the call returns ctx.Err() as it is
// and changes nothing: no fence raised, no row made.
func TestFenceEndedContext(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		ctx := testCtx(t)
		s := b.newStore(t)
		if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
			t.Fatal(err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		for _, ended := range []context.Context{cancelled, expired} {
			for _, r := range []string{"r", "new"} {
				if err := s.Fence(ended, r, 9); err != ended.Err() {
					t.Errorf("Fence(%q) with an ended context = %v; want %v as it is", r, err, ended.Err())
				}
			}
		}
		if f, err := s.CurrentFence(ctx, "r"); err != nil || f != 5 {
			t.Errorf("CurrentFence = (%d, %v); want 5", f, err)
		}
		if n := b.count(t, `SELECT count(*) FROM `+s.Table()); n != 1 {
			t.Errorf("the table has %d rows; want 1, no row made for \"new\"", n)
		}
		if err := s.Put(ctx, "r", 6, []byte("six")); err != nil {
			t.Errorf("Put(6) after the Fence(9) calls with ended contexts = %v; want it accepted", err)
		}
	})
}

// The lost update of a holder that reads before it writes, with the
// tokens of two holders of one lock, a < b: A writes [1001] with a and
// pauses past its lease; B acquires the lock, with b, and reads [1001]; A
// wakes and writes [1001,1002]; B writes [1001,1003]. When B's read is
// fenced (fencedlock.Update, or Fence then Get), A's write is refused.
// With a plain Get, A's write is accepted and then overwritten by B's:
// the subtest "plain Get" shows that lost update, which is why a holder
// that reads fences first.
func TestStaleWriteBetweenReadAndWrite(t *testing.T) {
	// Tokens as a Locker hands them out: microseconds of the Redis clock.
	const a, b = fencedlock.Token(1_733_000_000_000_001), fencedlock.Token(1_733_000_000_000_002)
	const q = "order-queue"
	add := func(v []byte, order string) []byte {
		return []byte(strings.TrimSuffix(string(v), "]") + "," + order + "]")
	}
	readsOfB := []struct {
		name   string
		fenced bool
		// readModifyWrite is B's work: it reads q, calls between (A's
		// write) and writes q with token b.
		readModifyWrite func(ctx context.Context, s *sqlstore.Store, between func()) error
	}{
		{"Update", true, func(ctx context.Context, s *sqlstore.Store, between func()) error {
			return fencedlock.Update(ctx, s, q, b, func(v []byte, found bool) ([]byte, error) {
				if !found || string(v) != "[1001]" {
					return nil, fmt.Errorf("B read (%q, found %v); want [1001]", v, found)
				}
				between()
				return add(v, "1003"), nil
			})
		}},
		{"Fence then Get", true, func(ctx context.Context, s *sqlstore.Store, between func()) error {
			if err := s.Fence(ctx, q, b); err != nil {
				return err
			}
			v, tok, err := s.Get(ctx, q)
			if err != nil || string(v) != "[1001]" || tok != a {
				return fmt.Errorf("B read (%q, %d, %v); want ([1001], %d): the token that wrote it", v, tok, err, a)
			}
			between()
			return s.Put(ctx, q, b, add(v, "1003"))
		}},
		{"plain Get", false, func(ctx context.Context, s *sqlstore.Store, between func()) error {
			v, _, err := s.Get(ctx, q)
			if err != nil || string(v) != "[1001]" {
				return fmt.Errorf("B read (%q, %v); want [1001]", v, err)
			}
			between()
			return s.Put(ctx, q, b, add(v, "1003"))
		}},
	}
	eachDialect(t, func(t *testing.T, be *backend) {
		for _, read := range readsOfB {
			read := read
			t.Run(read.name, func(t *testing.T) {
				ctx := testCtx(t)
				s := be.newStore(t)
				if err := s.Put(ctx, q, a, []byte("[1001]")); err != nil {
					t.Fatalf("A's first write = %v", err)
				}
				var aErr error
				err := read.readModifyWrite(ctx, s, func() {
					aErr = s.Put(ctx, q, a, []byte("[1001,1002]"))
				})
				if err != nil {
					t.Fatalf("B's read and write = %v; want them accepted", err)
				}
				if v, tok, err := s.Get(ctx, q); err != nil || string(v) != "[1001,1003]" || tok != b {
					t.Errorf("Get at the end = (%q, %d, %v); want ([1001,1003], %d)", v, tok, err, b)
				}
				if read.fenced {
					expectStale(t, aErr, q, a, b)
					return
				}
				if aErr != nil {
					t.Errorf("A's write after B's plain Get = %v; want it accepted, and then lost to B's write", aErr)
				}
			})
		}
	})
}
