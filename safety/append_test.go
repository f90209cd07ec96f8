package safety

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/observe"
)

// The append workload: a read-modify-write that the register checkers
// cannot judge. Each resource holds a list of items, "c0-1,c2-1,c0-2".
// One cycle acquires a lock and appends the client's own new item with
// fencedlock.Update: fence, read the list, add the item (fn: some work,
// up to appendWork, and sometimes a sleep until a little past the lock's
// expiry, during which another holder takes the lock and appends), write
// the list back with the same token. A write of a stale holder that
// landed between another holder's read and write would be acknowledged
// and then overwritten: a lost update, though every write on its own
// obeys the fence rule. Checker E reads the final lists: every item whose
// Update returned nil must be there, once.
//
// The work is long and the sleep ends soon after the expiry, so that a
// stale holder's write often arrives while the holder that took over is
// between its read and its write: there the Fence, not the newer write,
// must refuse it. The negative control does the same with a Get and then
// a Put, without the Fence, on a fenced store: checker E must find lost
// appends there.

// Bounds of the append workload: the work between the read and the write
// (a read-modify-write's own time: long, but well within the TTL), and
// how far past the lock's expiry a pause ends.
const (
	appendWork         = 150 * time.Millisecond
	appendOvershootMin = 10 * time.Millisecond
	appendOvershootMax = 100 * time.Millisecond
	// updateCallFor bounds each store call of an update: below
	// lateWriteHold, so that the client of a request held in the network
	// gives up before the request lands (the HTTP client's and the Redis
	// client's own timeouts are shorter still).
	updateCallFor = 600 * time.Millisecond
)

// The workloads a client runs (clientSpec.Workload).
const (
	workloadRegister = ""               // write unique values (client_test.go)
	workloadAppend   = "append"         // append items with fencedlock.Update
	workloadGetPut   = "append-get-put" // the same with Get then Put, no Fence: the negative control of checker E
)

// appendCycle is one cycle of the append workload.
func (w *worker) appendCycle(ctx context.Context) {
	res := w.spec.Resources[w.rng.Intn(len(w.spec.Resources))]
	pause := w.spec.PauseEvery > 0 && w.rng.Intn(w.spec.PauseEvery) == 0
	lock := w.acquire(ctx, res, w.spec.TTL, w.spec.Heartbeat && !pause)
	if lock == nil {
		w.sleep(ctx, time.Duration(1+w.rng.Intn(20))*time.Millisecond)
		return
	}
	// The lock expires at the latest TTL after now: Redis granted it
	// before its answer came back.
	var pauseUntil time.Time
	if pause {
		pauseUntil = time.Now().Add(w.spec.TTL + appendOvershootMin + time.Duration(w.rng.Int63n(int64(appendOvershootMax-appendOvershootMin))))
	}
	w.appendItem(ctx, res, lock.Token(), pauseUntil)
	w.release(ctx, lock, releaseFor, false)
}

// appendItem appends a new item of the client to res's list with token
// and records the update, and each store call it made, as ops. With a
// pauseUntil, fn sleeps after its work until then: past the lock's
// expiry.
func (w *worker) appendItem(ctx context.Context, res string, token fencedlock.Token, pauseUntil time.Time) {
	w.seq++
	item := fmt.Sprintf("c%d-%d", w.spec.ID, w.seq)
	// The random choices are made before the calls, so that the seed
	// replays them whatever the calls answer.
	work := time.Millisecond + time.Duration(w.rng.Int63n(int64(w.spec.WorkMax)))
	pause := !pauseUntil.IsZero()
	getPut := w.spec.Workload == workloadGetPut
	rec := &updateRecorder{w: w}
	store := fencedlock.ObserveStore(w.store, rec)
	fn := func(value []byte, found bool) ([]byte, error) {
		if !getPut {
			// Update read the list between the fence's call and its
			// return (in the same step, for the stores that can), and
			// gives fn the value without its token.
			o := op{Client: w.spec.ID, Resource: res, Kind: opGet, Call: rec.fenceCall, Return: rec.fenceReturn, Outcome: outNotFound}
			if found {
				o.Outcome, o.Value = outOK, string(value)
			}
			w.rec.add(o)
		}
		// Work, so that the faults often find the client between its
		// read and its write.
		w.sleep(ctx, work)
		if pause {
			// Past the TTL: the lock expires while this client does
			// nothing, as in a GC pause between the read and the write.
			start := now()
			w.sleep(ctx, time.Until(pauseUntil))
			w.rec.add(op{Client: w.spec.ID, Resource: res, Kind: opPause, Call: start, Return: now(), Outcome: outOK})
			rec.paused = true
		}
		next := appendToList(value, item)
		rec.value = string(next)
		return next, nil
	}
	o := op{Client: w.spec.ID, Resource: res, Kind: opUpdate, Token: token, Value: item, Call: now()}
	var err error
	if getPut {
		err = w.getThenPut(ctx, store, res, token, fn, rec)
	} else {
		err = fencedlock.Update(ctx, store, res, token, fn)
	}
	o.endPut(err)
	o.Paused = rec.paused
	if err != nil {
		o.Step = rec.failed
	}
	w.rec.add(o)
}

