package sqlstore_test

import (
	"testing"

	"github.com/fencedlock/fencedlock/fencetest"
)

// The fuzz targets run fencetest.FuzzStore on one Store each, on a fresh
// table: the backends of helpers_test.go take a testing.TB, which a
// *testing.F is.

func FuzzStoreSQLite(f *testing.F) {
	fencetest.FuzzStore(f, sqliteBackend(f).newStore(f))
}

// FuzzStorePostgres needs PostgreSQL's initdb and postgres; without them,
// it skips (fails with CI=true).
func FuzzStorePostgres(f *testing.F) {
	fencetest.FuzzStore(f, postgresBackend(f).newStore(f))
}

// FuzzStoreMySQL needs MariaDB's mariadbd and mariadb-install-db;
// without them, it skips (fails with CI=true).
func FuzzStoreMySQL(f *testing.F) {
	fencetest.FuzzStore(f, mysqlBackend(f).newStore(f))
}
