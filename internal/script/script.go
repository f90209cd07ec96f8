// Package script runs the module's Lua scripts: EVALSHA, then EVAL when
// the server's script cache does not hold the script, with the keys and
// arguments boxed by the caller, and an ACL refusal named by the command
// Redis refused. The root package and package election share it.
package script

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ACLDocs is where the commands, keys and channels the library needs are
// listed.
const ACLDocs = "https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md#acl"

// Script is one Lua script, with its source and SHA1 boxed once: they
// cost no allocation as command arguments. It is safe for concurrent
// use.
type Script struct {
	src, sha any // strings
}

// New returns the Script of src.
func New(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Source returns the script's Lua source.
func (s *Script) Source() string { return s.src.(string) }

// Processor is a Redis client, connection or pipeline.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Run runs the script with keys and then args, as go-redis's Script.Run
// does (EVALSHA, then EVAL if the server answers NOSCRIPT), but with keys
// that the caller boxed (see Keys): a Lock boxes its keys once for all
// its calls. An ACL refusal's error is an *ACLError that names the
// refused command, which Redis may tell only by the line of the script
// that called it.
func (s *Script) Run(ctx context.Context, c Processor, keys []any, args ...any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", s.sha, len(keys))
	cmdArgs = append(cmdArgs, keys...)
	cmdArgs = append(cmdArgs, args...)
	cmd := send(ctx, c, cmdArgs)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmdArgs[0], cmdArgs[1] = "eval", s.src
		cmd = send(ctx, c, cmdArgs)
	}
	if err := cmd.Err(); err != nil {
		if acl := Refusal(err, s.Source(), cmdArgs[0].(string)); acl != nil {
			cmd.SetErr(acl)
		}
	}
	return cmd
}

// EvalSHA returns the arguments of an EVALSHA of the script with keys and
// args, for a pipeline; a NOSCRIPT reply to it calls for Eval's.
func (s *Script) EvalSHA(keys []any, args ...any) []any { return s.args("evalsha", s.sha, keys, args) }

// Eval returns the arguments of an EVAL of the script with keys and args.
func (s *Script) Eval(keys []any, args ...any) []any { return s.args("eval", s.src, keys, args) }

func (s *Script) args(cmd string, script any, keys, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, cmd, script, len(keys))
	a = append(a, keys...)
	return append(a, args...)
}

// send sends an EVALSHA or EVAL command.
func send(ctx context.Context, c Processor, cmdArgs []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if cmdArgs[2] != 0 {
		cmd.SetFirstKeyPos(3) // the first key, for Cluster's routing
	}
	_ = c.Process(ctx, cmd)
	return cmd
}

// Keys boxes keys for Run.
func Keys(keys ...string) []any {
	b := make([]any, len(keys))
	for i, k := range keys {
		b[i] = k
	}
	return b
}

// ACLError is Redis's refusal of a command, or of a key or channel a
// command names, to the client's ACL user: the rule the user was made
// with lacks what the library needs (ACLDocs lists it). It is an error
// reply, not an outage, which no waiter waits out.
type ACLError struct {
	Command string // upper case, "CLIENT SETINFO" for a subcommand; "" when unknown
	Refused string // what was refused: "command", "key" or "channel"
	Err     error  // the reply
}

func (e *ACLError) Error() string {
	cmd := "a command"
	if e.Command != "" {
		cmd = "the command " + e.Command
	}
	what := cmd + " to the client's ACL user"
	if e.Refused != "command" {
		what = fmt.Sprintf("the client's ACL user a %s of %s", e.Refused, cmd)
	}
	return fmt.Sprintf("Redis refused %s; the commands, keys and channels the library needs are in %s: %v", what, ACLDocs, e.Err)
}

func (e *ACLError) Unwrap() error { return e.Err }

// The parts of Redis's ACL refusals that Refusal reads.
var (
	// the command named: "... to run the 'time' command", "'pubsub|channels' command"
	aclCommandRe = regexp.MustCompile(`'([a-z0-9_.|-]+)' command`)
	// the line of the script that called it: "@user_script:13" (Redis 6.2
	// says "@user_script: 13" too)
	aclLineRe = regexp.MustCompile(`@user_script: ?([0-9]+)`)
	// a command called from Lua
	luaCallRe = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)
)

// Refusal returns err as an *ACLError when it is Redis's refusal of a
// command, key or channel to the client's ACL user, else nil. src is the
// source of the script whose run failed, and sent the command that ran
// it (EVALSHA or EVAL); both are "" for other commands. Redis names the
// refused command (NOPERM replies, and Valkey's and Redis 7.2's in
// scripts too), or only the line of the script that called it (Redis
// 6.2 and 7.0): then it is the command called on that line of src. A
// refusal of keys that names no line is of the script's keys: sent's.
func Refusal(err error, src, sent string) *ACLError {
	var acl *ACLError
	if errors.As(err, &acl) {
		return acl
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return nil
	}
	msg := strings.ToLower(rerr.Error())
	if !strings.HasPrefix(msg, "noperm") && !strings.Contains(msg, "acl failure") &&
		!strings.Contains(msg, "the user executing the script can't") {
		return nil
	}
	e := &ACLError{Refused: "command", Err: err}
	if m := aclCommandRe.FindStringSubmatch(msg); m != nil {
		e.Command = strings.ToUpper(strings.ReplaceAll(m[1], "|", " "))
		return e
	}
	switch {
	case strings.Contains(msg, "channel"):
		e.Refused = "channel"
	case strings.Contains(msg, "key"):
		e.Refused = "key"
	}
	if m := aclLineRe.FindStringSubmatch(msg); m != nil {
		e.Command = Command(src, m[1])
	} else if e.Refused == "key" {
		e.Command = strings.ToUpper(sent)
	}
	return e
}

// Command returns the command that line n (counted from 1, in decimal)
// of the script src calls, upper case; "" when the line calls none, or
// more than one.
func Command(src, n string) string {
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
