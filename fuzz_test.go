package fencedlock_test

// The fuzz targets of the library's stores: fencetest.FuzzStore's random
// sequences of Puts and Gets, checked against the fencing rule. The
// token fuzzers are in token_test.go.

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencetest"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

func FuzzMemoryStore(f *testing.F) {
	fencetest.FuzzStore(f, fencedlock.NewMemoryStore())
}

func FuzzRedisStoreMiniredis(f *testing.F) {
	b := redistest.Mini(f)
	fencetest.FuzzStore(f, fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix)))
}

// FuzzRedisStoreReal needs redis-server on PATH; without it, it skips
// (fails with CI=true).
func FuzzRedisStoreReal(f *testing.F) {
	b := redistest.Real(f)
	fencetest.FuzzStore(f, fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix)))
}
