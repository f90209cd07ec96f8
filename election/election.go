package election

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/names"
	"github.com/fencedlock/fencedlock/internal/script"
	"github.com/fencedlock/fencedlock/internal/withdraw"
	"github.com/fencedlock/fencedlock/observe"
)

// DefaultTTL is the leader's lease when no WithTTL is given.
const DefaultTTL = 15 * time.Second

// MaxValueLen is the longest value a candidate may campaign with, in
// bytes.
const MaxValueLen = 4096

// ErrNoLeader is Leader's error when the election has no leader.
var ErrNoLeader = errors.New("election: no leader")

const (
	// recordLife is how long a leader record lives past its last
	// extension: a record outlives its term, so that Leader and Observe
	// read the value while the term lasts, and expires once the election
	// has been idle.
	recordLife = fencedlock.DefaultIdleExpiry
	// resignTimeout bounds a resignation that Run makes after its ctx
	// ended.
	resignTimeout = time.Second
	// Run's pause between failed campaigns grows from minRetry to
	// maxRetry.
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
)

// extendEvery is how often, at most, a term extends its leader record's
// life: keep extends it once less than recordLife-extendEvery is left.
const extendEvery = time.Hour

// The election's scripts, each a whole file whose header gives its keys,
// arguments and replies; the replies are decoded below, with their
// statuses named as in the scripts.
var (
	//go:embed announce.lua
	announceLua    string
	announceScript = script.New(announceLua) // decodeAnnounce
	//go:embed leader.lua
	leaderLua    string
	leaderScript = script.New(leaderLua) // decodeLeader
	//go:embed keep.lua
	keepLua    string
	keepScript = script.New(keepLua) // decodeKeep
	//go:embed forget.lua
	forgetLua    string
	forgetScript = script.New(forgetLua) // FORGOTTEN (1) or KEPT (0)
)

// announceReply is the reply of announce.lua.
type announceReply int64

const (
	announceLost        announceReply = 0 // LOST: the lock is no longer the term's: nothing written
	announcePublished   announceReply = 1 // PUBLISHED: recorded and published
	announceUnpublished announceReply = 2 // UNPUBLISHED: recorded; Redis refused the message
)

// decodeAnnounce decodes the reply of announce.lua: LOST, PUBLISHED or
// UNPUBLISHED.
func decodeAnnounce(n int64) (announceReply, error) {
	switch r := announceReply(n); r {
	case announceLost, announcePublished, announceUnpublished:
		return r, nil
	}
	return 0, fmt.Errorf("unexpected reply %d", n)
}

// keepReply is the reply of keep.lua.
type keepReply int64

const (
	keepLost        keepReply = 0 // LOST: the lock is no longer the term's: nothing written
	keepKept        keepReply = 1 // KEPT: the record is the term's
	keepPublished   keepReply = 2 // PUBLISHED: the record written again, and published
	keepUnpublished keepReply = 3 // UNPUBLISHED: written again; Redis refused the message
)

// decodeKeep decodes the reply of keep.lua: LOST, KEPT, PUBLISHED or
// UNPUBLISHED.
func decodeKeep(n int64) (keepReply, error) {
	switch r := keepReply(n); r {
	case keepLost, keepKept, keepPublished, keepUnpublished:
		return r, nil
	}
	return 0, fmt.Errorf("unexpected reply %d", n)
}

// leaderReply is the reply of leader.lua: what the election's keys hold,
// unchecked.
type leaderReply struct {
	lock   string // the lock key's value, "" when missing
	record string // the leader record, "" when missing
}

// decodeLeader decodes the reply of leader.lua: {lock, record}, each
// false when missing.
func decodeLeader(res []any) (leaderReply, error) {
	if len(res) == 2 {
		lock, okLock := res[0].(string)
		record, okRecord := res[1].(string)
		if (okLock || res[0] == nil) && (okRecord || res[1] == nil) {
			return leaderReply{lock: lock, record: record}, nil
		}
	}
	return leaderReply{}, fmt.Errorf("unexpected reply %v", res)
}

