package redistest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The proxy the network tests build on: it forwards, pauses, delays,
// drops replies, holds requests and closes connections, and its cleanup
// ends every goroutine it started.
func TestProxy(t *testing.T) {
	baseline := runtime.NumGoroutine()
	t.Run("faults", func(t *testing.T) {
		m := miniredis.RunT(t)
		p := redistest.NewProxy(t, m.Addr())
		direct := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { direct.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)

		dial := func(t *testing.T) (net.Conn, *bufio.Reader) {
			t.Helper()
			c, err := net.Dial("tcp", p.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			return c, bufio.NewReader(c)
		}
		// send writes a command as a RESP array (miniredis takes no
		// inline commands).
		send := func(t *testing.T, c net.Conn, cmd string) {
			t.Helper()
			args := strings.Fields(cmd)
			var sb strings.Builder
			fmt.Fprintf(&sb, "*%d\r\n", len(args))
			for _, a := range args {
				fmt.Fprintf(&sb, "$%d\r\n%s\r\n", len(a), a)
			}
			_, err := c.Write([]byte(sb.String()))
			require.NoError(t, err)
		}
		reply := func(t *testing.T, c net.Conn, r *bufio.Reader, within time.Duration) (string, error) {
			t.Helper()
			require.NoError(t, c.SetReadDeadline(time.Now().Add(within)))
			line, err := r.ReadString('\n')
			return strings.TrimRight(line, "\r\n"), err
		}

		c, r := dial(t)
		send(t, c, "PING")
		line, err := reply(t, c, r, 2*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "+PONG", line)

		t.Run("Pause holds both directions until Resume", func(t *testing.T) {
			p.Pause()
			send(t, c, "INCR paused")
			_, err := reply(t, c, r, 100*time.Millisecond)
			var ne net.Error
			require.True(t, errors.As(err, &ne) && ne.Timeout(), "a reply arrived while paused: %v", err)
			assert.Zero(t, direct.Exists(ctx, "paused").Val(), "a command reached the server while paused")
			// A new connection is accepted while paused, its bytes held too.
			c2, r2 := dial(t)
			send(t, c2, "INCR paused")
			p.Resume()
			line, err := reply(t, c, r, 2*time.Second)
			require.NoError(t, err)
			line2, err := reply(t, c2, r2, 2*time.Second)
			require.NoError(t, err)
			assert.ElementsMatch(t, []string{":1", ":2"}, []string{line, line2})
		})

		t.Run("Delay", func(t *testing.T) {
			p.Delay(50 * time.Millisecond)
			start := time.Now()
			send(t, c, "PING")
			line, err := reply(t, c, r, 2*time.Second)
			require.NoError(t, err)
			assert.Equal(t, "+PONG", line)
			assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "a command and its reply each wait the delay")
			p.Delay(0)
			start = time.Now()
			send(t, c, "PING")
			_, err = reply(t, c, r, 2*time.Second)
			require.NoError(t, err)
			assert.Less(t, time.Since(start), 50*time.Millisecond)
		})

		t.Run("DropReplies", func(t *testing.T) {
			p.DropReplies(1)
			send(t, c, "INCR dropped")
			_, err := reply(t, c, r, 2*time.Second)
			assert.ErrorIs(t, err, io.EOF, "the connection must end where the reply was")
			assert.Equal(t, "1", direct.Get(ctx, "dropped").Val(), "the server ran the command")
			assert.Equal(t, 1, p.Dropped())
			// The drops are used up: a new connection gets its replies.
			c3, r3 := dial(t)
			send(t, c3, "INCR dropped")
			line, err := reply(t, c3, r3, 2*time.Second)
			require.NoError(t, err)
			assert.Equal(t, ":2", line)
		})

		t.Run("HoldRequests delivers after the client has gone", func(t *testing.T) {
			c3, r3 := dial(t)
			send(t, c3, "PING")
			_, err := reply(t, c3, r3, 2*time.Second)
			require.NoError(t, err)

			p.HoldRequests(1, 300*time.Millisecond)
			send(t, c3, "INCR held")
			_, err = reply(t, c3, r3, 50*time.Millisecond)
			var ne net.Error
			require.True(t, errors.As(err, &ne) && ne.Timeout(), "a reply arrived while the request was held: %v", err)
			require.NoError(t, c3.Close()) // the client gives up
			// Other requests flow meanwhile.
			c4, r4 := dial(t)
			send(t, c4, "PING")
			line, err := reply(t, c4, r4, time.Second)
			require.NoError(t, err)
			assert.Equal(t, "+PONG", line)
			assert.Zero(t, direct.Exists(ctx, "held").Val(), "the held request reached the server early")
			assert.Zero(t, p.Released())

			deadline := time.Now().Add(5 * time.Second)
			for p.Answered() < 1 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			assert.Equal(t, 1, p.Released())
			assert.Equal(t, 1, p.Answered())
			assert.Equal(t, "1", direct.Get(ctx, "held").Val(), "the held request did not run once its client had gone")
		})

		t.Run("CloseAll", func(t *testing.T) {
			c3, r3 := dial(t)
			send(t, c3, "PING")
			_, err := reply(t, c3, r3, 2*time.Second)
			require.NoError(t, err)
			p.CloseAll()
			_, err = reply(t, c3, r3, 2*time.Second)
			assert.ErrorIs(t, err, io.EOF)
			c4, r4 := dial(t)
			send(t, c4, "PING")
			line, err := reply(t, c4, r4, 2*time.Second)
			require.NoError(t, err)
			assert.Equal(t, "+PONG", line)
			// Left for the cleanup: a connection with a chunk held by a
			// pause, and one with a chunk in a delay.
			p.Pause()
			send(t, c4, "PING")
			c5, _ := dial(t)
			p.Delay(time.Hour)
			send(t, c5, "PING")
		})
	})
	// The cleanups ran: the proxy's goroutines, like miniredis's, ended.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after the proxy's cleanup, %d before:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
}
