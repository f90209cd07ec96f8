package sqlstore_test

import (
	"testing"

	"github.com/fencedlock/fencedlock/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
