// Package call bounds round trips to Redis by their context, tells what
// a failed round trip means, and runs the cleanups that must outlive a
// call. The root package and package election share it.
package call

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounded runs f, one round trip to Redis, and returns its result, or
// ctx's error as soon as ctx ends, whichever comes first. When ctx had
// ended before, f is not run and the error is a *NotSentError.
//
// heeds says that the client ends a round trip at ctx's deadline by
// itself (see Heeds). Then, when ctx has a deadline, f runs on the
// caller's goroutine: the client sets its connection's deadlines from
// ctx's, so f returns by then, and its timeout is reported as ctx's
// error. A cancel before the deadline is then noticed when the round trip
// ends, which the deadline bounds. Otherwise (a client that heeds no ctx,
// or a ctx that can be cancelled but has no deadline) f runs in a
// goroutine of its own, which the client's own timeouts end after the
// caller has returned. f gets ctx, so that the client stops as soon as it
// looks at ctx.
func Bounded[T any](ctx context.Context, heeds bool, f func(context.Context) (T, error)) (T, error) {
	// Not BoundedOn with an adapter: a function value made inside a
	// generic function carries its type dictionary, and would be
	// allocated on every call, on the caller's goroutine too.
	var zero T
	if err := Err(ctx); err != nil {
		return zero, &NotSentError{err}
	}
	if deadline, here := onCaller(ctx, heeds); here {
		v, err := f(ctx)
		if err = timedOut(ctx, deadline, err); err != nil {
			return zero, err
		}
		return v, nil
	}
	return apart(ctx, f, func(ctx context.Context, f func(context.Context) (T, error)) (T, error) { return f(ctx) })
}

// BoundedOn is Bounded for f(ctx, a). f should be a function, not a
// closure, and a a value: then a round trip that runs on the caller's
// goroutine (ctx that never ends, or a client that heeds its deadline)
// allocates nothing for the call, which is what the uncontended acquire
// and release use it for.
func BoundedOn[A, T any](ctx context.Context, heeds bool, a A, f func(context.Context, A) (T, error)) (T, error) {
	var zero T
	if err := Err(ctx); err != nil {
		return zero, &NotSentError{err}
	}
	if deadline, here := onCaller(ctx, heeds); here {
		v, err := f(ctx, a)
		if err = timedOut(ctx, deadline, err); err != nil {
			return zero, err
		}
		return v, nil
	}
	return apart(ctx, a, f)
}

// onCaller reports whether a round trip under ctx runs on the caller's
// goroutine: ctx never ends, or the client heeds its deadline. deadline
// is ctx's, if it has one.
func onCaller(ctx context.Context, heeds bool) (deadline time.Time, here bool) {
	// The deadline first: Done makes the channel of a ctx that has one,
	// which nothing here needs.
	if deadline, ok := ctx.Deadline(); ok {
		return deadline, heeds
	}
	return time.Time{}, ctx.Done() == nil
}

// timedOut returns err, the error of a round trip run on the caller's
// goroutine, or ctx's error when it is the connection's timeout at ctx's
// deadline.
func timedOut(ctx context.Context, deadline time.Time, err error) error {
	if err == nil || deadline.IsZero() || IsReply(err) || time.Now().Before(deadline) {
		return err
	}
	// The connection's deadline is ctx's: its timeout may come a moment
	// before ctx's own timer has fired. (A ctx with a deadline and no Done
	// channel breaks the context contract: its error stands.)
	done := ctx.Done()
	if done == nil {
		return err
	}
	<-done
	return ctx.Err()
}

// apart runs f(ctx, a) in a goroutine of its own, and returns its result,
// or ctx's error as soon as ctx ends. Once warm it allocates nothing: the
// round trip, its result and the channel that tells of it live in a job
// taken from a pool, and the goroutine starts from a plain function that
// takes the job from a channel.
func apart[A, T any](ctx context.Context, a A, f func(context.Context, A) (T, error)) (T, error) {
	j := jobPool[A, T]().Get().(*job[A, T])
	j.ctx, j.a, j.f = ctx, a, f
	started <- j
	go runStarted()
	select {
	case <-j.done:
	case <-ctx.Done():
		if j.state.CompareAndSwap(jobRunning, jobLeft) {
			// the goroutine puts the job back when f returns
			var zero T
			return zero, ctx.Err()
		}
		<-j.done // the answer came with the end of ctx
	}
	v, err := j.v, j.err
	j.free()
	return v, err
}