// getThenPut is the negative control's read-modify-write: Get, fn, then
// Put with token, without the Fence that Update makes first. The Get is
// recorded here; the Put by rec, through store.
func (w *worker) getThenPut(ctx context.Context, store fencedlock.Store, res string, token fencedlock.Token, fn func([]byte, bool) ([]byte, error), rec *updateRecorder) error {
	gctx, cancel := context.WithTimeout(ctx, updateCallFor)
	o := op{Client: w.spec.ID, Resource: res, Kind: opGet, Call: now()}
	value, tok, err := store.Get(gctx, res)
	cancel()
	o.endGet(value, tok, err)
	w.rec.add(o)
	found := err == nil
	if err != nil && !errors.Is(err, fencedlock.ErrNotFound) {
		rec.failed = opGet
		return err
	}
	value, err = fn(value, found)
	if err != nil {
		return err
	}
	return store.Put(ctx, res, token, value)
}

// updateRecorder records the store calls of one update as ops: it is the
// observe.Observer of the store the update goes through
// (fencedlock.ObserveStore), which reports the Fence (Update's fenced
// read: one call to a store that fences and reads in one step, else Fence
// then Get) and the Put, and it bounds each of them by updateCallFor. fn
// records the read, and tells it the value written. One goroutine uses it:
// the observed store calls it in turn.
type updateRecorder struct {
	w           *worker
	value       string // fn's result: what the Put writes
	paused      bool   // fn slept past the TTL
	fenceCall   int64  // the fenced read's call
	fenceReturn int64  // ... and return
	call        int64  // the current call's
	cancel      context.CancelFunc
	failed      opKind // the call that returned an error, if one did
}

// Observe implements observe.Observer.
func (r *updateRecorder) Observe(ctx context.Context, e observe.Event) context.Context {
	switch e.Kind {
	case observe.StoreFenceStart, observe.StoreWriteStart:
		r.call = now()
		ctx, r.cancel = context.WithTimeout(ctx, updateCallFor)
	case observe.StoreFenceEnd, observe.StoreWriteEnd:
		r.cancel()
		o := op{Client: r.w.spec.ID, Resource: e.Resource, Kind: opFence, Token: fencedlock.Token(e.Token), Call: r.call}
		if e.Kind == observe.StoreWriteEnd {
			o.Kind, o.Value, o.Paused = opPut, r.value, r.paused
		}
		o.endPut(e.Err)
		if o.Kind == opFence {
			r.fenceCall, r.fenceReturn = o.Call, o.Return
		}
		if e.Err != nil {
			r.failed = o.Kind
		}
		r.w.rec.add(o)
	}
	return ctx
}

// appendToList returns list with item appended.
func appendToList(list []byte, item string) []byte {
	out := append([]byte(nil), list...)
	if len(out) > 0 {
		out = append(out, ',')
	}
	return append(out, item...)
}

// parseList returns the items of a list value.
func parseList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// appendReport is checker E: the updates of the append workload against
// the lists read at the end, once nothing could land any more. Every
// update that was acknowledged (Update returned nil) must have its item
// in its resource's final list exactly once; none refused as stale may
// have it there; an update with an unknown outcome (any other error) may
// or may not, but not twice.
type appendReport struct {
	Updates      int
	Acknowledged int // Update returned nil
	Refused      int // Update returned a *StaleTokenError
	// RefusedAtFence, RefusedAtPut: where: the fence (fn was not called)
	// or the write (a newer holder fenced between the read and the write).
	RefusedAtFence, RefusedAtPut int
	// RefusedByFence counts the updates refused at the write before the
	// holder whose fence refused them had sent its own write: the newer
	// holder was between its read and its write, and only its Fence could
	// refuse this write. Without the Fence each would have been
	// acknowledged, and lost when the newer holder wrote.
	RefusedByFence int
	Unknown        int // any other error
	UnknownPresent int // ... whose item is in the final list: it landed
	// Paused counts the updates whose fn slept past the TTL between the
	// read and the write; PausedRefused, PausedAcknowledged, PausedUnknown
	// how they ended.
	Paused, PausedRefused, PausedAcknowledged, PausedUnknown int
	Items                                                    int // items in the final lists

	// The violations, each 0:
	Lost           int // acknowledged, but not in the final list
	Duplicated     int // items in a final list more than once
	RefusedPresent int // refused as stale, yet in the final list
	Foreign        int // items in a final list that no update of its resource appended
	Unread         int // resources updated whose final read failed: their updates went unchecked

	Examples examples
}

