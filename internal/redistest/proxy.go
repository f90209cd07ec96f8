package redistest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy between Redis clients and a Redis server that
// injects network faults: lost replies, a stalled network, latency,
// requests held up on their way, and broken connections. Point a client at
// Addr instead of the server. A replica can replicate through it too
// (REPLICAOF to its address): Pause then stalls the replication stream.
// Retarget moves it to another server, as a failover moves clients.
//
// The proxy forwards bytes in chunks: whatever one read from a socket
// returned. A small reply to one command is one chunk. Each accepted client
// connection gets its own connection to the target. When a client closes
// its side, the proxy passes the close on to the server only after it has
// delivered everything the client sent (chunks held by HoldRequests
// included), and forwards the server's replies until the server closes
// too, as TCP would. When a read or write fails, when the server closes
// its side, or on CloseAll, the proxy closes both sides at once.
//
// Its methods are safe for concurrent use. It is closed when the test that
// made it ends: the listener and every connection are closed and all its
// goroutines have returned before the cleanup does (if they have not
// within 10 seconds, the cleanup fails the test rather than hang).
type Proxy struct {
	ln     net.Listener
	ctx    context.Context // done when the proxy is closed
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection's goroutines

	mu       sync.Mutex
	target   string                  // guarded by mu; set by NewProxy and Retarget
	targets  int                     // guarded by mu; counts Retarget calls
	idle     *sync.Cond              // on mu: signalled when inflight drops to 0
	conns    map[*proxyConn]struct{} // guarded by mu
	closed   bool                    // guarded by mu
	paused   bool                    // guarded by mu
	resumed  chan struct{}           // guarded by mu; closed by Resume, non-nil while paused
	inflight int                     // guarded by mu; chunks being written
	delay    time.Duration           // guarded by mu
	replyLag time.Duration           // guarded by mu; extra delay of server→client chunks
	drops    int                     // guarded by mu; server→client chunks still to drop
	dropped  int                     // guarded by mu; server→client chunks dropped so far
	holds    int                     // guarded by mu; client→server chunks still to hold
	holdFor  time.Duration           // guarded by mu; how long HoldRequests holds each
	released int                     // guarded by mu; held chunks delivered to the server
	answered int                     // guarded by mu; held chunks the server replied to
	stallSub chan struct{}           // guarded by mu; closed by ResumeSubscriptions, non-nil while connections are stalled
}

// proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	client, server net.Conn
	done           chan struct{} // closed by close
	once           sync.Once
	awaiting       int  // guarded by Proxy.mu; held chunks delivered and not yet answered
	subscriber     bool // guarded by Proxy.mu; the client has sent a SUBSCRIBE or SSUBSCRIBE on it
	stalled        bool // guarded by Proxy.mu; held by StallSubscriptions
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.server.Close()
	})
}

// NewProxy starts a proxy to target (host:port) on a free loopback port.
// It is closed by tb.Cleanup.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, conns: map[*proxyConn]struct{}{}}
	p.idle = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(func() { p.close(tb) })
	return p
}

// Addr returns the address clients connect to, "127.0.0.1:<port>".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropReplies makes the proxy discard the next n chunks of bytes from the
// server to a client. For each, it closes that client connection and its
// server connection, so the server has executed the command while the
// client sees its reply cut off (EOF) and, with retries enabled, resends
// it on another connection. Calls add up; n <= 0 adds nothing. Note that a
// client's new connection starts with handshake commands (HELLO, CLIENT
// SETINFO), whose replies count as chunks too.
func (p *Proxy) DropReplies(n int) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	p.drops += n
	p.mu.Unlock()
}

// Dropped returns how many chunks DropReplies has made the proxy discard
// so far.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Pause stops forwarding in both directions until Resume: chunks read
// from either side are held, and no bytes reach the other side. Once
// Pause returns, nothing more is delivered (it waits for chunks already
// being written to finish). Connections stay open and new ones are still
// accepted and connected, but their bytes are held too. Pausing a paused
// proxy does nothing.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused = true
		p.resumed = make(chan struct{})
	}
	for p.inflight > 0 {
		p.idle.Wait()
	}
}

