package redistest

import (
	"context"
	"net"
	"testing"
	"time"
)

// Restart waits for its port when another process holds it for a while
// after the kill, instead of failing at once.
func TestRestartWaitsForItsPort(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatalf("taking the port of the killed server: %v", err)
	}
	freed := make(chan struct{})
	go func() {
		defer close(freed)
		time.Sleep(300 * time.Millisecond)
		ln.Close()
	}()
	s.Restart(t)
	<-freed
	n, err := c.Exists(ctx, "k").Result()
	if err != nil {
		t.Fatalf("the restarted server does not answer: %v", err)
	}
	if n != 0 {
		t.Fatal("the restarted server kept its data")
	}
}
