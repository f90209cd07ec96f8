package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/sqlstore"
)

// New on SQLite, with the busy timeout and WAL mode that the package
// documentation asks for, creates the Store's table; Put and Get keep a
// value per resource, and a Put with a lower token is refused. The tokens
// would come from Lock.Token.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlstore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("table:", store.Table())

	if err := store.Put(ctx, "report", 8, []byte("by the holder of token 8")); err != nil {
		log.Fatal(err)
	}
	err = store.Put(ctx, "report", 7, []byte("by the holder of token 7"))
	fmt.Println("Put with token 7 stale:", errors.Is(err, fencedlock.ErrStaleToken))
	value, token, err := store.Get(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("Get: %q, token %d\n", value, token)
	// Output:
	// table: fencedlock_fences
	// Put with token 7 stale: true
	// Get: "by the holder of token 8", token 8
}

// Two holders of one lock, in turn, write an order's state in their own
// table through Tx; the one whose lock expired is refused, and nothing of
// its transaction is written. The tokens would come from Lock.Token.
func ExampleStore_Tx() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlstore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err != nil {
		log.Fatal(err)
	}

	setState := func(token fencedlock.Token, state string) error {
		return store.Tx(ctx, "order/42", token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, state) VALUES (42, ?)
				ON CONFLICT (id) DO UPDATE SET state = excluded.state`, state)
			return err
		})
	}
	// The first holder (token 7) pauses; its lock expires, and the next
	// holder (token 8) ships the order.
	if err := setState(8, "shipped"); err != nil {
		log.Fatal(err)
	}
	// The first holder wakes up and writes: refused.
	err = setState(7, "cancelled")
	var stale *fencedlock.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("refused: token %d, the store holds %d\n", stale.Token, stale.Current)
	}
	var state string
	if err := db.QueryRowContext(ctx, `SELECT state FROM orders WHERE id = 42`).Scan(&state); err != nil {
		log.Fatal(err)
	}
	fmt.Println("order 42:", state)
	// Output:
	// refused: token 7, the store holds 8
	// order 42: shipped
}

// A holder that reads a value to write it back fences the read:
// fencedlock.Update raises the fence to the holder's token (Store.Fence),
// reads the value, and puts what fn makes of it with the same token. A
// holder whose lock expired, writing between that read and that write,
// is refused, instead of being told its write was accepted and then
// losing it. The tokens would come from Lock.Token.
func ExampleStore_Fence() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlstore-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, sqlstore.SQLite)
	if err != nil {
		log.Fatal(err)
	}

	// The holder of token 7 queues order 1001, then pauses; its lock
	// expires, and the next holder (token 8) adds order 1003.
	if err := store.Put(ctx, "queue", 7, []byte("1001")); err != nil {
		log.Fatal(err)
	}
	err = fencedlock.Update(ctx, store, "queue", 8, func(queue []byte, found bool) ([]byte, error) {
		// The first holder wakes up between the read and the write.
		err := store.Put(ctx, "queue", 7, []byte("1001,1002"))
		fmt.Println("token 7 refused:", errors.Is(err, fencedlock.ErrStaleToken))
		return append(queue, ",1003"...), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	queue, token, err := store.Get(ctx, "queue")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("Get: %q, token %d\n", queue, token)
	// Output:
	// token 7 refused: true
	// Get: "1001,1003", token 8
}
