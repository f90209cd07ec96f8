package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/fencedlock/fencedlock"
)

// advance is "fencedlock advance [flags] RESOURCE TOKEN".
func advance(args []string) int {
	c := newCommand("advance", "[flags] RESOURCE TOKEN")
	fs, conn := c.flags, &c.redis
	if code, ok := c.parse(args); !ok {
		return code
	}
	if fs.NArg() != 2 {
		return c.usageError(errors.New("want RESOURCE and TOKEN"))
	}
	resource := fs.Arg(0)
	floor, err := fencedlock.ParseToken(fs.Arg(1))
	if err != nil {
		return c.usageError(fmt.Errorf("TOKEN: %w", err))
	}
	client, err := conn.client()
	if err != nil {
		return c.usageError(err)
	}
	defer client.Close()
	locker := conn.locker(client)
	ctx, cancel := context.WithTimeout(context.Background(), conn.timeout)
	defer cancel()
	if err := locker.Advance(ctx, resource, floor); err != nil {
		report(err)
		return exitCode(err)
	}
	fmt.Fprintf(os.Stdout, "%q: the next token is above %s\n", resource, floor)
	return 0
}
