package fencedlock

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriptionLinger is how long a resource's channel stays subscribed
// after its last local waiter left, so that waiting for it again soon
// costs no new subscription.
var subscriptionLinger = time.Second

// The subscriber's own check of its connection: a connection that has
// received nothing for pingAfter is sent a PING, and one that has not
// answered it within pongWithin is replaced. go-redis does not notice a
// connection that stalls without closing.
var (
	pingAfter  = time.Second
	pongWithin = 2 * time.Second
)

// Pauses between the subscriber's attempts to connect again after an
// error, doubling from the first to the last.
const (
	minReconnectPause = 10 * time.Millisecond
	maxReconnectPause = time.Second
)

// pubsubRetryAfter is how long a Locker whose pub/sub Redis refused goes
// without asking again; its waiters rely on their timers meanwhile.
const pubsubRetryAfter = time.Minute

// subscriber is one pub/sub connection of a Locker, shared by all its
// waiters (on Redis Cluster with sharded pub/sub, by the waiters whose
// resources hash to one slot). It lives while a channel is subscribed.
//
// One goroutine owns the connection (see serve): waiters never send on it
// themselves, so that a slow or stalled Redis holds up no waiter, only
// the subscriptions, which waiters do not wait for beyond their ctx and
// their fallback timer. Requests reach it in the order the Locker decided
// on them, under the Locker's mu. Another goroutine per connection reads
// it (see read), checks that it answers, and asks serve to replace it
// when it does not.
type subscriber struct {
	l        *Locker
	group    uint16
	sharded  bool
	cluster  bool
	channels map[string]*waitQueue // guarded by l.mu
	todo     []subRequest          // guarded by l.mu: requests not yet taken by serve
	wake     chan struct{}         // tells serve that todo has requests
}

// subRequest is a request to a subscriber's goroutine: subscribe to
// channel, unsubscribe from it, replace the connection conn, or close the
// connection for good.
type subRequest struct {
	channel string
	op      subOp
	conn    *subConn // opReconnect: the connection to replace
}

// subOp is what a subRequest asks for.
type subOp int8

const (
	opSubscribe subOp = iota
	opUnsubscribe
	opReconnect
	opClose
)

// subConn is one connection of a subscriber and its reader.
type subConn struct {
	ps *redis.PubSub
}

// subscribe makes sure that q's channel is subscribed, and returns a
// channel closed once the subscription is confirmed; nil when it is
// already, when the Locker cannot tell which kind of pub/sub Redis has,
// or when Redis refused pub/sub: the waiter then relies on its timer.
func (l *Locker) subscribe(ctx context.Context, q *waitQueue) <-chan struct{} {
	l.mu.Lock()
	mode := l.pubsub
	if q.sub != nil || mode == pubsubUnknown || mode == pubsubRefused {
		sub, ready := q.sub, q.ready
		l.mu.Unlock()
		if sub != nil {
			return pending(ready)
		}
		if mode = l.probe(ctx); mode == pubsubUnknown || mode == pubsubRefused {
			return nil
		}
		l.mu.Lock()
		if q.sub != nil {
			ready := q.ready
			l.mu.Unlock()
			return pending(ready)
		}
	}
	defer l.mu.Unlock()
	_, cluster := l.client.(*redis.ClusterClient)
	var group uint16
	if cluster && mode == pubsubSharded {
		group = hashSlot(q.channel)
	}
	if l.subs == nil {
		l.subs = make(map[uint16]*subscriber)
	}
	s := l.subs[group]
	if s == nil {
		s = &subscriber{l: l, group: group, sharded: mode == pubsubSharded, cluster: cluster, channels: make(map[string]*waitQueue), wake: make(chan struct{}, 1)}
		l.subs[group] = s
		go s.serve()
	}
	s.channels[q.channel] = q
	q.sub = s
	q.ready = make(chan struct{})
	s.request(subRequest{channel: q.channel, op: opSubscribe})
	return q.ready
}

