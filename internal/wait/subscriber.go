package wait

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/script"
	"github.com/fencedlock/fencedlock/internal/slot"
)

// The subscriber's own check of its connection: a connection that has
// received nothing for PingAfter is sent a PING, and one that has not
// answered it within PongWithin is replaced. go-redis does not notice a
// connection that stalls without closing.
var (
	PingAfter  = time.Second
	PongWithin = 2 * time.Second
)

// Pauses between the subscriber's attempts to connect again after an
// error, doubling from the first to the last.
const (
	MinReconnectPause = 10 * time.Millisecond
	MaxReconnectPause = time.Second
)

// refusedFor is how long a Room whose pub/sub Redis refused goes without
// asking again; its waiters rely on their timers meanwhile.
const refusedFor = time.Minute

// kind is the kind of pub/sub a Redis server has, as far as a Room knows.
type kind int8

const (
	unknown kind = iota // not known yet
	sharded             // SSUBSCRIBE (Redis 7 and later)
	classic             // SUBSCRIBE only
	refused             // Redis refused the probe or a subscription (ACL)
)

// subscriber is one pub/sub connection of a Room, shared by all its
// waiters (on Redis Cluster with sharded pub/sub, by the waiters whose
// resources hash to one slot). It lives while a channel is subscribed.
//
// One goroutine owns the connection (see serve): waiters never send on it
// themselves, so that a slow or stalled Redis holds up no waiter, only
// the subscriptions, which waiters do not wait for beyond their ctx and
// their fallback timer. Requests reach it in the order the Room decided
// on them, under the Room's mu. Another goroutine per connection reads
// it (see read), checks that it answers, and asks serve to replace it
// when it does not.
type subscriber struct {
	r        *Room
	group    uint16
	sharded  bool
	cluster  bool
	channels map[string]*queue // guarded by r.mu
	todo     []request         // guarded by r.mu: requests not yet taken by serve
	wake     chan struct{}     // tells serve that todo has requests
	// pause is the pause before the next connection after one failed:
	// it grows from MinReconnectPause to MaxReconnectPause while the
	// connections fail one after another, each read by a goroutine of
	// its own, and goes back to 0 once one delivers something
	pause atomic.Int64
}

// request is a request to a subscriber's goroutine: subscribe to
// channel, unsubscribe from it, replace the connection conn, or close the
// connection for good.
type request struct {
	channel string
	op      op
	conn    *conn // opReplace: the connection to replace
}

// op is what a request asks for.
type op int8

const (
	opSubscribe op = iota
	opUnsubscribe
	opReplace
	opClose
)

// conn is one connection of a subscriber, read by its own goroutine.
type conn struct {
	ps *redis.PubSub
}

// subscribe makes sure that q's channel is subscribed, and returns a
// channel closed once the subscription is confirmed; nil when it is
// already, when the Room cannot tell which kind of pub/sub Redis has, or
// when Redis refused pub/sub: the waiter then relies on its timer.
func (r *Room) subscribe(ctx context.Context, q *queue) <-chan struct{} {
	r.mu.Lock()
	mode := r.pubsub
	if q.sub != nil || mode == unknown || mode == refused {
		sub, ready := q.sub, q.ready
		r.mu.Unlock()
		if sub != nil {
			return pending(ready)
		}
		if mode = r.probe(ctx); mode == unknown || mode == refused {
			return nil
		}
		r.mu.Lock()
		if q.sub != nil {
			ready := q.ready
			r.mu.Unlock()
			return pending(ready)
		}
		// What the Room knows now: an unlearn may have decided since.
		if mode = r.pubsub; mode == unknown || mode == refused {
			r.mu.Unlock()
			return nil
		}
	}
	defer r.mu.Unlock()
	_, cluster := r.client.(*redis.ClusterClient)
	var group uint16
	if cluster && mode == sharded {
		group = slot.Of(q.channel)
	}
	if r.subs == nil {
		r.subs = make(map[uint16]*subscriber)
	}
	s := r.subs[group]
	if s == nil {
		s = &subscriber{r: r, group: group, sharded: mode == sharded, cluster: cluster, channels: make(map[string]*queue), wake: make(chan struct{}, 1)}
		r.subs[group] = s
		go s.serve()
	}
	s.channels[q.channel] = q
	q.sub = s
	q.ready = make(chan struct{})
	s.request(request{channel: q.channel, op: opSubscribe})
	return q.ready
}

