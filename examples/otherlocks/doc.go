// Package otherlocks shows fencing tokens for locks that other libraries
// take: github.com/go-redsync/redsync/v4 and github.com/bsm/redislock.
// Locker.IssueToken checks that the lock key still holds the grant's
// value and issues the grant's token in one script.
//
// It is a module of its own, so that fencedlock does not require these
// libraries. It holds only runnable examples: run them with
//
//	cd examples/otherlocks && go test -v ./...
package otherlocks
