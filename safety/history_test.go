package safety

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock"
)

// An opKind names what a client did.
type opKind string

const (
	opAcquire opKind = "acquire" // TryAcquire or Acquire
	opGet     opKind = "get"     // Store.Get
	opPut     opKind = "put"     // Store.Put with the lock's token
	opFence   opKind = "fence"   // Store.Fence with the lock's token (by fencedlock.Update)
	opUpdate  opKind = "update"  // fencedlock.Update appending an item (the append workload), or its Get then Put
	opRelease opKind = "release" // Lock.Release
	opRefresh opKind = "refresh" // Lock.Refresh (the late-reply fault's cycle)
	opPause   opKind = "pause"   // the client slept past the TTL while holding the lock
)

// An outcome is how an operation ended, as its client saw it.
type outcome string

const (
	// outOK: granted, read, written, released.
	outOK outcome = "ok"
	// outFail: a definite no. Acquire: the lock is held (ErrNotAcquired);
	// release: the lock was lost.
	outFail outcome = "fail"
	// outStale: the store refused the write or fence with a
	// *StaleTokenError; the op's Current is the fence the store reported.
	outStale outcome = "stale"
	// outNotFound: the store holds no value for the resource.
	outNotFound outcome = "notfound"
	// outNotReplicated: acquire got the lock, but fewer replicas than
	// WithReplicas asked for confirmed the grant; the acquire released it.
	outNotReplicated outcome = "notreplicated"
	// outUnknown: any other error (a timeout, a broken connection, a 500).
	// The operation may have taken effect, or may still take effect later:
	// a write held up in the network can land after its client gave up.
	outUnknown outcome = "unknown"
)

// An op is one operation of one client, recorded when it returned.
//
// Call and Return are wall-clock times, time.Now().UnixNano(), not the
// monotonic clock: the child processes record their ops in their own
// process, and only the wall clock is common to all processes on the
// machine. A step of the wall clock during a run (NTP) could make
// operations look reordered; the runs are seconds or minutes long on one
// machine, where that does not happen in practice.
type op struct {
	Client   int              `json:"c"`
	Resource string           `json:"r"`
	Kind     opKind           `json:"k"`
	Call     int64            `json:"call"`
	Return   int64            `json:"ret"`
	Outcome  outcome          `json:"o"`
	Token    fencedlock.Token `json:"t,omitempty"`   // acquire: granted; put: written with; fence, update: fenced with; get: read
	Value    string           `json:"v,omitempty"`   // put: written; get: read; update: the item appended
	Current  fencedlock.Token `json:"cur,omitempty"` // put, fence, update refused as stale: the store's fence
	Wait     bool             `json:"w,omitempty"`   // acquire: the waiting Acquire, not TryAcquire
	Paused   bool             `json:"p,omitempty"`   // put, update: the client paused past the TTL before the write
	// Step is the call that ended an update without success: fence, get,
	// put, or "" (fn's own error, or success).
	Step  opKind `json:"st,omitempty"`
	Final bool   `json:"f,omitempty"`   // get: a final read, once everything has landed
	Err   string `json:"err,omitempty"` // the error, for the log
	// Acquire that returned a Lock: what a direct read of the lock key
	// found right after (checker D), and the value it read.
	KeyRead  keyRead `json:"kr,omitempty"`
	KeyValue string  `json:"kv,omitempty"`
	// Release: a goroutine of the same Locker was waiting in Acquire for
	// the resource when Release was called.
	LocalWaiter bool `json:"lw,omitempty"`
	// Release, refresh: called with a ctx shorter than the delay of its
	// reply (the late-reply fault).
	Short bool `json:"sh,omitempty"`
}

func (o op) String() string {
	s := fmt.Sprintf("c%d %s %s %s", o.Client, o.Kind, o.Resource, o.Outcome)
	if o.Token != 0 {
		s += fmt.Sprintf(" token=%d", o.Token)
	}
	if o.Value != "" {
		s += fmt.Sprintf(" value=%q", o.Value)
	}
	if o.Current != 0 {
		s += fmt.Sprintf(" current=%d", o.Current)
	}
	if o.Paused {
		s += " (after a pause)"
	}
	return s + fmt.Sprintf(" [%s..%s]", wallTime(o.Call), wallTime(o.Return))
}

// wallTime formats a UnixNano timestamp for the log.
func wallTime(ns int64) string {
	return time.Unix(0, ns).Format("15:04:05.000000")
}

// now is the timestamp of the history: wall clock (see op).
func now() int64 { return time.Now().UnixNano() }

// endGet records the answer of a Get in o, with its return time: a value
// and token, not found, or unknown.
func (o *op) endGet(value []byte, token fencedlock.Token, err error) {
	o.Return = now()
	switch {
	case err == nil:
		o.Outcome, o.Value, o.Token = outOK, string(value), token
	case errors.Is(err, fencedlock.ErrNotFound):
		o.Outcome = outNotFound
	default:
		o.Outcome, o.Err = outUnknown, err.Error()
	}
}

// endPut records the answer of a Put, a Fence or an Update in o, with its
// return time: accepted, refused as stale (with the store's fence), or
// unknown: anything else, a 500 or a timeout among them, after which the
// write may have landed, or may land later.
func (o *op) endPut(err error) {
	o.Return = now()
	var stale *fencedlock.StaleTokenError
	switch {
	case err == nil:
		o.Outcome = outOK
	case errors.As(err, &stale):
		o.Outcome, o.Current = outStale, stale.Current
	default:
		o.Outcome, o.Err = outUnknown, err.Error()
	}
}

// A recorder collects the ops of the clients of one process. It is safe
// for concurrent use.
type recorder struct {
	mu  sync.Mutex
	ops []op // guarded by mu
}

func (r *recorder) add(o op) {
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]op(nil), r.ops...)
}

// sortOps orders a history by call time, for the checkers and the logs.
func sortOps(ops []op) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
}

// writeOps writes ops to path as JSON lines: how a child process hands its
// history to the parent, and how a failing scenario leaves its history for
// a post-mortem.
func writeOps(path string, ops []op) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, o := range ops {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// readOps reads what writeOps wrote.
func readOps(path string) ([]op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ops []op
	dec := json.NewDecoder(f)
	for dec.More() {
		var o op
		if err := dec.Decode(&o); err != nil {
			return ops, fmt.Errorf("%s: op %d: %w", path, len(ops)+1, err)
		}
		ops = append(ops, o)
	}
	return ops, nil
}
