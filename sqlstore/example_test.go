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
