package fencedlock

import (
	"context"
	"strings"
	"sync"
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
// Its subscribe and unsubscribe commands go out in the order the Locker
// decided on them, under the Locker's mu, but are sent without holding
// it: each takes a ticket under the Locker's mu and waits for its turn.
type subscriber struct {
	l        *Locker
	group    uint16
	sharded  bool
	cluster  bool
	channels map[string]*waitQueue // guarded by l.mu
	tickets  uint64                // guarded by l.mu: tickets handed out

	mu      sync.Mutex // guards the fields below; held while a command is sent
	turn    sync.Cond  // signalled when serving changes
	serving uint64     // the ticket whose command goes next
	ps      *redis.PubSub
	closed  bool
}

// subscribe makes sure that q's channel is subscribed, and returns a
// channel closed once the subscription is confirmed; nil when it is
// already, or when the Locker cannot tell which kind of pub/sub Redis has.
func (l *Locker) subscribe(ctx context.Context, q *waitQueue) <-chan struct{} {
	l.mu.Lock()
	mode := l.sharded
	if q.sub != nil || mode == 0 {
		sub, ready := q.sub, q.ready
		l.mu.Unlock()
		if sub != nil {
			return pending(ready)
		}
		if mode = l.probe(ctx); mode == 0 {
			return nil
		}
		l.mu.Lock()
		if q.sub != nil {
			ready := q.ready
			l.mu.Unlock()
			return pending(ready)
		}
	}
	_, cluster := l.client.(*redis.ClusterClient)
	var group uint16
	if cluster && mode > 0 {
		group = hashSlot(q.channel)
	}
	if l.subs == nil {
		l.subs = make(map[uint16]*subscriber)
	}
	s := l.subs[group]
	if s == nil {
		s = &subscriber{l: l, group: group, sharded: mode > 0, cluster: cluster, channels: make(map[string]*waitQueue)}
		s.turn.L = &s.mu
		l.subs[group] = s
	}
	s.channels[q.channel] = q
	q.sub = s
	q.ready = make(chan struct{})
	ready := q.ready
	ticket := s.tickets
	s.tickets++
	l.mu.Unlock()
	s.send(ticket, func() {
		if s.ps == nil {
			s.open(q.channel)
			return
		}
		// An error here is a broken connection: the client connects
		// again and subscribes to every channel it was asked for.
		if s.sharded {
			_ = s.ps.SSubscribe(context.Background(), q.channel)
		} else {
			_ = s.ps.Subscribe(context.Background(), q.channel)
		}
	})
	return ready
}

// send runs fn, which sends a command, in the turn of ticket.
func (s *subscriber) send(ticket uint64, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.serving != ticket {
		s.turn.Wait()
	}
	if !s.closed {
		fn()
	}
	s.serving++
	s.turn.Broadcast()
}

// open makes the subscriber's connection, subscribed to channel, and
// starts dispatching what it receives. s.mu is held.
func (s *subscriber) open(channel string) {
	ctx := context.Background()
	if !s.sharded {
		s.ps = s.l.client.Subscribe(ctx, channel)
	} else {
		s.ps = s.l.client.SSubscribe(ctx, channel)
		if s.cluster {
			// When it reconnects, the client picks the node by the
			// classic channels alone: one of this slot's keeps it on the
			// node that serves the slot. Nothing is published on it.
			_ = s.ps.Subscribe(ctx, channel)
		}
	}
	go s.run(s.ps.ChannelWithSubscriptions())
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

// probe finds out whether Redis has sharded pub/sub (Redis 7 and later),
// which the scripts use where they can, and remembers it: it returns 1 if
// so, -1 if not, 0 if Redis could not tell (it is asked again next time).
func (l *Locker) probe(ctx context.Context) int8 {
	err := l.client.Do(ctx, "PUBSUB", "SHARDNUMSUB").Err()
	var mode int8
	switch {
	case err == nil:
		mode = 1
	case isServerError(err) && strings.Contains(strings.ToLower(err.Error()), "unknown"):
		// "unknown subcommand" (Redis before 7) or "unknown command"
		mode = -1
	default:
		return 0
	}
	l.mu.Lock()
	l.sharded = mode
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
	if q.idle == nil || q.idleGen != gen || len(q.waiters) > 0 {
		l.mu.Unlock()
		return
	}
	q.idle = nil
	if l.queues[q.resource] == q {
		delete(l.queues, q.resource)
	}
	s := q.sub
	delete(s.channels, q.channel)
	last := len(s.channels) == 0
	if last {
		delete(l.subs, s.group)
	}
	ticket := s.tickets
	s.tickets++
	l.mu.Unlock()
	s.send(ticket, func() {
		switch {
		case last:
			s.closed = true
			_ = s.ps.Close()
		case s.sharded:
			_ = s.ps.SUnsubscribe(context.Background(), q.channel)
		default:
			_ = s.ps.Unsubscribe(context.Background(), q.channel)
		}
	})
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
