package fencetest_test

import (
	"testing"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
