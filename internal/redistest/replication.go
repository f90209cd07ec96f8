package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Info returns the fields of one INFO section of the server behind c.
func Info(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	raw, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(raw, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// CommandStat is one command's line of INFO commandstats: how many
// times the server ran it (those a script ran count too), and the
// microseconds it took in all.
type CommandStat struct{ Calls, Usec int64 }

// CommandStats returns INFO commandstats of the server behind c, by
// command name as Redis gives it ("get", "config|resetstat"); a command
// never run is absent.
func CommandStats(ctx context.Context, c *redis.Client) (map[string]CommandStat, error) {
	info, err := Info(ctx, c, "commandstats")
	if err != nil {
		return nil, err
	}
	stats := map[string]CommandStat{}
	for name, line := range info {
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		var st CommandStat
		for _, field := range strings.Split(line, ",") {
			key, value, _ := strings.Cut(field, "=")
			var to *int64
			switch key {
			case "calls":
				to = &st.Calls
			case "usec":
				to = &st.Usec
			default:
				continue
			}
			if *to, err = strconv.ParseInt(value, 10, 64); err != nil {
				return nil, fmt.Errorf("INFO commandstats %s: %q: %w", cmd, line, err)
			}
		}
		stats[cmd] = st
	}
	return stats, nil
}

// WaitInSync waits until replica's link to master is up and replica has
// applied everything master had sent when the wait began (clients may go
// on writing meanwhile), or until ctx ends; then it returns an error
// saying how far the replica got.
func WaitInSync(ctx context.Context, master, replica *redis.Client) error {
	var target int64 = -1
	last := "no answer yet"
	for {
		mi, err := Info(ctx, master, "replication")
		if err == nil && target < 0 {
			target, _ = strconv.ParseInt(mi["master_repl_offset"], 10, 64)
		}
		ri, rerr := Info(ctx, replica, "replication")
		if err == nil && rerr == nil {
			off, _ := strconv.ParseInt(ri["slave_repl_offset"], 10, 64)
			last = fmt.Sprintf("master offset %d when the wait began; replica: role %s, link %s, offset %d", target, ri["role"], ri["master_link_status"], off)
			if target >= 0 && ri["master_link_status"] == "up" && off >= target {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: the replica did not catch up with its master: %s: %w", last, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
