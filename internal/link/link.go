// Package link gives the other packages of this module what a
// fencedlock.Locker keeps to itself: its Redis client and the names of
// its keys. Package fencedlock sets Locker when it is initialized.
package link

import "github.com/redis/go-redis/v9"

// Internals are a Locker's client, and a function that names the key of
// a kind for a resource, in the resource's hash slot, with the Locker's
// prefix; Check returns why a resource name cannot be used, or nil.
type Internals struct {
	Client redis.UniversalClient
	Key    func(resource, kind string) string
	Check  func(resource string) error
}

// Locker returns the internals of l, a *fencedlock.Locker; set by package
// fencedlock.
var Locker func(l any) Internals