func (r appendReport) ok() bool {
	return r.Lost == 0 && r.Duplicated == 0 && r.RefusedPresent == 0 && r.Foreign == 0 && r.Unread == 0
}

func (r appendReport) String() string {
	return fmt.Sprintf("%d updates: %d acknowledged, %d refused stale (%d at the fence, %d at the write, %d of them by a fence alone), %d unknown (%d landed); "+
		"%d paused past the TTL (%d refused, %d acknowledged, %d unknown); %d items in the final lists; lost %d, duplicated %d, refused but present %d, foreign %d, unread %d",
		r.Updates, r.Acknowledged, r.Refused, r.RefusedAtFence, r.RefusedAtPut, r.RefusedByFence, r.Unknown, r.UnknownPresent,
		r.Paused, r.PausedRefused, r.PausedAcknowledged, r.PausedUnknown, r.Items, r.Lost, r.Duplicated, r.RefusedPresent, r.Foreign, r.Unread)
}

// checkAppends runs checker E over a history: its update ops and its
// final reads (Final gets).
func checkAppends(ops []op) appendReport {
	var r appendReport
	updates := map[string]op{} // by item
	var items []string         // in history order
	updated := map[string]bool{}
	lists := map[string][]string{} // the final lists, by resource
	read := map[string]bool{}
	writes := map[string][]op{} // the put ops, by resource and token
	for _, o := range ops {
		switch {
		case o.Kind == opPut:
			key := fmt.Sprintf("%s %d", o.Resource, o.Token)
			writes[key] = append(writes[key], o)
		case o.Kind == opUpdate:
			updates[o.Value] = o
			items = append(items, o.Value)
			updated[o.Resource] = true
		case o.Kind == opGet && o.Final && o.Outcome == outOK:
			lists[o.Resource] = parseList(o.Value)
			read[o.Resource] = true
		case o.Kind == opGet && o.Final && o.Outcome == outNotFound:
			read[o.Resource] = true
		}
	}
	var resources []string
	for res := range updated {
		resources = append(resources, res)
	}
	sort.Strings(resources)
	for _, res := range resources {
		if !read[res] {
			r.Unread++
			r.Examples.add("%s: the final read failed: its updates are not checked", res)
		}
	}

	count := map[string]int{}      // by item, in every list
	presentIn := map[string]bool{} // by resource and item
	listed := make([]string, 0, len(lists))
	for res := range lists {
		listed = append(listed, res)
	}
	sort.Strings(listed)
	for _, res := range listed {
		for _, it := range lists[res] {
			r.Items++
			count[it]++
			presentIn[res+"\x00"+it] = true
			if count[it] == 2 {
				r.Duplicated++
				r.Examples.add("%s: item %q is in the final list more than once", res, it)
			}
			if u, ok := updates[it]; !ok || u.Resource != res {
				r.Foreign++
				r.Examples.add("%s: item %q is in the final list, but no update of %s appended it", res, it, res)
			}
		}
	}

	for _, it := range items {
		u := updates[it]
		r.Updates++
		present := presentIn[u.Resource+"\x00"+it]
		if u.Paused {
			r.Paused++
		}
		switch u.Outcome {
		case outOK:
			r.Acknowledged++
			if u.Paused {
				r.PausedAcknowledged++
			}
			if !present && read[u.Resource] {
				r.Lost++
				r.Examples.add("%s: c%d's update with token %d appending %q was acknowledged at %s, and its item is not in the final list",
					u.Resource, u.Client, u.Token, it, wallTime(u.Return))
			}
		case outStale:
			r.Refused++
			if u.Step == opFence {
				r.RefusedAtFence++
			} else {
				r.RefusedAtPut++
				byFence := true
				for _, w := range writes[fmt.Sprintf("%s %d", u.Resource, u.Current)] {
					if w.Call < u.Return {
						byFence = false
					}
				}
				if byFence {
					r.RefusedByFence++
				}
			}
			if u.Paused {
				r.PausedRefused++
			}
			if present {
				r.RefusedPresent++
				r.Examples.add("%s: c%d's update with token %d appending %q was refused as stale (current %d), and its item is in the final list",
					u.Resource, u.Client, u.Token, it, u.Current)
			}
		default:
			r.Unknown++
			if u.Paused {
				r.PausedUnknown++
			}
			if present {
				r.UnknownPresent++
			}
		}
	}
	return r
}