// Election is one office, named in Redis, that candidates campaign for
// through their Lockers. It is safe for concurrent use.
type Election struct {
	locker    *fencedlock.Locker
	name      string
	ttl       time.Duration
	heartbeat time.Duration // 0: a third of ttl
	err       error         // why the election cannot work, from New
	client    redis.UniversalClient
	heeds     bool // client ends round trips at ctx deadlines: see call.Heeds
	lockKey   string
	record    string
	channel   string
}

// Option configures an Election in New.
type Option func(*Election)

// WithTTL sets the leader's lease: how long Redis keeps a term after the
// leader's last successful heartbeat. A leader that cannot reach Redis
// learns that its term ended before the lease runs out in Redis, so
// before any other candidate can be elected. At least 3ms; the default is
// DefaultTTL.
func WithTTL(ttl time.Duration) Option {
	return func(e *Election) { e.ttl = ttl }
}

// WithHeartbeat sets how often a leader renews its lease: at least 1ms
// and at most half the TTL. 0, the default, renews at a third of it.
func WithHeartbeat(interval time.Duration) Option {
	return func(e *Election) { e.heartbeat = interval }
}

// New returns the election named name (a resource name of locker:
// candidates of one election use Lockers with the same prefix). It does
// not contact Redis. A nil locker, a bad name or bad options make every
// call return an error wrapping [fencedlock.ErrInvalidArgument] (Observe
// returns a closed channel).
func New(locker *fencedlock.Locker, name string, opts ...Option) *Election {
	e := &Election{locker: locker, name: name, ttl: DefaultTTL}
	for _, opt := range opts {
		if opt != nil {
			opt(e)
		}
	}
	e.err = e.validate()
	if e.err == nil {
		e.client = locker.Client()
		e.heeds = call.Heeds(e.client)
		e.lockKey, _ = locker.Key(name, "lock") // validate checked name
		e.record, _ = locker.Key(name, "leader")
		e.channel, _ = locker.Key(name, "leaders")
	}
	return e
}

