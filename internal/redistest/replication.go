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