// Resume ends a Pause: held chunks are delivered, in order per direction
// of each connection. Resuming a proxy that is not paused does nothing.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resumed)
		p.resumed = nil
	}
}

// StallSubscriptions stops forwarding, in both directions, on every
// connection that a client has sent a SUBSCRIBE or SSUBSCRIBE on so far,
// until ResumeSubscriptions; other connections, and connections made
// later, flow. The stalled connections stay open: a pub/sub connection
// that stalls without closing, as behind a broken middlebox.
func (p *Proxy) StallSubscriptions() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stallSub == nil {
		p.stallSub = make(chan struct{})
	}
	for c := range p.conns {
		if c.subscriber {
			c.stalled = true
		}
	}
}

// ResumeSubscriptions ends StallSubscriptions: held chunks are delivered.
func (p *Proxy) ResumeSubscriptions() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stallSub != nil {
		close(p.stallSub)
		p.stallSub = nil
	}
	for c := range p.conns {
		c.stalled = false
	}
}

// Delay delays every chunk forwarded from now on, in either direction, by
// d before it is written; chunks of one direction of a connection are
// forwarded one after another, so their delays add up. d <= 0 removes the
// delay.
func (p *Proxy) Delay(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// DelayReplies delays every chunk forwarded from the server to a client
// from now on by d, on top of any Delay, while requests flow on at once:
// the server runs commands whose replies arrive d later. d <= 0 removes
// the reply delay.
func (p *Proxy) DelayReplies(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.mu.Lock()
	p.replyLag = d
	p.mu.Unlock()
}

// HoldRequests makes the proxy hold each of the next n chunks from a
// client to the server for d (on top of any Delay) before delivering it,
// while everything else flows on. A held chunk is delivered even if its
// client has given up and closed its connection meanwhile: the proxy
// passes the client's close on to the server only after the chunk, and
// reads the server's answer, so the server runs a request that its client
// no longer waits for, as a request delayed in the network would arrive.
// Held chunks are dropped only when their connection is closed by
// CloseAll, a failure, or the proxy's end. Calls add up (the last d
// applies); n <= 0 adds nothing. Note that a new connection starts with
// handshake commands, whose chunks count too: warm the client's pool first.
func (p *Proxy) HoldRequests(n int, d time.Duration) {
	if n <= 0 {
		return
	}
	if d < 0 {
		d = 0
	}
	p.mu.Lock()
	p.holds += n
	p.holdFor = d
	p.mu.Unlock()
}

// Released returns how many chunks held by HoldRequests have been
// delivered to the server so far.
func (p *Proxy) Released() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.released
}

// Answered returns how many chunks held by HoldRequests the server has
// answered so far: for each, the first bytes the server sent on that
// connection after the chunk was delivered have reached the proxy (so the
// server has run the request). The answer is passed on to the client if
// the client is still there.
func (p *Proxy) Answered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered
}

// CloseAll closes every current connection, client and server side. The
// proxy keeps accepting new ones.
func (p *Proxy) CloseAll() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Retarget points the proxy at a new target (host:port): connections
// accepted from now on are connected to addr, and every current
// connection is closed, as by CloseAll, so that clients reconnect and
// reach addr. A connection being set up to the old target while Retarget
// runs is closed too. Delay, Pause, DropReplies and HoldRequests keep
// their settings; chunks held on the closed connections are dropped. Use
// it to move clients to a promoted replica in a failover.
func (p *Proxy) Retarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.targets++
	p.mu.Unlock()
	p.CloseAll()
}

// targetNow returns the current target and the count of Retarget calls
// that chose it.
func (p *Proxy) targetNow() (string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target, p.targets
}

// Close stops the proxy before its test ends, as a server that went away:
// the listener is closed (new connections are refused) and every
// connection is closed. It waits for the proxy's goroutines. Closing
// twice, or the test's own cleanup after it, does nothing more.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.ln.Close()
	p.CloseAll()
	p.wg.Wait()
}

