package sqlstore_test

import (
	"os"
	"testing"

	"github.com/fencedlock/fencedlock/internal/mysqltest"
	"github.com/fencedlock/fencedlock/internal/pgtest"
)

// TestMain stops the shared PostgreSQL and MariaDB servers after the
// tests, and says how to run the tests that were skipped for want of one.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.StopShared()
	mysqltest.StopShared()
	pgtest.Report(os.Stderr)
	mysqltest.Report(os.Stderr)
	os.Exit(code)
}
