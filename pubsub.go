package fencedlock

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriptionLinger is how long a resource's channel stays subscribed
// after its last local waiter left, so that waiting for it again soon
// costs no new subscription.
var subscriptionLinger = time.Second

// subscriber is one pub/sub connection of a Locker, shared by all its
// waiters (on Redis Cluster with sharded pub/sub, by the waiters whose
// resources hash to one slot). It lives while a channel is subscribed.
//
// One goroutine owns the connection (see serve): waiters never send on it
// themselves, so that a slow or stalled Redis holds up no waiter, only
// the subscriptions, which waiters do not wait for beyond their ctx and
// their fallback timer. Requests reach it in the order the Locker decided
// on them, under the Locker's mu.
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
// channel, unsubscribe from it, or close the connection for good.
type subRequest struct {
	channel string
	op      subOp
}

// subOp is what a subRequest asks for.
type subOp int8

const (
	opSubscribe subOp = iota
	opUnsubscribe
	opClose
)

// subscribe makes sure that q's channel is subscribed, and returns a
// channel closed once the subscription is confirmed; nil when it is
// already, or when the Locker cannot tell which kind of pub/sub Redis has.
func (l *Locker) subscribe(ctx context.Context, q *waitQueue) <-chan struct{} {
	l.mu.Lock()
	mode := l.pubsub
	if q.sub != nil || mode == pubsubUnknown {
		sub, ready := q.sub, q.ready
		l.mu.Unlock()
		if sub != nil {
			return pending(ready)
		}
		if mode = l.probe(ctx); mode == pubsubUnknown {
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
	s.request(subRequest{q.channel, opSubscribe})
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
// it, in order, until it has closed the connection. An error from a
// subscribe or unsubscribe is a broken connection: the client connects
// again and subscribes to every channel it was asked for.
func (s *subscriber) serve() {
	ctx := context.Background()
	var ps *redis.PubSub
	for range s.wake {
		s.l.mu.Lock()
		todo := s.todo
		s.todo = nil
		s.l.mu.Unlock()
		for _, r := range todo {
			switch {
			case r.op == opClose:
				if ps != nil {
					_ = ps.Close()
				}
				return
			case ps == nil && r.op == opSubscribe:
				ps = s.open(ctx, r.channel)
			case ps == nil:
			case r.op == opSubscribe && s.sharded:
				_ = ps.SSubscribe(ctx, r.channel)
			case r.op == opSubscribe:
				_ = ps.Subscribe(ctx, r.channel)
			case s.sharded:
				_ = ps.SUnsubscribe(ctx, r.channel)
			default:
				_ = ps.Unsubscribe(ctx, r.channel)
			}
		}
	}
}

// open makes the subscriber's connection, subscribed to channel, and
// starts dispatching what it receives.
func (s *subscriber) open(ctx context.Context, channel string) *redis.PubSub {
	var ps *redis.PubSub
	if !s.sharded {
		ps = s.l.client.Subscribe(ctx, channel)
	} else {
		ps = s.l.client.SSubscribe(ctx, channel)
		if s.cluster {
			// When it reconnects, the client picks the node by the
			// classic channels alone: one of this slot's keeps it on the
			// node that serves the slot. Nothing is published on it.
			_ = ps.Subscribe(ctx, channel)
		}
	}
	go s.run(ps.ChannelWithSubscriptions())
	return ps
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
)

// probe finds out whether Redis has sharded pub/sub, which the scripts
// use where they can, and remembers it; pubsubUnknown when Redis could
// not tell (it is asked again next time).
func (l *Locker) probe(ctx context.Context) pubsubKind {
	_, err := bounded(ctx, func(ctx context.Context) (any, error) {
		return l.client.Do(ctx, "PUBSUB", "SHARDNUMSUB").Result()
	})
	var mode pubsubKind
	switch {
	case err == nil:
		mode = pubsubSharded
	case isServerError(err) && strings.Contains(strings.ToLower(err.Error()), "unknown"):
		// "unknown subcommand" (Redis before 7) or "unknown command"
		mode = pubsubClassic
	default:
		return pubsubUnknown
	}
	l.mu.Lock()
	l.pubsub = mode
	l.mu.Unlock()
	return mode
}

// run dispatches what the subscription receives until it is closed. The
// client reconnects a broken connection and subscribes again; the
// confirmations it then receives make the waiters ask Redis again, for
// grants published while the connection was down.
func (s *subscriber) run(msgs <-chan any) {
	confirmation := "subscribe"
	if s.sharded {
		confirmation = "ssubscribe"
	}
	for msg := range msgs {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == confirmation {
				s.l.confirmed(s, m.Channel)
			}
		case *redis.Message:
			if owner, token, ok := parseGrant(m.Payload); ok {
				s.l.published(s, m.Channel, owner, token)
			}
		}
	}
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
	delete(s.channels, q.channel)
	if len(s.channels) == 0 {
		delete(l.subs, s.group)
		s.request(subRequest{op: opClose})
		return
	}
	s.request(subRequest{q.channel, opUnsubscribe})
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
