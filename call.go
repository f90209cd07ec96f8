package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/names"
)

// bounded runs f, one round trip to Redis, and returns its result, or
// ctx's error as soon as ctx ends, whichever comes first. go-redis heeds
// a ctx deadline only when its client sets ContextTimeoutEnabled, and a
// cancelled ctx not at all while it waits for a reply: so f runs in a
// goroutine of its own, which the client's own timeouts end after the
// caller has returned. f gets ctx, so that the client stops as soon as
// it looks at ctx.
func bounded[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctxErr(ctx); err != nil {
		return zero, &notSentError{err}
	}
	if ctx.Done() == nil { // never ends: no need for a goroutine
		return f(ctx)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-ch: // the answer came with the end of ctx
			return r.v, r.err
		default:
			return zero, ctx.Err()
		}
	}
}

// notSentError is bounded's error when ctx had ended before anything was
// sent: it wraps ctx's error.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// ctxEnded returns ctx.Err(), or context.DeadlineExceeded once ctx's
// deadline has passed although its timer has not fired yet.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// ctxErr is the error of a call that ctx stopped: ctxEnded's, wrapped
// together with context.Cause(ctx) when the cause says more (ctx was
// cancelled with a cause, such as a Lock's loss); nil while ctx lasts.
func ctxErr(ctx context.Context) error {
	err := ctxEnded(ctx)
	if err == nil {
		return nil
	}
	if cause := stopCause(ctx); cause != nil {
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}

// stopCause returns context.Cause(ctx) when ctx has ended with a cause of
// its own, not just its error (context.Canceled, DeadlineExceeded); nil
// otherwise. A call that such a ctx stopped is not a backend failure: its
// error wraps the cause, not ErrUnavailable.
func stopCause(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return cause
	}
	return nil
}

// corruptTag starts the error replies of scripts that found a key holding
// a value the library did not write.
const corruptTag = "FENCEDLOCK_CORRUPT "

// redisErr turns the error of a command op on name (a resource or a lock
// key) into the library's: ErrCorrupt when a key of the library's holds
// what the library did not write (a script's own check, or a key of the
// wrong Redis type), else ErrUnavailable with the cause, and ctx's error
// too when ctx has ended (a read deadline that go-redis took from ctx
// ends a command with a network timeout). keys are the keys op touched,
// named in the error.
func redisErr(ctx context.Context, op, name string, err error, keys ...string) error {
	var acl *aclError
	if !errors.As(err, &acl) {
		if acl = aclRefusal(err, "", ""); acl != nil {
			err = acl
		}
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if _, detail, ok := strings.Cut(msg, corruptTag); ok {
			return fmt.Errorf("%w: %s %s: %s", ErrCorrupt, op, names.Quote(name), detail)
		}
		if strings.Contains(msg, "WRONGTYPE") {
			return fmt.Errorf("%w: %s %s: key %s holds a value of the wrong type: %w", ErrCorrupt, op, names.Quote(name), strings.Join(quoteAll(keys), " or "), err)
		}
	}
	var ns *notSentError
	if errors.As(err, &ns) {
		return fmt.Errorf("fencedlock: %s %s: nothing sent, the context had ended: %w", op, names.Quote(name), err)
	}
	cerr := ctxEnded(ctx)
	if cerr != nil && (errors.Is(err, cerr) || !isServerError(err)) {
		if cause := stopCause(ctx); cause != nil {
			// The ctx was ended on purpose, for a reason of its own:
			// that, not Redis, stopped the call.
			return fmt.Errorf("fencedlock: %s %s: stopped before Redis answered: %w (%w)", op, names.Quote(name), cause, cerr)
		}
	}
	switch {
	case cerr != nil && errors.Is(err, cerr):
		return fmt.Errorf("%w: %s %s: no answer from Redis before the context ended: %w", ErrUnavailable, op, names.Quote(name), err)
	case cerr != nil:
		return fmt.Errorf("%w: %s %s: %w: %w", ErrUnavailable, op, names.Quote(name), cerr, err)
	}
	return fmt.Errorf("%w: %s %s: %w", ErrUnavailable, op, names.Quote(name), err)
}