// request queues r for the subscriber's goroutine. The Locker's mu is
// held.
func (s *subscriber) request(r subRequest) {
	s.todo = append(s.todo, r)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// serve is the subscriber's goroutine: it sends the requests queued for
// it, in order, until it has closed the connection.
func (s *subscriber) serve() {
	ctx := context.Background()
	var conn *subConn
	for range s.wake {
		s.l.mu.Lock()
		todo := s.todo
		s.todo = nil
		s.l.mu.Unlock()
		for _, r := range todo {
			switch {
			case r.op == opClose:
				if conn != nil {
					_ = conn.ps.Close()
				}
				return
			case r.op == opReconnect:
				if conn != r.conn {
					continue // replaced already
				}
				_ = conn.ps.Close()
				conn = nil
				if channels := s.subscribed(); len(channels) > 0 {
					conn = s.open(ctx, channels)
				}
			case conn == nil && r.op == opSubscribe:
				conn = s.open(ctx, []string{r.channel})
			case conn == nil:
			case r.op == opSubscribe && s.sharded:
				_ = conn.ps.SSubscribe(ctx, r.channel)
			case r.op == opSubscribe:
				_ = conn.ps.Subscribe(ctx, r.channel)
			case s.sharded:
				_ = conn.ps.SUnsubscribe(ctx, r.channel)
			default:
				_ = conn.ps.Unsubscribe(ctx, r.channel)
			}
		}
	}
}

// subscribed returns the channels the subscriber is asked to keep.
func (s *subscriber) subscribed() []string {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	channels := make([]string, 0, len(s.channels))
	for ch := range s.channels {
		channels = append(channels, ch)
	}
	return channels
}

// open makes a connection of the subscriber, subscribed to channels, and
// starts reading it.
func (s *subscriber) open(ctx context.Context, channels []string) *subConn {
	c := &subConn{}
	if !s.sharded {
		c.ps = s.l.client.Subscribe(ctx, channels...)
	} else {
		c.ps = s.l.client.SSubscribe(ctx, channels...)
		if s.cluster {
			// When go-redis connects again by itself, it picks the
			// node by the classic channels alone: one of this slot's
			// keeps it on the node that serves the slot. Nothing is
			// published on it.
			_ = c.ps.Subscribe(ctx, channels[0])
		}
	}
	go s.read(c)
	return c
}

// replace asks serve to replace c after pause, unless the subscriber
// closes first.
func (s *subscriber) replace(c *subConn, pause time.Duration) {
	if pause > 0 {
		time.Sleep(pause)
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.l.subs[s.group] == s {
		s.request(subRequest{op: opReconnect, conn: c})
	}
}

// read dispatches what connection c receives until c is closed, or until
// it fails: then it asks serve for a new connection, whose confirmations
// make the waiters ask Redis again, for grants published while c was
// down. A connection that does not answer a PING in time has failed. A
// subscription that Redis refuses ends the subscriber: see
// Locker.pubsubRefused.
func (s *subscriber) read(c *subConn) {
	ctx := context.Background()
	confirmation, dropped := "subscribe", "unsubscribe"
	if s.sharded {
		confirmation, dropped = "ssubscribe", "sunsubscribe"
	}
	var pinged time.Time // when an unanswered PING was sent; zero when none
	pause := time.Duration(0)
	for {
		wait := pingAfter
		if !pinged.IsZero() {
			wait = max(time.Until(pinged.Add(pongWithin)), time.Millisecond)
		}
		msg, err := c.ps.ReceiveTimeout(ctx, wait)
		switch {
		case err == nil:
			pinged, pause = time.Time{}, 0
		case errors.Is(err, redis.ErrClosed):
			return // closed by serve
		case isTimeout(err) && pinged.IsZero():
			if err := c.ps.Ping(ctx); err != nil {
				s.replace(c, 0)
				return
			}
			pinged = time.Now()
			continue
		case isTimeout(err) && time.Since(pinged) < pongWithin:
			continue
		case isTimeout(err):
			s.l.debug("fencedlock: pub/sub connection did not answer a PING: replacing it", "within", pongWithin)
			s.replace(c, 0)
			return
		case isNoPerm(err):
			s.l.pubsubRefused(strings.ToUpper(confirmation)+" or PING on the pub/sub connection", err)
			s.l.dropSubscriber(s)
			return
		default:
			// A broken connection, or an error reply (LOADING, MOVED
			// after a slot moved...): connect again, after a pause that
			// grows while it goes on failing.
			pause = min(max(2*pause, minReconnectPause), maxReconnectPause)
			if cc, ok := s.l.client.(*redis.ClusterClient); ok {
				cc.ReloadState(ctx)
			}
			s.replace(c, pause)
			return
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case confirmation:
				s.l.confirmed(s, m.Channel)
			case dropped:
				// Redis dropped a subscription this Locker still wants
				// (the slot moved to another node): subscribe again, on
				// the slot's new owner.
				if s.l.wanted(s, m.Channel) {
					if cc, ok := s.l.client.(*redis.ClusterClient); ok {
						cc.ReloadState(ctx)
					}
					s.replace(c, minReconnectPause)
					return
				}
			}
		case *redis.Message:
			if owner, token, ok := parseGrant(m.Payload); ok {
				s.l.published(s, m.Channel, owner, token)
			}
		}
	}
}

// isTimeout reports whether err is a read that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isNoPerm reports whether err is Redis's refusal of a command, key or
// channel to the connection's ACL user.
func isNoPerm(err error) bool {
	return isServerError(err) && redis.HasErrorPrefix(err, "NOPERM")
}

// wanted reports whether channel is one that s is asked to keep.
func (l *Locker) wanted(s *subscriber, channel string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return s.channels[channel] != nil && l.subs[s.group] == s
}

// dropSubscriber ends s, whose subscription Redis refused: its waiters
// rely on their timers, and no subscription is made for
// pubsubRetryAfter.
func (l *Locker) dropSubscriber(s *subscriber) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pubsub, l.pubsubAsked = pubsubRefused, time.Now()
	if l.subs[s.group] != s {
		return
	}
	delete(l.subs, s.group)
	for _, q := range s.channels {
		if q.sub == s {
			q.sub = nil
			if pending(q.ready) != nil {
				close(q.ready)
			}
		}
	}
	s.request(subRequest{op: opClose})
}

