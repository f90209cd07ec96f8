package election_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A leader process stopped with SIGSTOP past its lease: another candidate
// is elected and writes; the stopped leader, resumed, still believes it
// leads, and its late write is refused.
func TestStoppedLeadersLateWriteIsRefused(t *testing.T) {
	b := redistest.Real(t)
	ctx := elCtx(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), childEnv+"="+b.Client.Options().Addr+" "+b.Prefix)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	next := func() string {
		t.Helper()
		got := make(chan string, 1)
		go func() {
			if lines.Scan() {
				got <- lines.Text()
			} else {
				got <- "EOF"
			}
		}()
		select {
		case l := <-got:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no line from the child within 10s")
			return ""
		}
	}
	first := next()
	require.True(t, strings.HasPrefix(first, "elected "), "child: %q", first)
	childToken, err := fencedlock.ParseToken(strings.TrimPrefix(first, "elected "))
	require.NoError(t, err)

	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	e := election.New(fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix)), "stopped", election.WithTTL(500*time.Millisecond))
	term, err := e.Campaign(ctx, "parent") // elected once the child's lease runs out
	require.NoError(t, err)
	require.Greater(t, term.Token(), childToken)
	store := fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix))
	require.NoError(t, store.Put(ctx, "job", term.Token(), []byte("parent")))

	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	_, err = io.WriteString(stdin, "write\n")
	require.NoError(t, err)
	require.Equal(t, "stale", next(), "the resumed leader's late write")
	v, tok, err := store.Get(ctx, "job")
	require.NoError(t, err)
	require.Equal(t, "parent", string(v))
	require.Equal(t, term.Token(), tok)
	require.NoError(t, stdin.Close())
	require.NoError(t, term.Resign(context.Background()))
}