// aclError is Redis's refusal of a command, or of a key or channel a
// command names, to the client's ACL user: the rule the user was made
// with lacks what the library needs (aclDocs lists it). It is an error
// reply, not an outage, which Acquire does not wait out; redisErr
// reports it as ErrUnavailable (the backend refused), naming the command.
type aclError struct {
	command string // upper case, "CLIENT SETINFO" for a subcommand; "" when unknown
	refused string // what was refused: "command", "key" or "channel"
	err     error  // the reply
}

func (e *aclError) Error() string {
	cmd := "a command"
	if e.command != "" {
		cmd = "the command " + e.command
	}
	what := cmd + " to the client's ACL user"
	if e.refused != "command" {
		what = fmt.Sprintf("the client's ACL user a %s of %s", e.refused, cmd)
	}
	return fmt.Sprintf("Redis refused %s; the commands, keys and channels the library needs are in %s: %v", what, aclDocs, e.err)
}

func (e *aclError) Unwrap() error { return e.err }

// The parts of Redis's ACL refusals that aclRefusal reads.
var (
	// the command named: "... to run the 'time' command", "'pubsub|channels' command"
	aclCommandRe = regexp.MustCompile(`'([a-z0-9_.|-]+)' command`)
	// the line of the script that called it: "@user_script:13" (Redis 6.2
	// says "@user_script: 13" too)
	aclLineRe = regexp.MustCompile(`@user_script: ?([0-9]+)`)
	// a command called from Lua
	luaCallRe = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)
)

// aclRefusal returns err as an *aclError when it is Redis's refusal of a
// command, key or channel to the client's ACL user, else nil. src is the
// source of the script whose run failed, and sent the command that ran
// it (EVALSHA or EVAL); both are "" for other commands. Redis names the
// refused command (NOPERM replies, and Valkey's and Redis 7.2's in
// scripts too), or only the line of the script that called it (Redis
// 6.2 and 7.0): then it is the command called on that line of src. A
// refusal of keys that names no line is of the script's keys: sent's.
func aclRefusal(err error, src, sent string) *aclError {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return nil
	}
	msg := strings.ToLower(rerr.Error())
	if !strings.HasPrefix(msg, "noperm") && !strings.Contains(msg, "acl failure") &&
		!strings.Contains(msg, "the user executing the script can't") {
		return nil
	}
	e := &aclError{refused: "command", err: err}
	if m := aclCommandRe.FindStringSubmatch(msg); m != nil {
		e.command = strings.ToUpper(strings.ReplaceAll(m[1], "|", " "))
		return e
	}
	switch {
	case strings.Contains(msg, "channel"):
		e.refused = "channel"
	case strings.Contains(msg, "key"):
		e.refused = "key"
	}
	if m := aclLineRe.FindStringSubmatch(msg); m != nil {
		e.command = scriptCommand(src, m[1])
	} else if e.refused == "key" {
		e.command = strings.ToUpper(sent)
	}
	return e
}

// scriptCommand returns the command that line n (counted from 1, in
// decimal) of the script src calls, upper case; "" when the line calls
// none, or more than one.
func scriptCommand(src, n string) string {
	i, err := strconv.Atoi(n)
	if err != nil || i < 1 {
		return ""
	}
	lines := strings.Split(src, "\n")
	if i > len(lines) {
		return ""
	}
	cmd := ""
	for _, m := range luaCallRe.FindAllStringSubmatch(lines[i-1], -1) {
		c := strings.ToUpper(m[1])
		if cmd != "" && c != cmd {
			return ""
		}
		cmd = c
	}
	return cmd
}

func quoteAll(keys []string) []string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = names.Quote(k)
	}
	return q
}

// isServerError reports whether err is a reply from Redis (the command ran
// and failed) rather than a failure to deliver the command or its reply.
func isServerError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// unsent reports whether err proves that the command never reached Redis:
// ctx had ended before it was sent, or no connection could be made or
// had. (go-redis may have sent an earlier copy before a retry that failed
// so; Redis then ran it with nobody told, as with any reply lost, and its
// TTL bounds the harm.)
func unsent(err error) bool {
	var ns *notSentError
	if errors.As(err, &ns) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolExhausted)
}

