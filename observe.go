package fencedlock

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/observe"
)

// WithObserver makes the Locker report its events to o (see package
// observe, and the fencedotel module for OpenTelemetry). nil, the
// default, reports nothing, and costs nothing.
func WithObserver(o observe.Observer) Option {
	return func(l *Locker) { l.observer = o }
}

// acquireOutcome classifies the result of TryAcquire or Acquire, called
// with ctx: an error that ctx's end caused is a timeout or a cancel,
// unless Redis was unavailable.
func acquireOutcome(ctx context.Context, err error) observe.Outcome {
	switch {
	case err == nil:
		return observe.Acquired
	case errors.Is(err, ErrUnavailable):
		return observe.Unavailable
	}
	if ended := call.Ended(ctx); ended != nil && errors.Is(err, ended) {
		if errors.Is(ended, context.DeadlineExceeded) {
			return observe.Timeout
		}
		return observe.Canceled
	}
	if errors.Is(err, ErrNotAcquired) {
		return observe.NotAcquired
	}
	return observe.Failed
}

// writeOutcome classifies the result of a store write.
func writeOutcome(err error) observe.Outcome {
	switch {
	case err == nil:
		return observe.Accepted
	case errors.Is(err, ErrStaleToken):
		return observe.Stale
	}
	return observe.Failed
}

// watched reports whether the Locker reports events to anyone: when it
// does not, no event is made.
func (l *Locker) watched() bool { return l.observer != nil || l.logger != nil }

// emit logs e (see WithLogger) and reports it to the observer; it returns
// the ctx the observer returned.
func (l *Locker) emit(ctx context.Context, e observe.Event) context.Context {
	if l.logger != nil {
		l.log(ctx, e)
	}
	if l.observer == nil {
		return ctx
	}
	if octx := l.observer.Observe(ctx, e); octx != nil {
		return octx
	}
	return ctx
}