// A job is a round trip that apart runs in a goroutine of its own.
type job[A, T any] struct {
	ctx context.Context
	a   A
	f   func(context.Context, A) (T, error)
	v   T     // f's result, set before done is sent on
	err error // f's error, the same
	// jobRunning until one of f's return (jobDone) and the caller's
	// leave at the end of ctx (jobLeft) comes first
	state atomic.Int32
	done  chan struct{} // one value once f has returned to a caller still waiting
	pool  *sync.Pool    // the pool the job came from, and goes back to
}

const (
	jobRunning int32 = iota
	jobDone
	jobLeft
)

// started passes jobs to the goroutines that run them (runStarted): a
// goroutine started from a function that takes no arguments allocates
// nothing for its closure. Each caller sends its job, then starts one
// goroutine, and any of them runs any job: a goroutine finds a job
// waiting when it starts (it does not park, to be woken by the send), and
// a send waits only when 64 jobs wait, until one of their goroutines is
// scheduled.
var started = make(chan interface{ run() }, 64)

func runStarted() { (<-started).run() }

func (j *job[A, T]) run() {
	j.v, j.err = j.f(j.ctx, j.a)
	if j.state.CompareAndSwap(jobRunning, jobDone) {
		j.done <- struct{}{}
		return
	}
	j.free() // the caller has left: nobody wants the result
}

// free drops what the job refers to and puts it back in its pool.
func (j *job[A, T]) free() {
	var zero job[A, T]
	j.ctx, j.a, j.f, j.v, j.err = nil, zero.a, nil, zero.v, nil
	j.state.Store(jobRunning) // before Put: its next user may take it at once
	j.pool.Put(j)
}

// jobPools holds a pool of jobs for each instantiation of job, by its
// jobKey.
var jobPools sync.Map

type jobKey[A, T any] struct{}

func jobPool[A, T any]() *sync.Pool {
	if p, ok := jobPools.Load(jobKey[A, T]{}); ok {
		return p.(*sync.Pool)
	}
	p := new(sync.Pool)
	p.New = func() any { return &job[A, T]{done: make(chan struct{}, 1), pool: p} }
	found, _ := jobPools.LoadOrStore(jobKey[A, T]{}, p)
	return found.(*sync.Pool)
}

// Heeds reports whether client ends every round trip at its ctx's
// deadline by itself: a *redis.Client (a Sentinel failover client is
// one), *redis.ClusterClient or *redis.Ring made with
// ContextTimeoutEnabled, and with read and write timeouts that are not
// negative. go-redis then bounds each read and write by the earlier of
// its own timeout and ctx's deadline, and its waits for a connection and
// between retries by ctx. A negative timeout (-2 in the options) tells
// go-redis to set no deadline on its connections at all, ctx's neither.
// For any other client, Heeds says false.
func Heeds(client any) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c != nil && heeding(c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout, c.Options().WriteTimeout)
	case *redis.ClusterClient:
		return c != nil && heeding(c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout, c.Options().WriteTimeout)
	case *redis.Ring:
		return c != nil && heeding(c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout, c.Options().WriteTimeout)
	}
	return false
}

// heeding is Heeds for a client's options, as go-redis keeps them once
// the client is made: a timeout of -1 given in the options is 0 there (no
// timeout of its own, ctx's deadline still set), and -2 a negative one
// (no deadline set at all; a Cluster or Ring client keeps -2 for its
// nodes, which make it -1).
func heeding(enabled bool, read, write time.Duration) bool {
	return enabled && read >= 0 && write >= 0
}

// NotSentError is Bounded's error when ctx had ended before anything was
// sent: it wraps ctx's error (and its cause, see Err).
type NotSentError struct{ err error }

func (e *NotSentError) Error() string { return e.err.Error() }
func (e *NotSentError) Unwrap() error { return e.err }

// Ended returns ctx.Err(), or context.DeadlineExceeded once ctx's
// deadline has passed although its timer has not fired yet; nil while
// ctx lasts.
func Ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// Err is the error of a call that ctx stopped: Ended's, wrapped together
// with context.Cause(ctx) when the cause says more (ctx was cancelled
// with a cause of its own, such as a Lock's loss); nil while ctx lasts.
func Err(ctx context.Context) error {
	err := Ended(ctx)
	if err == nil {
		return nil
	}
	if cause := Cause(ctx); cause != nil {
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}

// Cause returns context.Cause(ctx) when ctx has ended with a cause of its
// own, not just its error (context.Canceled, DeadlineExceeded); nil
// otherwise. A call that such a ctx stopped is not a backend failure: its
// error wraps the cause, not ErrUnavailable.
func Cause(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return cause
	}
	return nil
}

