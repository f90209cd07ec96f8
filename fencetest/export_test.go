package fencetest

import "github.com/fencedlock/fencedlock"

// TB is the interface the suite runs on, for the package's tests: they
// run the suite on a recorder to prove that it fails on broken stores.
type TB = tb

// RunSuite runs the suite on t, as Store does on a *testing.T. A t that
// is not a *testing.T must also have the method
// Run(name string, f func(TB)) bool.
func RunSuite(t TB, newStore func(t TB) fencedlock.Store) { run(t, newStore) }
