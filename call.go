package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/names"
	"github.com/fencedlock/fencedlock/internal/script"
)

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
	if acl := script.Refusal(err, "", ""); acl != nil {
		err = acl
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
	var ns *call.NotSentError
	if errors.As(err, &ns) {
		return fmt.Errorf("fencedlock: %s %s: nothing sent, the context had ended: %w", op, names.Quote(name), err)
	}
	cerr := call.Ended(ctx)
	if cerr != nil && (errors.Is(err, cerr) || !call.IsReply(err)) {
		if cause := call.Cause(ctx); cause != nil {
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

func quoteAll(keys []string) []string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = names.Quote(k)
	}
	return q
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

// warn logs msg at Warn with the resource and attrs, if the Locker has a
// logger.
func (l *Locker) warn(msg, resource string, attrs ...any) {
	if l.logger == nil {
		return
	}
	l.logger.Warn(msg, append([]any{"resource", resource}, attrs...)...)
}
