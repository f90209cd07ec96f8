package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/fencedlock/fencedlock"
)

// The benchmarks run on a SQLite file (WAL, synchronous off), on the
// tests' PostgreSQL server (fsync off) and on their MariaDB server (the
// redo log not flushed at commit): they measure the Store's statements
// and round trips, not a disk.

// BenchmarkPut measures a fenced write of a 128-byte value: one upsert
// (in MySQL a transaction of the upsert and a locking read).
func BenchmarkPut(b *testing.B) {
	eachDialectB(b, func(b *testing.B, be *backend) {
		s := be.newStore(b)
		ctx := context.Background()
		value := make([]byte, 128)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := s.Put(ctx, "bench", fencedlock.Token(i+1), value); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTx measures a fenced transaction whose fn does one INSERT:
// BEGIN, the fence's upsert (in MySQL and a locking read), fn's statement,
// COMMIT.
func BenchmarkTx(b *testing.B) {
	eachDialectB(b, func(b *testing.B, be *backend) {
		s := be.newStore(b)
		ctx := context.Background()
		table := be.name(b, "bench_ledger")
		if _, err := be.db.ExecContext(ctx, `CREATE TABLE `+table+` (n BIGINT NOT NULL)`); err != nil {
			b.Fatal(err)
		}
		insert := be.sql(`INSERT INTO ` + table + ` (n) VALUES ($1)`)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			err := s.Tx(ctx, "bench", fencedlock.Token(i+1), func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, insert, int64(i))
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkUpdate measures a fenced read-modify-write of a 128-byte value
// with fencedlock.Update: Fence, Get and Put, each a round trip of its
// own (in MySQL, Fence and Put each a transaction of two statements).
func BenchmarkUpdate(b *testing.B) {
	eachDialectB(b, func(b *testing.B, be *backend) {
		s := be.newStore(b)
		ctx := context.Background()
		value := make([]byte, 128)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			err := fencedlock.Update(ctx, s, "bench", fencedlock.Token(i+1), func([]byte, bool) ([]byte, error) {
				return value, nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// eachDialectB runs fn as the sub-benchmarks "sqlite", "postgres" and
// "mysql".
func eachDialectB(b *testing.B, fn func(b *testing.B, be *backend)) {
	b.Run("sqlite", func(b *testing.B) { fn(b, sqliteBackend(b)) })
	b.Run("postgres", func(b *testing.B) { fn(b, postgresBackend(b)) })
	b.Run("mysql", func(b *testing.B) { fn(b, mysqlBackend(b)) })
}