// closeWait bounds how long close waits for the proxy's goroutines.
const closeWait = 10 * time.Second

// close stops the proxy and waits for all its goroutines. If they have not
// ended within closeWait (a bug of the proxy's), it fails tb instead of
// hanging the test binary.
func (p *Proxy) close(tb testing.TB) {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.ln.Close()
	p.CloseAll()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(closeWait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		target, _ := p.targetNow()
		tb.Errorf("redistest: proxy %s -> %s: goroutines still running %v after close", p.Addr(), target, closeWait)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	var d net.Dialer
	for {
		client, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // the listener is closed
		}
		target, gen := p.targetNow()
		dctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		server, err := d.DialContext(dctx, "tcp", target)
		cancel()
		if err != nil {
			// The target is down (or the proxy is closing): the client
			// sees its connection closed.
			client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		if p.targets != gen {
			// Retarget ran while this connection was dialled to the old
			// target: close it as Retarget closed the others.
			p.mu.Unlock()
			c.close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(c, c.client, c.server, false)
		go p.pipe(c, c.server, c.client, true)
	}
}

// pipe forwards chunks from src to dst until either fails, then closes
// the pair. fromServer marks the direction that DropReplies acts on; the
// other one, from the client, is the one HoldRequests acts on. When the
// client closes its side (EOF), the pipe from the client half-closes the
// server connection and leaves the pair open: the pipe from the server
// closes it once the server has closed, or a write to the client fails.
func (p *Proxy) pipe(c *proxyConn, src, dst net.Conn, fromServer bool) {
	defer p.wg.Done()
	halfClosed := false
	defer func() {
		if halfClosed {
			return
		}
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.delay
			held := false
			if !fromServer && p.holds > 0 {
				p.holds--
				held = true
				d += p.holdFor
			}
			if fromServer {
				d += p.replyLag
			}
			if fromServer && c.awaiting > 0 {
				c.awaiting--
				p.answered++
			}
			if !fromServer && !c.subscriber && bytes.Contains(bytes.ToLower(buf[:n]), []byte("subscribe")) {
				c.subscriber = true
			}
			p.mu.Unlock()
			if d > 0 {
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C:
				case <-c.done:
					return
				}
			}
			drop, ok := p.admit(c, fromServer)
			if !ok {
				return
			}
			if drop {
				return // the deferred close cuts the pair off
			}
			if held {
				// Counted before the write: the server may answer before
				// the write returns.
				p.mu.Lock()
				c.awaiting++
				p.mu.Unlock()
			}
			_, werr := dst.Write(buf[:n])
			p.mu.Lock()
			p.inflight--
			if p.inflight == 0 {
				p.idle.Broadcast()
			}
			if held && werr == nil {
				p.released++
			}
			p.mu.Unlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			if !fromServer && errors.Is(err, io.EOF) {
				// The client is done sending: pass that on, and let the
				// server's replies to what it sent flow until the server
				// closes too.
				if tc, ok := dst.(*net.TCPConn); ok && tc.CloseWrite() == nil {
					halfClosed = true
				}
			}
			return
		}
	}
}

// admit waits until the proxy is not paused, then decides the fate of a
// chunk: drop it (consuming one DropReplies) or write it (counted in
// inflight, which the caller decrements after writing). ok is false when
// the connection closed while waiting.
func (p *Proxy) admit(c *proxyConn, fromServer bool) (drop, ok bool) {
	for {
		p.mu.Lock()
		if stall := p.stallSub; stall != nil && c.stalled {
			p.mu.Unlock()
			select {
			case <-stall:
			case <-c.done:
				return false, false
			}
			continue
		}
		if !p.paused {
			if fromServer && p.drops > 0 {
				p.drops--
				p.dropped++
				p.mu.Unlock()
				return true, true
			}
			p.inflight++
			p.mu.Unlock()
			return false, true
		}
		resumed := p.resumed
		p.mu.Unlock()
		select {
		case <-resumed:
		case <-c.done:
			return false, false
		}
	}
}
