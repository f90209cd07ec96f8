package election

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
)

const (
	// Observe reads the leader every third of the TTL, kept between
	// minPoll and maxPoll, while it has no subscription, and
	// subscribedPolls times less often while it has one.
	minPoll         = 100 * time.Millisecond
	maxPoll         = time.Second
	subscribedPolls = 5
	// pollTimeout bounds each of those reads.
	pollTimeout = time.Second
	// pingAfter is how long a subscription stays silent before Observe
	// pings it; pongWait is how long it then waits for any reply, and for
	// the confirmation of a new subscription, before it gives the
	// connection up as stalled.
	pingAfter = time.Second
	pongWait  = 2 * time.Second
	// refusedPause is how long Observe waits before it subscribes again
	// after Redis refused a subscription (a user without pub/sub).
	refusedPause = time.Minute
)

// Observe returns a channel that delivers the current leader first, if
// there is one, then each new leader in order of election; it is closed
// when ctx ends (or at once for an Election that New found invalid).
// Receive from it promptly: a leader not yet received when a later one is
// elected is skipped. Observe delivers leaders with their values only: a
// term whose leader record is missing (see Leader) is delivered once the
// record is written.
//
// Observe returns at once. Its goroutines read the current leader and
// subscribe to the election's pub/sub channel, where Campaign announces
// each new leader; they read the leader again once the subscription is
// confirmed, as after every new subscription, so that a leader elected
// meanwhile is not missed, though one whose term began and ended
// meanwhile may be. A subscription silent for a second is pinged, and
// given up when no reply comes within two more. While there is no
// subscription (Redis refused it, as it does for a user without pub/sub
// permission, or its connection broke or stalled), Observe reads the
// leader every third of the election's TTL, kept between 100ms and 1s,
// each read the one round trip of Leader, and subscribes again after a
// pause that grows from 100ms to 5s, or of a minute after a refusal.
// While subscribed, it still reads the leader five times less often: a
// candidate whose ACL user may not publish is elected all the same, and
// only a read tells of it. Its
// goroutines end when ctx ends, or, when one is connecting to Redis,
// once the client's dial or read timeout ends the attempt.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	if e.ready() != nil {
		close(out)
		return out
	}
	events := make(chan subEvent)
	go e.watch(ctx, events)
	go e.deliver(ctx, events, out)
	return out
}

// subEvent is what Observe's subscription tells its delivery loop.
type subEvent struct {
	kind   subKind
	leader Leader // of a subMessage
}

// subKind is the kind of a subEvent.
type subKind int8

const (
	subUp      subKind = iota // subscribed (again): read the leader
	subDown                   // no longer subscribed: poll
	subMessage                // a leader was announced
)

// deliver is Observe's delivery loop: it offers out the newest leader not
// yet delivered, while it takes the subscription's events and reads the
// leader: every poll interval while there is no subscription, once after
// each new one, and every subscribedPolls intervals while it lasts.
func (e *Election) deliver(ctx context.Context, events <-chan subEvent, out chan<- Leader) {
	defer close(out)
	every := min(max(e.ttl/3, minPoll), maxPoll)
	var (
		last       fencedlock.Token
		pending    Leader
		subscribed bool // a subscription is confirmed
		read       = time.NewTimer(0)
	)
	defer read.Stop()
	for {
		var send chan<- Leader
		if pending.Token > last {
			send = out
		}
		select {
		case <-ctx.Done():
			return
		case send <- pending:
			last = pending.Token
		case ev := <-events:
			switch ev.kind {
			case subMessage:
				if ev.leader.Token > pending.Token {
					pending = ev.leader
				}
			case subUp, subDown:
				// Read now: a leader may have been elected while no
				// subscription was there to hear it.
				subscribed = ev.kind == subUp
				resetTimer(read, 0)
			}
		case <-read.C:
			rctx, cancel := context.WithTimeout(ctx, pollTimeout)
			l, recorded, err := e.lookup(rctx)
			cancel()
			if recorded && l.Token > pending.Token {
				pending = l
			}
			fresh := subscribed && (err == nil || errors.Is(err, ErrNoLeader))
			if fresh {
				// A leader whose candidate may not publish is heard of
				// only by a read.
				read.Reset(subscribedPolls * every)
			} else {
				read.Reset(every)
			}
		}
	}
}

// resetTimer makes t fire after d, whether or not it fired and was
// received from.
func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}

// watch is Observe's subscription goroutine: it subscribes to the
// election's channel and tells deliver what it hears, until ctx ends,
// subscribing again after a refusal, a broken or a stalled connection.
func (e *Election) watch(ctx context.Context, events chan<- subEvent) {
	wait := minRetry
	for {
		up, refused := e.listen(ctx, events)
		if ctx.Err() != nil {
			return
		}
		if up && !tell(ctx, events, subEvent{kind: subDown}) {
			return
		}
		pause := wait
		switch {
		case refused:
			pause = refusedPause
		case up:
			wait, pause = minRetry, minRetry
		default:
			wait = min(2*wait, maxRetry)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// listen makes one subscription and reads from it until it fails, stalls,
// is refused, or ctx ends. It reports whether the subscription was
// confirmed, and whether Redis refused it.
func (e *Election) listen(ctx context.Context, events chan<- subEvent) (up, refused bool) {
	ps := e.client.Subscribe(ctx) // no channel yet: sends nothing
	defer ps.Close()
	// Closing the connection ends a read that waits for a reply.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	if err := ps.Subscribe(ctx, e.channel); err != nil {
		return false, false
	}
	// Until a reply comes: the confirmation, then a ping's.
	awaiting := time.Now().Add(pongWait)
	for {
		timeout := pingAfter
		if !awaiting.IsZero() {
			if timeout = time.Until(awaiting); timeout <= 0 {
				return up, false // stalled
			}
		}
		msg, err := ps.ReceiveTimeout(ctx, timeout)
		var re redis.Error
		switch {
		case ctx.Err() != nil:
			return up, false
		case err == nil:
		case errors.As(err, &re):
			// An error reply: the subscription refused (NOPERM).
			return up, true
		case timedOut(err) && awaiting.IsZero():
			// Silent for pingAfter: a reply to the ping shows the
			// connection alive.
			if ps.Ping(ctx) != nil {
				return up, false
			}
			awaiting = time.Now().Add(pongWait)
			continue
		default:
			// Broken, or no reply within pongWait: stalled.
			return up, false
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == e.channel {
				up = true
				if !tell(ctx, events, subEvent{kind: subUp}) {
					return up, false
				}
			}
		case *redis.Message:
			if l, ok := parseRecord(m.Payload); ok {
				if !tell(ctx, events, subEvent{kind: subMessage, leader: l}) {
					return up, false
				}
			}
		}
		if up {
			// Any reply shows the connection alive. Until the
			// confirmation, its deadline stands.
			awaiting = time.Time{}
		}
	}
}

// tell sends ev to deliver; false when ctx ended first.
func tell(ctx context.Context, events chan<- subEvent, ev subEvent) bool {
	select {
	case events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// timedOut reports whether err is a read that hit its deadline.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
