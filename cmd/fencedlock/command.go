package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencedlock/fencedlock"
)

// command is one of fencedlock's commands: its flags, the Redis ones
// among them, and how it reports their errors.
type command struct {
	name     string // "run", "inspect", "advance"
	synopsis string // what follows the name in the usage line
	flags    *flag.FlagSet
	redis    redisFlags
}

// newCommand returns the command name with the flags that say which
// Redis to use; the caller adds its own.
func newCommand(name, synopsis string) *command {
	c := &command{name: name, synopsis: synopsis, flags: flag.NewFlagSet("fencedlock "+name, flag.ContinueOnError)}
	// The flag package prints the error and the whole usage on a bad
	// flag: parse prints the error alone, in one line.
	c.flags.SetOutput(io.Discard)
	c.flags.Usage = func() {}
	r := &c.redis
	c.flags.StringVar(&r.url, "redis", "", "the Redis `URL`: redis://, rediss:// or unix:// (default $"+envRedisURL+", else "+defaultRedisURL+")")
	c.flags.StringVar(&r.master, "sentinel-master", "", "use Redis Sentinel: the master's `NAME`; the URL's hosts are then the Sentinels")
	c.flags.BoolVar(&r.cluster, "cluster", false, "use Redis Cluster: the URL's hosts are nodes of the cluster")
	c.flags.StringVar(&r.prefix, "prefix", fencedlock.DefaultPrefix, "the key `prefix` of the locks, as WithPrefix sets it")
	c.flags.DurationVar(&r.idle, "idle-expiry", fencedlock.DefaultIdleExpiry, "how long an idle resource's token counter is kept, as WithIdleExpiry sets it: give the services' own (0 keeps it for ever; else at least 1s)")
	c.flags.DurationVar(&r.timeout, "redis-timeout", 10*time.Second, "how long a call to Redis may take, beside the wait for the lock: one attempt (-wait 0), a release, inspect, advance")
	return c
}

// parse parses args. When it returns false, the caller returns code: 0
// after -h, which prints the usage, and exitUsage after a bad flag.
func (c *command) parse(args []string) (code int, ok bool) {
	err := c.flags.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(os.Stdout, "Usage: fencedlock %s %s\n\nFlags:\n", c.name, c.synopsis)
		c.flags.SetOutput(os.Stdout)
		c.flags.PrintDefaults()
		return 0, false
	case err != nil:
		return c.usageError(err), false
	case c.redis.timeout <= 0:
		return c.usageError(fmt.Errorf("-redis-timeout %v: must be above 0", c.redis.timeout)), false
	case c.redis.idle < 0 || c.redis.idle > 0 && c.redis.idle < time.Second:
		return c.usageError(fmt.Errorf("-idle-expiry %v: must be 0 (for ever) or at least 1s", c.redis.idle)), false
	}
	return 0, true
}

// usageError reports a bad flag or argument in one line, and returns
// exitUsage.
func (c *command) usageError(err error) int {
	return usageError(c.name, err)
}
