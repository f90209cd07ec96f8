package election_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	redistest.Main(m)
}

// childEnv, when set to "<redis address> <key prefix>", makes the test
// binary a leader process for TestStoppedLeadersLateWriteIsRefused.
const childEnv = "ELECTION_TEST_CHILD"

// runChild campaigns in the election "stopped", prints "elected <token>",
// then, for each "write" line on stdin, writes to the store with its
// term's token and prints "accepted", "stale" or the error.
func runChild(spec string) int {
	addr, prefix, _ := strings.Cut(spec, " ")
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx := context.Background()
	e := election.New(fencedlock.New(client, fencedlock.WithPrefix(prefix)), "stopped", election.WithTTL(500*time.Millisecond))
	term, err := e.Campaign(ctx, "child")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("elected", term.Token())
	store := fencedlock.NewRedisStore(client, fencedlock.WithStorePrefix(prefix))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		err := store.Put(ctx, "job", term.Token(), []byte("child"))
		switch {
		case err == nil:
			fmt.Println("accepted")
		case errors.Is(err, fencedlock.ErrStaleToken):
			fmt.Println("stale")
		default:
			fmt.Println("error", err)
		}
	}
	return 0
}