func (e *Election) validate() error {
	if e.locker == nil {
		return invalid("nil Locker")
	}
	if _, err := e.locker.Key(e.name, "leader"); err != nil {
		return fmt.Errorf("election %s: %w", names.Quote(e.name), err)
	}
	if e.ttl < 3*time.Millisecond {
		return invalid("TTL %v is below 3ms", e.ttl)
	}
	if e.heartbeat < 0 || e.heartbeat > e.ttl/2 || e.heartbeat > 0 && e.heartbeat < time.Millisecond {
		return invalid("heartbeat %v is not 0 (a third of the TTL) or between 1ms and half the TTL %v", e.heartbeat, e.ttl)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: election: %s", fencedlock.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

func (e *Election) ready() error {
	if e == nil {
		return invalid("nil Election")
	}
	return e.err
}

func checkValue(value string) error {
	if len(value) > MaxValueLen {
		return invalid("value of %d bytes, longer than %d", len(value), MaxValueLen)
	}
	return nil
}

// Term is one leader's time in office. Its token fences every write the
// leader makes: pass Token with each one to a fenced store, which refuses
// the writes of a term that ended once a later one has written.
type Term struct {
	e     *Election
	lock  *fencedlock.Lock
	value string
}

// Token returns the term's fencing token, higher than every earlier
// term's, unless the token counter was lost with the Redis clock behind
// (see the package documentation).
func (t *Term) Token() fencedlock.Token {
	if t == nil {
		return 0
	}
	return t.lock.Token()
}

// Value returns the value the leader campaigned with.
func (t *Term) Value() string {
	if t == nil {
		return ""
	}
	return t.value
}

// Done returns a channel closed when the term ends: resigned, lost, or
// its heartbeat gave up.
func (t *Term) Done() <-chan struct{} {
	if t == nil {
		return (*fencedlock.Lock)(nil).Done()
	}
	return t.lock.Done()
}

// Err returns nil while the term lasts; then [fencedlock.ErrReleased] after
// Resign, or an error matching [fencedlock.ErrLockLost] (with why) when the
// term was lost.
func (t *Term) Err() error {
	if t == nil {
		return invalid("nil Term")
	}
	return t.lock.Err()
}

// Resign ends the term and lets the next candidate in line be elected at
// once. It returns nil when it ended the term, an error matching
// [fencedlock.ErrLockLost] when the term had already ended by loss, one
// matching [fencedlock.ErrReleased] when it was resigned before, and one
// matching [fencedlock.ErrUnavailable] when Redis did not answer: the term then ends
// when its lease runs out, and Resign may be called again.
//
// Once the term has ended, by this call or by loss, Resign also deletes
// the term's leader record, in one more round trip, unless the next
// leader has written its own already: an election left idle keeps no
// record of a leader it no longer has. That deletion is the record's
// tidying only: its failure (ctx ended, Redis gone) leaves the record to
// its expiry or the next leader, and does not change what Resign returns.
func (t *Term) Resign(ctx context.Context) error {
	if t == nil {
		return invalid("nil Term")
	}
	err := t.lock.Release(ctx)
	if err == nil || errors.Is(err, fencedlock.ErrLockLost) {
		t.e.forget(ctx, t.Token())
	}
	return err
}

// forget deletes the leader record of the term with token, if the
// record is still that term's; it is called once the term has ended. A
// failure leaves the record to its expiry, or to the next leader's
// announcement, which overwrites it.
func (e *Election) forget(ctx context.Context, token fencedlock.Token) {
	_, _ = call.Bounded(ctx, e.heeds, func(ctx context.Context) (int64, error) {
		return forgetScript.Run(ctx, e.client, script.Keys(e.record), token.String()).Int64()
	})
}

// keep checks the term's leader record every heartbeat interval while the
// term lasts, in one script call that writes only when it must: it
// extends the record's life once an hour, so that the record outlives the
// term by recordLife, and writes the record again, and publishes it, when
// it was lost.
func (t *Term) keep() {
	e := t.e
	every := e.beat()
	tick := time.NewTicker(every)
	defer tick.Stop()
	keys := script.Keys(e.lockKey, e.record)
	token := t.Token().String()
	for {
		select {
		case <-t.lock.Done():
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), e.ttl)
			n, err := call.Bounded(ctx, e.heeds, func(ctx context.Context) (int64, error) {
				return keepScript.Run(ctx, e.client, keys, token, t.value,
					recordLife.Milliseconds(), (recordLife - extendEvery).Milliseconds(), e.channel).Int64()
			})
			cancel()
			// A term Redis says is over has no record to keep; the lock's
			// heartbeat ends it. A failed check is tried again.
			if err == nil {
				if r, err := decodeKeep(n); err == nil && r == keepLost {
					return
				}
			}
		}
	}
}

// beat returns the heartbeat interval of the election's terms.
func (e *Election) beat() time.Duration {
	if e.heartbeat > 0 {
		return e.heartbeat
	}
	return e.ttl / 3
}