// pending returns ready if it is still open, else nil.
func pending(ready chan struct{}) <-chan struct{} {
	select {
	case <-ready:
		return nil
	default:
		return ready
	}
}

// pubsubKind is the kind of pub/sub a Redis server has, as far as a
// Locker knows.
type pubsubKind int8

const (
	pubsubUnknown pubsubKind = iota // not known yet
	pubsubSharded                   // SSUBSCRIBE (Redis 7 and later)
	pubsubClassic                   // SUBSCRIBE only
	pubsubRefused                   // Redis refused the probe or a subscription (ACL)
)

// probe finds out whether Redis has sharded pub/sub, which the scripts
// use where they can, and remembers it; pubsubUnknown when Redis could
// not tell (it is asked again next time), pubsubRefused when Redis
// refused (it is asked again after pubsubRetryAfter).
func (l *Locker) probe(ctx context.Context) pubsubKind {
	l.mu.Lock()
	if l.pubsub == pubsubRefused && time.Since(l.pubsubAsked) < pubsubRetryAfter {
		l.mu.Unlock()
		return pubsubRefused
	}
	l.mu.Unlock()
	_, err := bounded(ctx, func(ctx context.Context) (any, error) {
		return l.client.Do(ctx, "PUBSUB", "SHARDNUMSUB").Result()
	})
	var mode pubsubKind
	switch {
	case err == nil:
		mode = pubsubSharded
	case isNoPerm(err):
		l.pubsubRefused("PUBSUB SHARDNUMSUB", err)
		mode = pubsubRefused
	case isServerError(err) && strings.Contains(strings.ToLower(err.Error()), "unknown"):
		// "unknown subcommand" (Redis before 7) or "unknown command"
		mode = pubsubClassic
	default:
		return pubsubUnknown
	}
	l.mu.Lock()
	l.pubsub, l.pubsubAsked = mode, time.Now()
	l.mu.Unlock()
	return mode
}

// aclDocs is where the commands, keys and channels a Locker needs are
// listed.
const aclDocs = "https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md#acl"

// pubsubRefused logs, once per Locker, that Redis refused what (a
// publish, the probe or a subscription) to its user, with err when
// there is one: waiters then learn of hand-overs by their timers, late
// by up to their retry delay.
func (l *Locker) pubsubRefused(what string, err error) {
	if l.logger == nil || !l.warnedPubSub.CompareAndSwap(false, true) {
		return
	}
	attrs := []any{"refused", what, "acl", aclDocs}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	l.logger.Warn("fencedlock: Redis refused pub/sub to this user: waiters fall back to their timers (see the ACL section)", attrs...)
}

// confirmed records the confirmation of a subscription to channel. The
// first releases the waiter that asked for it; a later one (after a
// reconnect) makes the first waiter ask Redis again.
func (l *Locker) confirmed(s *subscriber, channel string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := s.channels[channel]
	if q == nil || q.sub != s {
		return
	}
	select {
	case <-q.ready:
		if len(q.waiters) > 0 {
			q.waiters[0].nudge()
		}
	default:
		close(q.ready)
	}
}

// published delivers a grant published on channel.
func (l *Locker) published(s *subscriber, channel, owner string, token Token) {
	l.mu.Lock()
	q := s.channels[channel]
	l.mu.Unlock()
	if q != nil {
		l.handedOn(q.resource, owner, token)
	}
}

// unsubscribe drops q, which has stayed empty since its idle timer of
// generation gen was set, and its subscription; the last channel of a
// subscriber closes it.
func (l *Locker) unsubscribe(q *waitQueue, gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q.idle == nil || q.idleGen != gen || len(q.waiters) > 0 {
		return
	}
	q.idle = nil
	if l.queues[q.resource] == q {
		delete(l.queues, q.resource)
	}
	s := q.sub
	if s == nil { // its subscription was refused
		return
	}
	delete(s.channels, q.channel)
	if l.subs[s.group] != s {
		return
	}
	if len(s.channels) == 0 {
		delete(l.subs, s.group)
		s.request(subRequest{op: opClose})
		return
	}
	s.request(subRequest{channel: q.channel, op: opUnsubscribe})
}

// hashSlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of
// its hash tag, or of the whole key when it has none, modulo 16384.
func hashSlot(key string) uint16 { return crc16Slot(hashedPart(key)) }

// hashedPart returns the part of key that Redis Cluster hashes: the text
// between the first "{" and the next "}" when it is not empty, else the
// whole key.
func hashedPart(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// crc16Slot returns CRC16 (XMODEM) of s modulo 16384.
func crc16Slot(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
