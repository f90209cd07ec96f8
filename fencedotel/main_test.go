package fencedotel_test

import (
	"testing"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The real-Redis tests share one redis-server per test binary, stopped
// here (it is started by the first test that needs it).
func TestMain(m *testing.M) { redistest.Main(m) }