// request queues req for the subscriber's goroutine. The Room's mu is
// held.
func (s *subscriber) request(req request) {
	s.todo = append(s.todo, req)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// serve is the subscriber's goroutine: it sends the requests queued for
// it, in order, until it has closed the connection.
func (s *subscriber) serve() {
	ctx := context.Background()
	var c *conn
	for range s.wake {
		s.r.mu.Lock()
		todo := s.todo
		s.todo = nil
		s.r.mu.Unlock()
		for _, req := range todo {
			switch {
			case req.op == opClose:
				if c != nil {
					_ = c.ps.Close()
				}
				return
			case req.op == opReplace:
				if c != req.conn {
					continue // replaced already
				}
				_ = c.ps.Close()
				c = nil
				if channels := s.subscribed(); len(channels) > 0 {
					c = s.open(ctx, channels)
				}
			case c == nil && req.op == opSubscribe:
				c = s.open(ctx, []string{req.channel})
			case c == nil:
			case req.op == opSubscribe && s.sharded:
				_ = c.ps.SSubscribe(ctx, req.channel)
			case req.op == opSubscribe:
				_ = c.ps.Subscribe(ctx, req.channel)
			case s.sharded:
				_ = c.ps.SUnsubscribe(ctx, req.channel)
			default:
				_ = c.ps.Unsubscribe(ctx, req.channel)
			}
		}
	}
}

// subscribed returns the channels the subscriber is asked to keep.
func (s *subscriber) subscribed() []string {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	channels := make([]string, 0, len(s.channels))
	for ch := range s.channels {
		channels = append(channels, ch)
	}
	return channels
}

// open makes a connection of the subscriber, subscribed to channels, and
// starts reading it.
func (s *subscriber) open(ctx context.Context, channels []string) *conn {
	c := &conn{}
	if !s.sharded {
		c.ps = s.r.client.Subscribe(ctx, channels...)
	} else {
		c.ps = s.r.client.SSubscribe(ctx, channels...)
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
func (s *subscriber) replace(c *conn, pause time.Duration) {
	if pause > 0 {
		time.Sleep(pause)
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.r.subs[s.group] == s {
		s.request(request{op: opReplace, conn: c})
	}
}

// read dispatches what connection c receives until c is closed, or until
// it fails: then it asks serve for a new connection, whose confirmations
// make the waiters ask Redis again, for grants published while c was
// down. A connection that does not answer a PING in time has failed. A
// subscription that Redis refuses ends the subscriber: see
// Room.PubSubRefused.
func (s *subscriber) read(c *conn) {
	ctx := context.Background()
	confirmation, dropped := "subscribe", "unsubscribe"
	if s.sharded {
		confirmation, dropped = "ssubscribe", "sunsubscribe"
	}
	var pinged time.Time // when an unanswered PING was sent; zero when none
	for {
		wait := PingAfter
		if !pinged.IsZero() {
			wait = max(time.Until(pinged.Add(PongWithin)), time.Millisecond)
		}
		msg, err := c.ps.ReceiveTimeout(ctx, wait)
		switch {
		case err == nil:
			pinged = time.Time{}
			s.pause.Store(0)
		case errors.Is(err, redis.ErrClosed):
			return // closed by serve
		case isTimeout(err) && pinged.IsZero():
			if err := c.ps.Ping(ctx); err != nil {
				s.replace(c, 0)
				return
			}
			pinged = time.Now()
			continue
		case isTimeout(err) && time.Since(pinged) < PongWithin:
			continue
		case isTimeout(err):
			s.r.debug("fencedlock: pub/sub connection did not answer a PING: replacing it", "within", PongWithin)
			s.replace(c, 0)
			return
		case isNoPerm(err):
			s.r.PubSubRefused(strings.ToUpper(confirmation)+" or PING on the pub/sub connection", err, script.ACLDocs)
			s.r.drop(s)
			return
		case s.sharded && isUnknownCommand(err):
			// A failover to a server without sharded pub/sub.
			s.r.unlearn(s)
			return
		default:
			// A broken connection, or an error reply (LOADING, MOVED
			// after a slot moved...): connect again, after a pause that
			// grows while the connections go on failing (Redis down:
			// each new one fails at once).
			pause := min(max(2*time.Duration(s.pause.Load()), MinReconnectPause), MaxReconnectPause)
			s.pause.Store(int64(pause))
			if cc, ok := s.r.client.(*redis.ClusterClient); ok {
				cc.ReloadState(ctx)
			}
			s.replace(c, pause)
			return
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case confirmation:
				s.r.confirmed(s, m.Channel)
			case dropped:
				// Redis dropped a subscription this Room still wants
				// (the slot moved to another node): subscribe again, on
				// the slot's new owner.
				if s.r.wanted(s, m.Channel) {
					if cc, ok := s.r.client.(*redis.ClusterClient); ok {
						cc.ReloadState(ctx)
					}
					s.replace(c, MinReconnectPause)
					return
				}
			}
		case *redis.Message:
			if owner, token, ok := ParseGrant(m.Payload); ok {
				s.r.published(s, m.Channel, owner, token)
			}
		}
	}
}

// ParseGrant splits the message of a grant, "<owner nonce>:<token>", into
// the owner (with its ':') and the token.
func ParseGrant(msg string) (string, uint64, bool) {
	i := strings.LastIndexByte(msg, ':')
	if i < 0 || i+1 == len(msg) || msg[i+1] < '1' || msg[i+1] > '9' {
		return "", 0, false
	}
	t, err := strconv.ParseUint(msg[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return msg[:i+1], t, true
}

// isTimeout reports whether err is a read that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isNoPerm reports whether err is Redis's refusal of a command, key or
// channel to the connection's ACL user.
func isNoPerm(err error) bool {
	return call.IsReply(err) && redis.HasErrorPrefix(err, "NOPERM")
}

// isUnknownCommand reports whether err is Redis's reply to a command it
// does not have.
func isUnknownCommand(err error) bool {
	return call.IsReply(err) && strings.Contains(strings.ToLower(err.Error()), "unknown command")
}

// wanted reports whether channel is one that s is asked to keep.
func (r *Room) wanted(s *subscriber, channel string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.channels[channel] != nil && r.subs[s.group] == s
}

// drop ends s, whose subscription Redis refused: its waiters rely on
// their timers, and no subscription is made for refusedFor.
func (r *Room) drop(s *subscriber) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs[s.group] != s {
		return // replaced already
	}
	r.pubsub, r.pubsubAsked = refused, time.Now()
	r.end(s, false)
}

// unlearn ends s, whose SSUBSCRIBE the server does not know (a failover
// to an older server, or a node of a cluster half upgraded), and every
// other subscriber of the Room, all sharded: the Room uses classic
// pub/sub from then on, which reaches every server (a release that
// SPUBLISHes to nobody PUBLISHes too). The first waiter of each channel
// is woken to subscribe again.
func (r *Room) unlearn(s *subscriber) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs[s.group] != s {
		return // replaced already
	}
	r.debug("fencedlock: Redis does not know SSUBSCRIBE (a failover to an older server?): subscribing with SUBSCRIBE from now on")
	r.pubsub, r.pubsubAsked = classic, time.Now()
	r.learnt.Store(int32(classic))
	for _, other := range r.subs {
		r.end(other, true)
	}
}

// end takes s out of the Room and closes it. The waiters of its channels
// are released from waiting for its confirmation; with wake, the first
// waiter of each channel is also woken, to subscribe again. The Room's
// mu is held.
func (r *Room) end(s *subscriber, wake bool) {
	delete(r.subs, s.group)
	for _, q := range s.channels {
		if q.sub != s {
			continue
		}
		q.sub = nil
		if pending(q.ready) != nil {
			close(q.ready)
		} else if wake && len(q.waiters) > 0 {
			q.waiters[0].nudge()
		}
	}
	s.request(request{op: opClose})
}

// probe finds out whether Redis has sharded pub/sub, which the scripts
// use where they can, and remembers it; unknown when Redis could not
// tell (it is asked again next time), refused when Redis refused (it is
// asked again after refusedFor).
func (r *Room) probe(ctx context.Context) kind {
	r.mu.Lock()
	if r.pubsub == refused && time.Since(r.pubsubAsked) < refusedFor {
		r.mu.Unlock()
		return refused
	}
	r.mu.Unlock()
	_, err := call.Bounded(ctx, r.heeds, func(ctx context.Context) (any, error) {
		return r.client.Do(ctx, "PUBSUB", "SHARDNUMSUB").Result()
	})
	var mode kind
	switch {
	case err == nil:
		mode = sharded
	case isNoPerm(err):
		r.PubSubRefused("PUBSUB SHARDNUMSUB", err, script.ACLDocs)
		mode = refused
	case call.IsReply(err) && strings.Contains(strings.ToLower(err.Error()), "unknown"):
		// "unknown subcommand" (Redis before 7) or "unknown command"
		mode = classic
	default:
		return unknown
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pubsub != unknown && r.pubsub != refused {
		// Learnt while this probe ran: by another, or by an unlearn,
		// which this probe's answer (from another node, say) must not
		// undo.
		return r.pubsub
	}
	r.pubsub, r.pubsubAsked = mode, time.Now()
	r.learnt.Store(int32(mode))
	return mode
}

// Publish returns how the scripts publish a hand-over, as far as the
// Room has learnt (see probe), boxed for a script's arguments: "sharded"
// (SPUBLISH first), "classic" (PUBLISH first), "" (not known: SPUBLISH
// first), each followed by the other kind when the first reaches nobody;
// or, for a client that may subscribe on replicas, whose subscribers a
// primary's SPUBLISH does not count, "replicas" unless classic
// (SPUBLISH, and PUBLISH only should it fail). See lua/src/lib/publish.lua.
func (r *Room) Publish() any {
	switch k := kind(r.learnt.Load()); {
	case k == classic:
		return publishClassic
	case r.replicas:
		return publishReplicas
	case k == sharded:
		return publishSharded
	}
	return publishUnknown
}

// The values Publish returns, boxed once.
var publishSharded, publishClassic, publishReplicas, publishUnknown any = "sharded", "classic", "replicas", ""

// confirmed records the confirmation of a subscription to channel. The
// first releases the waiter that asked for it; a later one (after a
// reconnect) makes the first waiter ask Redis again.
func (r *Room) confirmed(s *subscriber, channel string) {
	r.mu.Lock()
	defer r.mu.Unlock()
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
func (r *Room) published(s *subscriber, channel, owner string, token uint64) {
	r.mu.Lock()
	q := s.channels[channel]
	r.mu.Unlock()
	if q != nil {
		r.Deliver(q.resource, owner, token, time.Time{})
	}
}

// unsubscribe drops q, which has stayed empty since its idle timer of
// generation gen was set, and its subscription; the last channel of a
// subscriber closes it.
func (r *Room) unsubscribe(q *queue, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q.idle == nil || q.idleGen != gen || len(q.waiters) > 0 {
		return
	}
	q.idle = nil
	if r.queues[q.resource] == q {
		delete(r.queues, q.resource)
	}
	s := q.sub
	if s == nil { // its subscription was refused
		return
	}
	delete(s.channels, q.channel)
	if r.subs[s.group] != s {
		return
	}
	if len(s.channels) == 0 {
		delete(r.subs, s.group)
		s.request(request{op: opClose})
		return
	}
	s.request(request{channel: q.channel, op: opUnsubscribe})
}