// log writes the log record of e, if any: losses and failed refreshes at
// Warn, grants, releases and hand-overs at Debug.
func (l *Locker) log(ctx context.Context, e observe.Event) {
	level, msg := slog.LevelDebug, ""
	switch e.Kind {
	case observe.AcquireEnd:
		msg = "fencedlock: lock granted"
		if e.Outcome != observe.Acquired {
			msg = "fencedlock: lock not acquired"
		}
	case observe.LockEnd:
		msg = "fencedlock: lock released"
		if e.Outcome == observe.Lost {
			level, msg = slog.LevelWarn, "fencedlock: lock lost"
		}
	case observe.RefreshFailed:
		level, msg = slog.LevelWarn, "fencedlock: heartbeat refresh failed"
	case observe.HandOver:
		msg = "fencedlock: lock handed over"
	default:
		return
	}
	if !l.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	attrs = append(attrs, slog.String("resource", e.Resource))
	if e.Token != 0 {
		attrs = append(attrs, slog.String("token", strconv.FormatUint(e.Token, 10)))
	}
	if e.TTL != 0 {
		attrs = append(attrs, slog.Duration("ttl", e.TTL))
	}
	if e.Kind == observe.AcquireEnd {
		attrs = append(attrs, slog.Duration("wait", e.Duration))
	}
	if e.Err != nil && !errors.Is(e.Err, ErrReleased) {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	l.logger.LogAttrs(ctx, level, msg, attrs...)
}

// logWaiting logs, at Debug, that an Acquire on resource waits: its
// first attempt was refused.
func (l *Locker) logWaiting(ctx context.Context, resource string, ttl time.Duration) {
	if l.logger == nil || !l.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	l.logger.LogAttrs(ctx, slog.LevelDebug, "fencedlock: waiting for lock",
		slog.String("resource", resource), slog.Duration("ttl", ttl))
}

// acquireEnd reports the end of TryAcquire or Acquire (the call c),
// called at start. From then on the end of the Lock is reported too, with
// the ctx the observer returned; if it ended already (its heartbeat found
// it lost), that is reported at once.
func (l *Locker) acquireEnd(ctx context.Context, start time.Time, c observe.Call, resource string, ttl time.Duration, lock *Lock, err error) {
	e := observe.Event{Kind: observe.AcquireEnd, Call: c, Resource: resource, TTL: ttl, Outcome: acquireOutcome(ctx, err), Duration: time.Since(start), Err: err}
	if lock == nil {
		l.emit(ctx, e)
		return
	}
	e.Token = uint64(lock.token)
	lctx := l.emit(ctx, e)
	if lctx.Done() != nil {
		lctx = context.WithoutCancel(lctx) // the Lock outlives the acquire's ctx
	}
	if ended := lock.announce(lctx); ended != nil {
		lock.reportEnd(ended)
	}
}

// reportEnd reports the end of k, an announced Lock, for the reason err.
func (k *Lock) reportEnd(err error) {
	outcome := observe.Lost
	if errors.Is(err, ErrReleased) {
		outcome = observe.Released
	}
	k.locker.emit(k.eventCtx(), observe.Event{Kind: observe.LockEnd, Call: k.call, Resource: k.resource, Token: uint64(k.token), Outcome: outcome, Duration: time.Since(k.grantedAt()), Err: err})
}

// ObserveStore returns a Store that passes every call to s and reports
// each Put to o (observe.StoreWriteStart, then observe.StoreWriteEnd with its
// outcome) and each Fence, Update's fenced read included
// (observe.StoreFenceStart, then observe.StoreFenceEnd). Values, tokens and
// errors pass through unchanged; o never sees a value. With a nil o it
// returns s.
//
// The Store returned has only the methods of the Store interface: call
// other methods of s on s itself.
func ObserveStore(s Store, o observe.Observer) Store {
	if o == nil || s == nil {
		return s
	}
	return &observedStore{s: s, o: o}
}

type observedStore struct {
	s Store
	o observe.Observer
}

// start reports the start of an operation and returns the ctx it goes on
// with.
func (s *observedStore) start(ctx context.Context, e observe.Event) context.Context {
	if octx := s.o.Observe(ctx, e); octx != nil {
		return octx
	}
	return ctx
}

func (s *observedStore) Put(ctx context.Context, resource string, token Token, value []byte) error {
	ctx = s.start(ctx, observe.Event{Kind: observe.StoreWriteStart, Resource: resource, Token: uint64(token)})
	start := time.Now()
	err := errStorePanicked // unless Put returns
	defer func() {
		// Deferred, so that a Put that panics ends its span too.
		s.o.Observe(ctx, observe.Event{Kind: observe.StoreWriteEnd, Resource: resource, Token: uint64(token), Outcome: writeOutcome(err), Duration: time.Since(start), Err: err})
	}()
	err = s.s.Put(ctx, resource, token, value)
	return err
}

// errStorePanicked is the error an observed store reports for a call of
// the store it wraps that panicked (the panic goes on).
var errStorePanicked = errors.New("fencedlock: the store panicked")

func (s *observedStore) Get(ctx context.Context, resource string) ([]byte, Token, error) {
	return s.s.Get(ctx, resource)
}

func (s *observedStore) Fence(ctx context.Context, resource string, token Token) error {
	_, _, err := s.fence(ctx, resource, token, false)
	return err
}

// fence reports a Fence, or the fenced read of Update, as one fence.
func (s *observedStore) fence(ctx context.Context, resource string, token Token, read bool) (value []byte, found bool, err error) {
	ctx = s.start(ctx, observe.Event{Kind: observe.StoreFenceStart, Resource: resource, Token: uint64(token)})
	start := time.Now()
	err = errStorePanicked // unless the store returns
	defer func() {
		// Deferred, so that a store that panics ends the span too.
		s.o.Observe(ctx, observe.Event{Kind: observe.StoreFenceEnd, Resource: resource, Token: uint64(token), Outcome: writeOutcome(err), Duration: time.Since(start), Err: err})
	}()
	if read {
		value, found, err = fencedRead(ctx, s.s, resource, token)
	} else {
		err = s.s.Fence(ctx, resource, token)
	}
	return value, found, err
}