// Bounds of the background cleanups of one Locker.
const (
	// cleanupTimeout bounds one cleanup: work that must happen after the
	// call that needs it returned, such as releasing a lock whose grant
	// reply was lost.
	cleanupTimeout = time.Second
	// cleanupGrace is how long a call whose ctx has ended still waits for
	// its cleanup to answer, so that on a Redis that answers, the caller
	// learns how it went.
	cleanupGrace = 5 * time.Millisecond
	// maxCleanups is how many cleanups may run at once; beyond it, one is
	// not started and the call's error says so.
	maxCleanups = 64
)

// errCleanupPending is cleanUp's report that the cleanup goes on after
// the call.
var errCleanupPending = errors.New("it goes on in the background")

// cleanUp runs fn, cleaning up after the call of ctx on resource, within
// budget of its own (cleanupTimeout for most), even when ctx has ended. It waits for fn
// while ctx lasts (and cleanupGrace after) and returns fn's error, nil
// when it succeeded, or an error wrapping errCleanupPending when ctx ended
// first: fn goes on, and its failure is logged (see WithLogger). When
// maxCleanups are running it does not start fn, and says so.
func (l *Locker) cleanUp(ctx context.Context, resource, what string, budget time.Duration, fn func(context.Context) error) error {
	select {
	case l.cleanups <- struct{}{}:
	default:
		l.warn("fencedlock: cleanup not started: too many running", resource, "cleanup", what, "running", maxCleanups)
		return fmt.Errorf("%d cleanups are already running, so it was not started", maxCleanups)
	}
	var (
		mu      sync.Mutex
		waiting = true // guarded by mu: the caller takes the result
		result  = make(chan error, 1)
	)
	go func() {
		defer func() { <-l.cleanups }()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
		defer cancel()
		err := fn(cctx)
		mu.Lock()
		defer mu.Unlock()
		if waiting {
			result <- err
		} else if err != nil {
			l.warn("fencedlock: background cleanup failed", resource, "cleanup", what, "err", err)
		}
	}()
	var grace <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case err := <-result:
			return err
		case <-done:
			t := time.NewTimer(cleanupGrace)
			defer t.Stop()
			grace, done = t.C, nil
		case <-grace:
			mu.Lock()
			defer mu.Unlock()
			select {
			case err := <-result:
				return err
			default:
				waiting = false
				return errCleanupPending
			}
		}
	}
}

// cleanupErr adds to err, the error of a call, the outcome of its cleanup
// what (cerr from cleanUp), and the harm left if it failed.
func cleanupErr(err error, what, harm string, cerr error) error {
	switch {
	case cerr == nil:
		return err
	case errors.Is(cerr, errCleanupPending):
		return fmt.Errorf("%w (%s: %v; if it fails, %s)", err, what, cerr, harm)
	}
	return fmt.Errorf("%w (%s failed too, so %s: %v)", err, what, harm, cerr)
}

// WithLogger makes the Locker log to logger. nil, the default, logs
// nothing.
//
// At Warn: a lock lost (with why), a heartbeat refresh that failed and
// will be tried again, a cleanup that failed after its call returned or
// was not started (cleanups are described in
// https://github.com/fencedlock/fencedlock/blob/main/docs/waiting.md). At Debug: grants,
// failed acquires, waits, releases and hand-overs. Attributes use these
// keys: resource, token (decimal), ttl, wait, err; a cleanup's record
// also names it (cleanup). Nothing written to a store is logged.
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) { l.logger = logger }
}

// debug logs msg at Debug with attrs, if the Locker has a logger.
func (l *Locker) debug(msg string, attrs ...any) {
	if l.logger != nil {
		l.logger.Debug(msg, attrs...)
	}
}

// warn logs msg at Warn with the resource and attrs, if the Locker has a
// logger.
func (l *Locker) warn(msg, resource string, attrs ...any) {
	if l.logger == nil {
		return
	}
	l.logger.Warn(msg, append([]any{"resource", resource}, attrs...)...)
}
