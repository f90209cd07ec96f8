package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/fencedlock/fencedlock"
)

// inspection is one line of inspect -json: Locker.Inspect's Info for a
// resource. Tokens are strings of digits, as JSON numbers above 2^53 lose
// digits in many readers.
type inspection struct {
	Resource string           `json:"resource"`
	Held     bool             `json:"held"`
	Token    fencedlock.Token `json:"token"`  // "0" when not held
	TTLMS    int64            `json:"ttl_ms"` // 0 when not held
	Waiters  int              `json:"waiters"`
	Counter  fencedlock.Token `json:"counter"` // "0" when missing
}

// inspect is "fencedlock inspect [flags] RESOURCE...".
func inspect(args []string) int {
	c := newCommand("inspect", "[flags] RESOURCE...")
	fs, conn := c.flags, &c.redis
	asJSON := fs.Bool("json", false, "print one JSON object a line, one line a resource, instead of a table")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return c.usageError(errors.New("missing RESOURCE"))
	}
	client, err := conn.client()
	if err != nil {
		return c.usageError(err)
	}
	defer client.Close()
	locker := conn.locker(client)

	table := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer table.Flush()
	enc := json.NewEncoder(os.Stdout)
	for i, resource := range fs.Args() {
		ctx, cancel := context.WithTimeout(context.Background(), conn.timeout)
		info, err := locker.Inspect(ctx, resource)
		cancel()
		if err != nil {
			table.Flush()
			report(err)
			return exitCode(err)
		}
		if *asJSON {
			_ = enc.Encode(inspection{
				Resource: resource, Held: info.Held, Token: info.Token,
				TTLMS: info.TTL.Milliseconds(), Waiters: info.Waiters, Counter: info.Counter,
			})
			continue
		}
		if i == 0 {
			fmt.Fprintln(table, "RESOURCE\tHELD\tTOKEN\tTTL\tWAITERS\tCOUNTER")
		}
		held, token, ttl, counter := "no", "-", "-", "-"
		if info.Held {
			held, token, ttl = "yes", info.Token.String(), info.TTL.Round(time.Millisecond).String()
		}
		if info.Counter != 0 {
			counter = info.Counter.String()
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%d\t%s\n", resource, held, token, ttl, info.Waiters, counter)
	}
	return 0
}
