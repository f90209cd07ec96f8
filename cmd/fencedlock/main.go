// Command fencedlock runs a command under a fenced lock on Redis, and
// inspects and advances the locks of the fencedlock library.
//
// Usage:
//
//	fencedlock run [flags] RESOURCE -- CMD [ARGS...]
//	fencedlock inspect [flags] RESOURCE...
//	fencedlock advance [flags] RESOURCE TOKEN
//
// run acquires RESOURCE, keeps it with a heartbeat while CMD runs, and
// gives CMD the grant's fencing token in FENCEDLOCK_TOKEN, to pass with
// every write to a fenced store. When the lock is lost, CMD is stopped.
// inspect prints what Redis holds for resources; advance raises a
// resource's token counter after a restore from backup.
//
// The flags, the exit statuses and the environment are described in
// https://github.com/fencedlock/fencedlock/blob/main/docs/cli.md.
//
// Install it with:
//
//	go install github.com/fencedlock/fencedlock/cmd/fencedlock@latest
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
)

// Exit statuses of fencedlock's own, besides CMD's (see docs/cli.md).
const (
	exitFailure     = 1   // the lock was lost while CMD ran, or an error not listed below
	exitUsage       = 2   // bad flags or arguments
	exitUnavailable = 69  // EX_UNAVAILABLE: Redis could not be reached, or answered with an error
	exitHeld        = 75  // EX_TEMPFAIL: another owner holds the lock
	exitCannotRun   = 126 // CMD was found but could not be started
	exitNotFound    = 127 // CMD was not found
	exitSignal      = 128 // plus the signal's number: CMD, or the wait for the lock, ended by a signal
)

const usage = `Usage:
  fencedlock run [flags] RESOURCE -- CMD [ARGS...]
  fencedlock inspect [flags] RESOURCE...
  fencedlock advance [flags] RESOURCE TOKEN

run      runs CMD while holding the lock on RESOURCE, with its fencing
         token in FENCEDLOCK_TOKEN
inspect  prints what Redis holds for each RESOURCE
advance  raises RESOURCE's token counter above TOKEN

Run "fencedlock COMMAND -h" for the flags of a command.
Documentation: https://github.com/fencedlock/fencedlock/blob/main/docs/cli.md
`

func main() {
	// go-redis logs some failures itself; fencedlock reports what
	// matters in one line of its own.
	redis.SetLogger(quietLogger{})
	os.Exit(dispatch(os.Args[1:]))
}

// dispatch runs the command named by args[0] and returns the exit status.
func dispatch(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return run(args[1:])
	case "inspect":
		return inspect(args[1:])
	case "advance":
		return advance(args[1:])
	case "help", "-h", "-help", "--help":
		fmt.Fprint(os.Stdout, usage)
		return 0
	}
	return usageError("", fmt.Errorf("unknown command %q (want run, inspect or advance)", args[0]))
}

// usageError reports a bad flag or argument of command in one line, and
// returns exitUsage.
func usageError(command string, err error) int {
	name := "fencedlock"
	if command != "" {
		name += " " + command
	}
	fmt.Fprintf(os.Stderr, "%s: %v (see %s -h)\n", name, err, name)
	return exitUsage
}

// report prints err in one line on stderr, prefixed "fencedlock:" once.
func report(err error) {
	fmt.Fprintln(os.Stderr, message(err))
}

// message is err's text, prefixed "fencedlock:" unless it has the prefix.
func message(err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if strings.HasPrefix(msg, "fencedlock:") {
		return msg
	}
	return "fencedlock: " + msg
}

// exitCode is the exit status for an error of the library: the reason
// the lock was not taken, inspected or advanced.
func exitCode(err error) int {
	switch {
	case errors.Is(err, fencedlock.ErrInvalidArgument), errors.Is(err, fencedlock.ErrInvalidToken):
		return exitUsage
	case errors.Is(err, fencedlock.ErrNotAcquired):
		// Checked before ErrUnavailable: Redis's last answer said the
		// lock was held.
		return exitHeld
	case errors.Is(err, fencedlock.ErrUnavailable):
		return exitUnavailable
	}
	return exitFailure
}

// quietLogger drops go-redis's own log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
