package safety

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Child processes run the same client loop as the in-process clients, in
// another process that the nemesis stops with SIGSTOP for longer than the
// TTL: every goroutine of the process stops, the heartbeat too, and its
// lock expires as it would under a long stop-the-world pause, a VM freeze
// or a process swapped out. A child is the test binary itself, run with
// -test.run=^TestChildProcess$ and its configuration in an environment
// variable. It writes its history as JSON lines to a file that the parent
// reads once it has exited.

// childEnv carries a child's childConfig, as JSON.
const childEnv = "FENCEDLOCK_SAFETY_CHILD"

// childConfig is what a child process runs.
type childConfig struct {
	Spec      clientSpec
	Lock      lockTarget
	Keys      lockTarget // the lock Redis without proxies, for checker D; no Addrs: not checked
	StoreAddr string     // the store proxy's address
	Out       string     // where the child writes its history
}

// TestChildProcess is the body of a child process; run on its own it is
// skipped.
func TestChildProcess(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("runs only in a child process that a safety scenario starts")
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s: %v", childEnv, err)
	}
	client := cfg.Lock.newRedisClient(2)
	defer client.Close()
	store := newHTTPStore(cfg.StoreAddr)
	defer store.close()
	var keys keyReader
	if len(cfg.Keys.Addrs) > 0 {
		c := cfg.Keys.newRedisClient(2)
		defer c.Close()
		keys = directKeys{c}
	}
	rec := &recorder{}
	newWorker(cfg.Spec, cfg.Lock.newLocker(client), store, rec, keys, nil).run(context.Background())
	if err := writeOps(cfg.Out, rec.snapshot()); err != nil {
		t.Fatal(err)
	}
}

// A child is a running child process, seen from the parent. Its methods
// are safe for concurrent use.
type child struct {
	id     int
	cmd    *exec.Cmd
	out    string       // its history file
	output bytes.Buffer // its stdout and stderr; read after done
	done   chan struct{}
	err    error // of cmd.Wait; read after done
}

// startChild starts a child process running cfg. It is stopped (SIGKILL,
// after SIGCONT) and reaped when t ends, if it has not exited by then; on
// Linux the kernel kills it if the test process dies first.
func startChild(t *testing.T, cfg childConfig, timeout time.Duration) *child {
	t.Helper()
	if !childrenSupported {
		t.Skip("child processes need Linux: SIGSTOP, and a parent-death signal so that no child outlives the test")
	}
	cfg.Out = filepath.Join(t.TempDir(), fmt.Sprintf("child-%d.jsonl", cfg.Spec.ID))
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{id: cfg.Spec.ID, out: cfg.Out, done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.count=1", "-test.timeout="+timeout.String())
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	c.cmd.Stdout = &c.output
	c.cmd.Stderr = &c.output
	prepareChild(c.cmd)
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting child %d: %v", c.id, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(c.kill)
	return c
}

// exited reports whether the child has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// kill stops the child for good if it is still running, and waits for it.
func (c *child) kill() {
	if !c.exited() {
		c.cont()
		c.cmd.Process.Kill()
	}
	<-c.done
}

// wait waits up to timeout for the child to exit, then reads its history.
// A child still running then is killed, and its history is an error.
func (c *child) wait(timeout time.Duration) ([]op, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.kill()
		return nil, fmt.Errorf("child %d still running %v after its workload's end: killed; its output:\n%s", c.id, timeout, c.output.String())
	}
	if c.err != nil {
		return nil, fmt.Errorf("child %d: %v; its output:\n%s", c.id, c.err, c.output.String())
	}
	ops, err := readOps(c.out)
	if err != nil {
		return nil, fmt.Errorf("child %d: %v; its output:\n%s", c.id, err, c.output.String())
	}
	return ops, nil
}

// children is the set of a scenario's child processes, for the nemesis.
type children struct {
	mu   sync.Mutex // protects list
	list []*child
}

func (cs *children) add(c *child) {
	cs.mu.Lock()
	cs.list = append(cs.list, c)
	cs.mu.Unlock()
}

// running returns the children that have not exited.
func (cs *children) running() []*child {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []*child
	for _, c := range cs.list {
		if !c.exited() {
			out = append(out, c)
		}
	}
	return out
}

func (cs *children) all() []*child {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]*child(nil), cs.list...)
}