// Campaign waits, first come first served, until this candidate is
// elected with value, or ctx ends. Elected, it returns the Term, which
// its heartbeat keeps until Resign or loss; Leader and Observe then
// report value with the term's token. It announces the leader by writing
// the leader record and publishing it; when Redis refuses the message (a
// user without pub/sub) the record is enough, and Campaign succeeds.
//
// When ctx ends first, the error wraps ctx's error (and
// [fencedlock.ErrNotAcquired]), and the campaign leaves no trace: it is
// never elected later. When Redis cannot be reached the error wraps
// [fencedlock.ErrUnavailable]. An error matching [fencedlock.ErrLockLost]
// means the term ended before it was announced: the candidate holds no
// term and may campaign again. A value longer than [MaxValueLen] is an
// error wrapping [fencedlock.ErrInvalidArgument].
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	if err := checkValue(value); err != nil {
		return nil, err
	}
	lock, err := e.locker.Acquire(ctx, e.name, e.ttl, fencedlock.WithHeartbeat(e.heartbeat), fencedlock.WithCall(observe.CallCampaign))
	if err != nil {
		return nil, fmt.Errorf("election %s: campaign: %w", names.Quote(e.name), err)
	}
	n, err := call.Bounded(ctx, e.heeds, func(ctx context.Context) (int64, error) {
		return announceScript.Run(ctx, e.client, script.Keys(e.lockKey, e.record),
			lock.Token().String(), value, recordLife.Milliseconds(), e.channel).Int64()
	})
	var status announceReply
	if err != nil {
		err = redisErr(ctx, "announcing the leader", err)
	} else if status, err = decodeAnnounce(n); err != nil {
		err = fmt.Errorf("announcing the leader: %w", err)
	}
	// Recorded, the leader is announced, whether or not Redis let the
	// message be published: Leader and Observe's polling read the record.
	if err == nil && (status == announcePublished || status == announceUnpublished) {
		t := &Term{e: e, lock: lock, value: value}
		go t.keep()
		return t, nil
	}
	// Not announced: the term ends here, and the next candidate is
	// elected.
	if err == nil { // announceLost
		err = fmt.Errorf("%w: the term ended before it was announced", fencedlock.ErrLockLost)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resignTimeout)
	defer cancel()
	rerr := lock.Release(rctx)
	if rerr != nil && !errors.Is(rerr, fencedlock.ErrLockLost) {
		err = fmt.Errorf("%w (and resigning failed, so the term ends with its lease: %v)", err, rerr)
	} else {
		// An announcement whose reply did not come may have written
		// the record.
		e.forget(rctx, lock.Token())
		if cerr := call.Err(ctx); cerr != nil {
			// ctx ended between the grant and the announcement, and
			// the grant is released: not elected, as if ctx had ended
			// while the campaign waited.
			return nil, fmt.Errorf("election %s: campaign: %w: the context ended before the leader was announced (%v): %w", names.Quote(e.name), fencedlock.ErrNotAcquired, err, cerr)
		}
	}
	if cerr := call.Err(ctx); cerr != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", err, cerr)
	}
	return nil, fmt.Errorf("election %s: campaign: %w", names.Quote(e.name), err)
}

// Leader is an elected candidate: the value it campaigned with and its
// term's token.
type Leader struct {
	Value string
	Token fencedlock.Token
}

// Leader returns the current leader, in one read-only round trip, or an
// error wrapping [ErrNoLeader] when the office is vacant
// ([fencedlock.ErrUnavailable] when Redis cannot answer,
// [fencedlock.ErrCorrupt] when the election's keys hold what it did not
// write). It is a snapshot: the leader may change right after.
//
// The value comes from the leader record, which Campaign writes once its
// candidate is elected. While the office is held but its record is not
// the term's, Leader returns the term's token with an empty Value: from
// the grant until its Campaign has written the record, and after the
// record was lost (deleted, evicted) until the term writes it again,
// which it does within a heartbeat interval. Observe delivers leaders
// with their values only.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.ready(); err != nil {
		return Leader{}, err
	}
	l, _, err := e.lookup(ctx)
	return l, err
}

// lookup reads the leader: the lock's holder, and its value when the
// record is the holder's (recorded).
func (e *Election) lookup(ctx context.Context) (l Leader, recorded bool, err error) {
	res, err := call.Bounded(ctx, e.heeds, func(ctx context.Context) ([]any, error) {
		return leaderScript.Run(ctx, e.client, script.Keys(e.lockKey, e.record)).Slice()
	})
	if err != nil {
		return Leader{}, false, fmt.Errorf("election %s: leader: %w", names.Quote(e.name), redisErr(ctx, "reading the leader", err))
	}
	r, err := decodeLeader(res)
	if err != nil {
		return Leader{}, false, fmt.Errorf("election %s: leader: %w", names.Quote(e.name), err)
	}
	held, record := r.lock, r.record
	if held == "" {
		return Leader{}, false, fmt.Errorf("%w: election %s", ErrNoLeader, names.Quote(e.name))
	}
	// The lock holds "<owner nonce>:<token>".
	i := strings.LastIndexByte(held, ':')
	token, perr := fencedlock.ParseToken(held[i+1:])
	if i < 0 || perr != nil {
		return Leader{}, false, fmt.Errorf("%w: election %s: the lock holds %q, not a grant", fencedlock.ErrCorrupt, names.Quote(e.name), held)
	}
	if r, ok := parseRecord(record); ok && r.Token == token {
		return r, true, nil
	}
	return Leader{Token: token}, false, nil
}

