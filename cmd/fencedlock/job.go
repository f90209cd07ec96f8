package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencedlock/fencedlock"
)

// The environment variables CMD gets.
const (
	envToken    = "FENCEDLOCK_TOKEN"
	envResource = "FENCEDLOCK_RESOURCE"
)

// job is CMD, started under a lock.
type job struct {
	cmd    *exec.Cmd
	group  bool          // CMD leads a process group of its own, and signals go to the whole group
	exited chan struct{} // closed once CMD has exited and been waited for
}

// startJob starts argv with fencedlock's standard streams and env. Its
// error says why CMD could not start.
func startJob(argv, env []string) (*job, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	j := &job{cmd: cmd, group: prepare(cmd), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait() // its outcome is in cmd.ProcessState
		close(j.exited)
	}()
	return j, nil
}

// startStatus is the exit status for a CMD that could not start: 127
// when it was not found, 126 otherwise, as shells do.
func startStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

// status is CMD's exit status once it has exited: its own, or 128 plus
// the number of the signal that ended it, as shells report it.
func (j *job) status() int {
	return exitStatus(j.cmd.ProcessState)
}

// signal sends sig to CMD, or to its process group.
func (j *job) signal(sig os.Signal) {
	_ = signalProcess(j.cmd.Process, j.group, sig)
}

// jobEnv is environ with the token and the resource set, in place of any
// values they had.
func jobEnv(environ []string, token fencedlock.Token, resource string) []string {
	env := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		if strings.HasPrefix(kv, envToken+"=") || strings.HasPrefix(kv, envResource+"=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, envToken+"="+token.String(), envResource+"="+resource)
}

// holding is what a job needs of a lock or an election term: its token,
// and how it ends.
type holding struct {
	token fencedlock.Token
	done  <-chan struct{}                 // closed when the lock or term ends
	err   func() error                    // why it ended: nil while held
	end   func(ctx context.Context) error // releases or resigns
}

// ending is how a supervised job ended.
type ending struct {
	status int   // CMD's exit status
	lost   error // the loss of the lock or term while CMD ran, or nil
}

// supervise waits for CMD to exit. When the lock is lost, CMD gets
// SIGTERM; a signal in sigs is passed on to it, unless the terminal
// already sent it to CMD too (see forwards). Either way SIGKILL follows
// after killAfter if CMD has not exited.
func supervise(j *job, h *holding, sigs <-chan os.Signal, killAfter time.Duration) ending {
	var (
		lost    error
		kill    <-chan time.Time
		stopper *time.Timer
	)
	stop := func(sig os.Signal) {
		j.signal(sig)
		if stopper == nil {
			stopper = time.NewTimer(killAfter)
			kill = stopper.C
		}
	}
	defer func() {
		if stopper != nil {
			stopper.Stop()
		}
	}()
	done := h.done
	for {
		select {
		case <-j.exited:
			if stopper != nil && j.group {
				// CMD was being stopped: what it started in its group is
				// stopped too (SIGKILL at -kill-after), before the lock is
				// released or given up.
				reapGroup(j.cmd.Process.Pid, kill)
			}
			if lost == nil {
				// Lost as CMD exited: said now, as no CMD is left to stop.
				if lost = h.err(); lost != nil {
					report(lost)
				}
			}
			return ending{status: j.status(), lost: lost}
		case <-done:
			done = nil
			lost = h.err()
			report(lostError{lost, killAfter})
			stop(syscall.SIGTERM)
		case sig := <-sigs:
			if forwards(j.group, sig) {
				stop(sig)
			}
		case <-kill:
			kill = nil
			j.signal(syscall.SIGKILL)
		}
	}
}

// lostError is the message printed when the lock is lost while CMD runs.
type lostError struct {
	err       error
	killAfter time.Duration
}

func (e lostError) Error() string {
	return e.err.Error() + "; stopping CMD: SIGTERM, then SIGKILL after " + e.killAfter.String()
}

// signalStatus is the exit status for an end by sig: 128 plus its number.
func signalStatus(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return exitSignal + int(n)
	}
	return exitFailure
}

// signalNames are the names of the signals fencedlock handles or sends.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP:  "SIGHUP",
	syscall.SIGINT:  "SIGINT",
	syscall.SIGKILL: "SIGKILL",
	syscall.SIGTERM: "SIGTERM",
}

// signalName names sig for messages: SIGTERM rather than "terminated".
func signalName(sig os.Signal) string {
	if n, ok := sig.(syscall.Signal); ok {
		if name, ok := signalNames[n]; ok {
			return name
		}
		return "signal " + strconv.Itoa(int(n))
	}
	return sig.String()
}
