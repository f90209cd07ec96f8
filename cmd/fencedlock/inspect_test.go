//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
)

// inspect -json prints, a line a resource, what Locker.Inspect says: of a
// lock held with a process waiting for it, the holder's token as a
// string, its TTL, one waiter and the counter; of a free resource,
// nothing held. The table says the same.
func TestInspect(t *testing.T) {
	e := newEnv(t)
	held := e.hold("orders")
	// A waiter in another Locker, as another process would be.
	waiter := fencedlock.New(e.b.Client, fencedlock.WithPrefix(e.b.Prefix))
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() {
		lock, err := waiter.Acquire(ctx, "orders", time.Minute)
		if err == nil {
			err = lock.Release(context.Background())
		}
		waited <- err
	}()
	defer func() {
		cancel()
		<-waited
	}()
	waitUntil(t, "the waiter to queue", func() bool { return e.inspect("orders").Waiters == 1 })

	code, out, stderr := e.runStatus([]string{"inspect", "-json", "orders", "free"})
	if code != 0 || stderr != "" {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a line a resource, got %q", out)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["token"].(string); !ok {
		t.Errorf("the token is not a JSON string: %s", lines[0])
	}
	var got, free inspection
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &free); err != nil {
		t.Fatal(err)
	}
	if got.Resource != "orders" || !got.Held || got.Token != held.Token() || got.Waiters != 1 || got.Counter < held.Token() ||
		got.TTLMS <= 0 || got.TTLMS > time.Minute.Milliseconds() {
		t.Errorf("held lock with a waiter: %s; want held, token %d, a TTL up to 60000 ms, 1 waiter, the counter at or above the token", lines[0], held.Token())
	}
	if (free != inspection{Resource: "free"}) {
		t.Errorf("free resource: %s; want nothing held", lines[1])
	}

	code, out, _ = e.runStatus([]string{"inspect", "orders", "free"})
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(rows) != 3 {
		t.Fatalf("table: status %d, %q", code, out)
	}
	if f := strings.Fields(rows[0]); strings.Join(f, " ") != "RESOURCE HELD TOKEN TTL WAITERS COUNTER" {
		t.Errorf("table header %q", rows[0])
	}
	if f := strings.Fields(rows[1]); len(f) != 6 || f[0] != "orders" || f[1] != "yes" || f[2] != held.Token().String() || f[4] != "1" {
		t.Errorf("table row %q; want orders, yes, token %d, 1 waiter", rows[1], held.Token())
	}
	if f := strings.Fields(rows[2]); strings.Join(f, " ") != "free no - - 0 -" {
		t.Errorf("table row %q; want free, not held", rows[2])
	}
}