// parseRecord splits a leader record or message, "<token>:<value>".
func parseRecord(s string) (Leader, bool) {
	tok, value, ok := strings.Cut(s, ":")
	if !ok {
		return Leader{}, false
	}
	n, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || n == 0 {
		return Leader{}, false
	}
	return Leader{Value: value, Token: fencedlock.Token(n)}, true
}

// Run campaigns with value and, each time it is elected, runs fn with the
// term, then resigns if still leader and campaigns again. It returns when
// ctx ends, with ctx's error (wrapped with its cause, if it was cancelled
// with one), or when fn returns an error while its term
// lasts, with that error (after resigning). A nil fn or a value longer
// than MaxValueLen returns an error wrapping
// [fencedlock.ErrInvalidArgument] at once.
//
// fn's ctx is cancelled when the term ends, with a cause matching
// [fencedlock.ErrLockLost] when it was lost (read it with
// [context.Cause]). fn must stop when it is: the term's token keeps a
// fenced store safe from its late writes, but nothing else is. An fn that
// returns because its term ended does not stop Run: it campaigns again,
// having deleted the term's key if the term's lease ran out by the local
// clock while Redis still kept the key for it (a refresh answered too
// late), so that the office is not held, by nobody, until it expires.
// So does an fn whose error matches [fencedlock.ErrStaleToken]: a store
// holds a later term's write, so this term is over even if its heartbeat
// has not yet found out. Run then pauses before it campaigns again, as
// after a failed campaign: a store fenced above every token the Locker
// hands out (its counter was lost; see [fencedlock.Locker.Advance])
// refuses every term, one per pause of up to 5s, until it is advanced.
//
// A campaign that fails because Redis cannot be reached or cannot answer
// ([fencedlock.ErrUnavailable]: no connection, no reply in time, a
// restart or failover under way, out of memory), or whose grant was lost
// or not confirmed by replicas, is tried again after a pause that grows
// to 5s. Any other campaign error is returned, and so are Redis's
// refusal of the client's credentials (a wrong password, none given, one
// given to a server without) or of a command to its ACL user, a closed
// client's error, and a Cluster's redirect (MOVED) to a client other
// than a *redis.ClusterClient, though they match
// [fencedlock.ErrUnavailable] too: no pause ends them.
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context, term *Term) error) error {
	if err := e.ready(); err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil fn")
	}
	if err := checkValue(value); err != nil {
		return err
	}
	wait := minRetry
	for {
		term, err := e.Campaign(ctx, value)
		if err != nil {
			if cerr := call.Err(ctx); cerr != nil {
				return cerr
			}
			if !campaignAgain(e.client, err) {
				return err
			}
		} else {
			stale, err := e.serve(ctx, term, fn)
			if err != nil {
				return err
			}
			if cerr := call.Err(ctx); cerr != nil {
				return cerr
			}
			if !stale {
				wait = minRetry
				continue
			}
			// A store refused the term's token: a later term wrote
			// (the next term's token passes), or the store is fenced
			// above every token the Locker hands out (its counter was
			// lost; see Advance), and then every term is refused.
			// Pausing as after a failed campaign keeps Run from
			// campaigning again without end.
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return call.Err(ctx)
		case <-t.C:
		}
		wait = min(2*wait, maxRetry)
	}
}