// IsReply reports whether err is a reply from Redis (the command ran and
// failed) rather than a failure to deliver the command or its reply.
func IsReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// Resends reports whether client may send a command again after its
// connection failed (go-redis's retries, on by default): then the error
// of a round trip is that of its last copy, and an earlier copy may have
// run in Redis with its reply lost. A *redis.Client (a Sentinel failover
// client is one) or *redis.Ring made with MaxRetries -1, or a
// *redis.ClusterClient made with MaxRedirects -1 and MaxRetries 0 or -1
// (go-redis gives a Cluster's nodes no retries unless MaxRetries asks for
// some), sends each command once; any other client is taken to resend.
func Resends(client any) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c == nil || c.Options().MaxRetries > 0
	case *redis.Ring:
		return c == nil || c.Options().MaxRetries > 0
	case *redis.ClusterClient:
		return c == nil || c.Options().MaxRedirects > 0 || c.Options().MaxRetries > 0
	}
	return true
}

// Unsent reports whether err proves that the command never reached
// Redis: ctx had ended before it was sent, or, for a client that sends
// each command once (resends false, see Resends), no connection could be
// made or had. For a client that resends, a failure to connect may come
// after an earlier copy was sent, and Redis ran it: it proves nothing.
func Unsent(err error, resends bool) bool {
	var ns *NotSentError
	if errors.As(err, &ns) {
		return true
	}
	if resends {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolExhausted)
}

// Unanswered reports whether err, a round trip's error, says that the
// command may have reached Redis and run there with its reply lost (or
// still on its way): not an error reply, and not a command that was
// never sent (see Unsent for resends).
func Unanswered(err error, resends bool) bool { return !IsReply(err) && !Unsent(err, resends) }

// scriptError returns the error reply msg without Redis's "ERR", and, for
// a command that failed inside a script, the command's own error: Redis
// before 7 wraps it ("ERR Error running script (call to f_...):
// @user_script:12: -READONLY You can't write..."), Redis 7 keeps its
// code.
func scriptError(msg string) string {
	msg = strings.TrimPrefix(msg, "ERR ")
	if i := strings.LastIndex(msg, "@user_script:"); i >= 0 {
		rest := msg[i+len("@user_script:"):]
		// " 12: -READONLY ..." or "12: -READONLY ..."
		if j := strings.IndexByte(rest, ':'); j >= 0 {
			rest = strings.TrimLeft(rest[j+1:], " ")
			if strings.HasPrefix(rest, "-") {
				return rest[1:]
			}
		}
	}
	return msg
}

// transientReplies are the error replies of Redis that mean "not now": a
// restart (LOADING), a failover (READONLY, MASTERDOWN, NOREPLICAS), a
// Cluster reshard or outage (CLUSTERDOWN, TRYAGAIN, MOVED, ASK), a busy
// script (BUSY).
var transientReplies = [...]string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "MOVED", "ASK", "NOREPLICAS"}

// Redirected reports whether err holds a Redis Cluster redirect (MOVED or
// ASK): the key's slot is served by another node. A *redis.ClusterClient
// follows redirects itself, and returns one only when a reshard outran
// its redirect limit, which may pass; a client that follows none (a
// plain *redis.Client at one node of a Cluster) gets one for every key
// of that slot, for good.
func Redirected(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := scriptError(rerr.Error())
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

// ReadsReplicas reports whether client may send a read-only command
// (such as HMGET, unlike a script) to a replica: a *redis.ClusterClient
// made with ReadOnly, RouteByLatency or RouteRandomly (a failover
// ClusterClient too). A replica may not have the primary's latest
// writes. A nil client reads none.
func ReadsReplicas(client redis.UniversalClient) bool {
	cc, ok := client.(*redis.ClusterClient)
	if !ok || cc == nil {
		return false
	}
	o := cc.Options()
	return o.ReadOnly || o.RouteByLatency || o.RouteRandomly
}

// FollowsRedirects reports whether client follows Redis Cluster
// redirects (see Redirected): a *redis.ClusterClient does.
func FollowsRedirects(client redis.UniversalClient) bool {
	_, ok := client.(*redis.ClusterClient)
	return ok
}

// NotNow reports whether err, the error of a round trip, says that Redis
// cannot answer now but may soon: a connection refused, reset or broken,
// a reply that did not come in time, a full connection pool, or one of
// transientReplies. A client closed for good is not: it never answers
// again. A ctx's end reads as a reply that did not come in time: callers
// look at their ctx first.
func NotNow(err error) bool {
	if err == nil || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := scriptError(rerr.Error())
		for _, prefix := range transientReplies {
			if strings.HasPrefix(msg, prefix) && (len(msg) == len(prefix) || msg[len(prefix)] == ' ') {
				return true
			}
		}
		return false
	}
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}