// campaignAgain reports whether Run campaigns again after a campaign
// that failed with err: Redis could not be reached or could not answer
// (ErrUnavailable), or the term was lost or not confirmed by replicas
// before it began. Not for Redis's refusal of the client's credentials
// or of a command to its ACL user, nor for a client closed, nor for a
// Cluster redirect (MOVED, ASK) to a client that follows none: they stay
// until an operator (or the program) acts, and campaigning again for
// ever would hide them. Any other ErrUnavailable is tried again: an
// outage, a failover or a full memory may pass, and a client's errors on
// the way, such as a Sentinel client's, are not all known here.
func campaignAgain(client redis.UniversalClient, err error) bool {
	if errors.Is(err, redis.ErrClosed) {
		return false // the client is closed for good
	}
	if call.Redirected(err) && !call.FollowsRedirects(client) {
		return false // a plain client at one node of a Cluster
	}
	if errors.Is(err, fencedlock.ErrUnavailable) {
		return script.Refusal(err, "", "") == nil && !refusedCredentials(err)
	}
	return errors.Is(err, fencedlock.ErrLockLost) || errors.Is(err, fencedlock.ErrNotReplicated)
}

// credentialRefusals start Redis's error replies to a client whose
// credentials it refuses: a wrong password (Redis 6 and later, and
// before), one given to a server that has none (Redis 6 and later, and
// before), none where one is needed (NOAUTH, or, for a command of many
// arguments such as a script's, Redis 7's protocol error before it
// closes the connection), a user that may not run a command.
var credentialRefusals = [...]string{"WRONGPASS", "ERR invalid password", "ERR invalid username-password pair",
	"ERR AUTH", "ERR Client sent AUTH", "NOAUTH", "ERR Protocol error: unauthenticated", "NOPERM"}

// refusedCredentials reports whether err holds one of Redis's
// credentialRefusals.
func refusedCredentials(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, prefix := range credentialRefusals {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// serve runs fn for term, then resigns if the term lasts, or forgets its
// record if it was lost. It returns fn's error when fn failed while the
// term lasted, and whether fn's error said that a store holds a later
// term's write (stale).
func (e *Election) serve(ctx context.Context, term *Term, fn func(context.Context, *Term) error) (stale bool, err error) {
	fnCtx, cancel := context.WithCancelCause(ctx)
	returned := make(chan struct{})
	go func() {
		select {
		case <-term.Done():
			cancel(term.Err())
		case <-returned:
		}
	}()
	defer func() {
		close(returned)
		cancel(context.Canceled)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), resignTimeout)
		defer rcancel()
		switch lerr := term.Err(); {
		case lerr == nil:
			_ = term.Resign(rctx) // failing, the term ends with its lease
		case errors.Is(lerr, fencedlock.ErrLockLost):
			// Lost: nothing to release (and no Release for the
			// Observer to report as failed), but the record to forget,
			// and, if the lease ran out by the local clock, the key to
			// delete should a refresh answered too late have kept it:
			// else the next campaign, this Run's too, would wait for
			// it to expire.
			withdraw.RanOut(rctx, term.lock)
			e.forget(rctx, term.Token())
		}
		// Else resigned by fn, which forgot the record.
	}()
	ferr := fn(fnCtx, term)
	stale = errors.Is(ferr, fencedlock.ErrStaleToken)
	switch {
	case ferr == nil, term.Err() != nil, ctx.Err() != nil:
		return stale, nil
	case stale:
		// A store holds a later term's write: this term is over, though
		// its heartbeat may not know yet.
		return true, nil
	}
	return false, ferr
}

// redisErr is the error of a failed round trip of ctx: ctx's error when
// ctx had ended before anything was sent; the ctx's cause when ctx was
// cancelled with one before Redis answered (the caller, not Redis,
// stopped it); [fencedlock.ErrCorrupt] when a key holds a value of
// another type; else [fencedlock.ErrUnavailable], with the cause (an ACL
// refusal names the refused command).
func redisErr(ctx context.Context, what string, err error) error {
	var ns *call.NotSentError
	if errors.As(err, &ns) {
		return fmt.Errorf("election: %s: nothing sent, the context had ended: %w", what, err)
	}
	if cause := call.Cause(ctx); cause != nil && !call.IsReply(err) {
		return fmt.Errorf("election: %s: stopped before Redis answered: %w", what, call.Err(ctx))
	}
	if strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("%w: %s: %w", fencedlock.ErrCorrupt, what, err)
	}
	if acl := script.Refusal(err, "", ""); acl != nil {
		err = acl
	}
	return fmt.Errorf("%w: %s: %w", fencedlock.ErrUnavailable, what, err)
}
