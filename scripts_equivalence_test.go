package fencedlock

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock/internal/luagen"
	"github.com/fencedlock/fencedlock/internal/racetest"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/internal/script"
)

// The states the equivalence test puts a resource's keys in, by name.
var (
	equivLocks = []string{"free", "own", "other", "wrongtype"}
	// queue entries, first to last: own (the caller's), other (another
	// live waiter's), dead (its deadline passed), malformed (no owner and
	// TTL), next (the candidate's: the next waiter of the caller's
	// Locker); "dead" holds no live waiter, "dead next" the candidate
	// alone behind a dead entry
	equivQueues   = []string{"", "own", "other", "dead", "dead own", "dead next", "malformed other", "next", "other next"}
	equivCounters = []string{"missing", "behind", "behind+ttl", "ahead", "ahead+ttl", "far-ahead", "zero", "max", "at-limit", "corrupt", "wrongtype"}
)

// equivState is one state of a resource's keys.
type equivState struct {
	lock, queue, counter string
	marker               bool
}

func (s equivState) String() string {
	return fmt.Sprintf("lock %s, queue [%s], counter %s, marker %v", s.lock, s.queue, s.counter, s.marker)
}

func equivStates(markers bool) []equivState {
	var states []equivState
	for _, lock := range equivLocks {
		for _, queue := range equivQueues {
			for _, counter := range equivCounters {
				states = append(states, equivState{lock: lock, queue: queue, counter: counter})
				if markers {
					states = append(states, equivState{lock: lock, queue: queue, counter: counter, marker: true})
				}
			}
		}
	}
	return states
}

// The caller's owner nonce (its Locker's id, 16 hex digits, and 16
// more) and TTL, its queue entry, and the entry of its Locker's next
// waiter (the release's candidate). Other owners are of other Lockers.
const (
	equivOwner = "aaaaaaaaaaaaaaaa1111111111111111:"
	equivTTL   = "30000"
	equivEntry = equivOwner + equivTTL
	equivNext  = "aaaaaaaaaaaaaaaa3333333333333333:" + equivTTL
	equivOther = "bbbbbbbbbbbbbbbb2222222222222222:"
)

// equivKeys are the five keys of the acquire and release scripts, in
// their order: lock, counter, queue, deadlines, marker.
func equivKeys(prefix string, n int, set string) []string {
	tag := fmt.Sprintf("%s:{%d%s}:", prefix, n, set)
	return []string{tag + "lock", tag + "token", tag + "queue", tag + "deadlines", tag + "abandoned"}
}

// put writes state s into keys, relative to the server clock base.
func (s equivState) put(ctx context.Context, p redis.Pipeliner, keys []string, base time.Time) {
	p.Del(ctx, keys...)
	baseUS, baseMS := base.UnixMicro(), base.UnixMilli()
	switch s.lock {
	case "own":
		p.Set(ctx, keys[0], equivOwner+"777", 20*time.Second)
	case "other":
		p.Set(ctx, keys[0], equivOther+"888", 20*time.Second)
	case "wrongtype":
		p.HSet(ctx, keys[0], "f", "v")
	}
	if s.queue != "" {
		for i, e := range strings.Fields(s.queue) {
			entry, deadline := "", baseMS+600000
			switch e {
			case "own":
				entry = equivEntry
			case "other":
				entry = equivOther + equivTTL
			case "next":
				entry = equivNext
			case "dead":
				entry, deadline = "old:"+equivTTL, baseMS-1000
			case "malformed":
				entry = "garbage"
			}
			p.ZAdd(ctx, keys[2], redis.Z{Score: float64(baseUS - 5000000 + int64(i)*1000000), Member: entry})
			p.HSet(ctx, keys[3], entry, deadline)
		}
		p.PExpire(ctx, keys[2], 10*time.Minute)
		p.PExpire(ctx, keys[3], 10*time.Minute)
	}
	if s.marker {
		p.Set(ctx, keys[4], "1", 5*time.Second)
	}
	switch s.counter {
	case "behind":
		p.Set(ctx, keys[1], "12345", 0)
	case "behind+ttl":
		p.Set(ctx, keys[1], "12345", 50*time.Second)
	case "ahead":
		p.Set(ctx, keys[1], strconv.FormatInt(baseUS+1e12, 10), 0)
	case "ahead+ttl":
		p.Set(ctx, keys[1], strconv.FormatInt(baseUS+1e12, 10), 50*time.Second)
	case "far-ahead":
		p.Set(ctx, keys[1], strconv.FormatInt(baseUS+1e14, 10), 0)
	case "zero":
		p.Set(ctx, keys[1], "0", 0)
	case "max":
		p.Set(ctx, keys[1], "9223372036854775806", 0)
	case "at-limit":
		p.Set(ctx, keys[1], "9223372036854775807", 0)
	case "corrupt":
		p.Set(ctx, keys[1], "12ab", 0)
	case "wrongtype":
		p.RPush(ctx, keys[1], "x")
	}
}

// snapshotLua returns, for each key, {type, pttl, contents}.
const snapshotLua = `
local out = {}
for i, k in ipairs(KEYS) do
  local kind = redis.call('TYPE', k)['ok']
  local v = {kind, redis.call('PTTL', k)}
  if kind == 'string' then
    v[3] = {redis.call('GET', k)}
  elseif kind == 'hash' then
    v[3] = redis.call('HGETALL', k)
  elseif kind == 'zset' then
    v[3] = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif kind == 'list' then
    v[3] = redis.call('LRANGE', k, 0, -1)
  else
    v[3] = {}
  end
  out[i] = v
end
return out
`

var snapshotScript = script.New(snapshotLua)

// keySnapshot is what one key holds.
type keySnapshot struct {
	kind     string
	pttl     int64
	contents []string // a hash's field-value pairs sorted by field
}

func snapshot(t *testing.T, ctx context.Context, c *redis.Client, keys []string) []keySnapshot {
	t.Helper()
	res, err := snapshotScript.Run(ctx, c, script.Keys(keys...)).Slice()
	require.NoError(t, err)
	out := make([]keySnapshot, len(res))
	for i, r := range res {
		v := r.([]any)
		s := keySnapshot{kind: v[0].(string), pttl: v[1].(int64)}
		for _, x := range v[2].([]any) {
			s.contents = append(s.contents, fmt.Sprint(x))
		}
		if s.kind == "hash" {
			pairs := make([][2]string, 0, len(s.contents)/2)
			for j := 0; j+1 < len(s.contents); j += 2 {
				pairs = append(pairs, [2]string{s.contents[j], s.contents[j+1]})
			}
			sort.Slice(pairs, func(a, b int) bool { return pairs[a][0] < pairs[b][0] })
			s.contents = s.contents[:0]
			for _, p := range pairs {
				s.contents = append(s.contents, p[0], p[1])
			}
		}
		out[i] = s
	}
	return out
}

// tolerance is how far apart two runs of a state may read the server
// clock: nothing on miniredis, whose clock the test stops; on a real
// Redis, the time between the runs.
type tolerance struct {
	ms int64 // for times and durations in milliseconds
}

// sameString says whether a and b are the same, but for a trailing
// number read from the clock: microseconds (from 10^15) or milliseconds
// (from 10^12), which may be apart by the tolerance.
func (tol tolerance) sameString(a, b string) bool {
	if a == b {
		return true
	}
	pa, na := splitNumber(a)
	pb, nb := splitNumber(b)
	if pa != pb || na < 1e12 || nb < 1e12 {
		return false
	}
	d := na - nb
	if d < 0 {
		d = -d
	}
	if na >= 1e15 {
		return d <= tol.ms*1000
	}
	return d <= tol.ms
}

// splitNumber splits s into the text before its trailing digits and
// their value (-1 when none, or too many).
func splitNumber(s string) (string, int64) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, err := strconv.ParseInt(s[i:], 10, 64)
	if err != nil {
		return s, -1
	}
	return s[:i], n
}

// sameTTL says whether two PTTLs (or other durations in milliseconds)
// are the same within the tolerance; no expiry (-1) and a missing key
// (-2) only as themselves.
func (tol tolerance) sameTTL(a, b int64) bool {
	if a < 0 || b < 0 {
		return a == b
	}
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= tol.ms
}

// The parts of a script's error reply that differ between two scripts,
// and two sets of keys: the script's SHA1 and the line (on miniredis,
// ":<line>:"), and the set's letter in the keys' hash tag.
var (
	scriptAndLine = regexp.MustCompile(`[0-9a-f]{40}|user_script: ?[0-9]+|:[0-9]+:`)
	keySet        = regexp.MustCompile(`\{([0-9]+)[abc]\}`)
)

// replyOf is a script's reply: its error, as text without what differs
// between two scripts and two sets of keys, or its value.
func replyOf(v any, err error) any {
	if err != nil {
		msg := scriptAndLine.ReplaceAllString(err.Error(), "<script>")
		return "error " + keySet.ReplaceAllString(msg, "{$1}")
	}
	return v
}

// sameReply compares two replies: an integer (a status, or a grant's
// token) exactly, or as sameString compares tokens from 1e12, and so
// every element of an array but its second, which sameDuration compares
// (a refusal's wait; a hand-over's second is its owner); strings with
// sameString.
func (tol tolerance) sameReply(a, b any) bool {
	switch a := a.(type) {
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			same := tol.sameReply
			if i == 1 {
				same = tol.sameDuration
			}
			if !same(a[i], b[i]) {
				return false
			}
		}
		return true
	case int64:
		b, ok := b.(int64)
		if ok && (a >= 1e12 || b >= 1e12) {
			return tol.sameString(strconv.FormatInt(a, 10), strconv.FormatInt(b, 10))
		}
		return ok && a == b
	case string:
		b, ok := b.(string)
		return ok && tol.sameString(a, b)
	}
	return a == b
}

// sameDuration compares the second element of an array reply, the only
// integer there that is a duration (a refusal's wait), as sameTTL does;
// anything else as sameReply.
func (tol tolerance) sameDuration(a, b any) bool {
	if a, ok := a.(int64); ok && a < 1e12 {
		b, ok := b.(int64)
		return ok && b < 1e12 && tol.sameTTL(a, b)
	}
	return tol.sameReply(a, b)
}

func (tol tolerance) sameKeys(a, b []keySnapshot) bool {
	for i := range a {
		if a[i].kind != b[i].kind || !tol.sameTTL(a[i].pttl, b[i].pttl) || len(a[i].contents) != len(b[i].contents) {
			return false
		}
		for j := range a[i].contents {
			if !tol.sameString(a[i].contents[j], b[i].contents[j]) {
				return false
			}
		}
	}
	return true
}

// fellThrough is what a script cut after its fast path answers when the
// fast path does not decide.
const fellThrough = "fell through"

// fastPathOnly returns src cut after its fast path, answering
// fellThrough where the rest of the script would begin.
func fastPathOnly(t *testing.T, src string) string {
	t.Helper()
	i := strings.Index(src, "\n-- "+luagen.SourceDir+"/lib/")
	require.Positive(t, i, "no helpers after the fast path")
	return src[:i+1] + "return '" + fellThrough + "'\n"
}

// equivRun is one script's run, with the arguments of one case.
type equivRun struct {
	name     string
	shipped  *script.Script
	full     *script.Script
	fastOnly *script.Script
	args     []any
	markers  bool // the states include an abandon marker
	// fast says which states the fast path decides with args.
	fast func(s equivState, args []any) bool
}

// equivEntryRe matches a well-formed queue entry: an owner nonce and its
// ':', and a TTL above 0.
var equivEntryRe = regexp.MustCompile(`^(.*:)([1-9][0-9]*)$`)

// behindClock says whether the counter of s is one the fast paths take:
// missing, or behind the clock (and not "0", which they leave to the
// rest).
func behindClock(s equivState) bool {
	return s.counter == "missing" || s.counter == "behind" || s.counter == "behind+ttl"
}

// TestFastPathsAreEquivalentToTheFullScripts runs the acquire and
// release scripts Redis runs, their fast paths first, and the same
// scripts without their fast paths, on the same states of a resource's
// keys (the lock free, the caller's, another's or of another type; the
// queue empty, or with live, dead and malformed entries, the caller's or
// another's; an abandon marker or none; the counter missing, behind the
// clock, ahead of it, far ahead, at its limit, corrupt or of another
// type; with and without expiry), with each case's arguments, and
// compares the replies and every key afterwards (values, and TTLs
// within the time between the runs on a real Redis). It also runs each
// fast path alone: it must decide exactly the states it is for, and
// write nothing in the others, which it leaves to the rest.
func TestFastPathsAreEquivalentToTheFullScripts(t *testing.T) {
	runEquivStates(t, equivRuns(t))
}

// skipMiniUnderRace skips an equivalence test's miniredis run under the
// race detector, which slows miniredis's Lua about tenfold (100 s for
// this test) and can find nothing here: the test runs scripts one at a
// time from one goroutine. The real server's run stays; CI runs both
// without the detector too (the newest go-redis).
func skipMiniUnderRace(t *testing.T, be *redistest.Backend) {
	if racetest.Enabled && be.Miniredis() != nil {
		t.Skip("miniredis's run of the scripts' equivalence is left out under the race detector (it checks Lua, from one goroutine)")
	}
}

// equivRuns returns the runs of the equivalence tests: the acquire and
// release scripts, shipped, without their fast paths and their fast
// paths alone, with each case's arguments.
func equivRuns(t *testing.T) []equivRun {
	t.Helper()
	full, err := luagen.GenerateWithoutFastPaths(filepath.Join("lua", "src"))
	require.NoError(t, err)
	var runs []equivRun
	for _, waiting := range []string{"", "45000"} {
		for _, idle := range []string{"0", "60000"} {
			runs = append(runs, equivRun{
				name: "acquire", shipped: acquireScript, markers: true,
				args: []any{equivOwner, equivTTL, waiting, idle},
				fast: func(s equivState, _ []any) bool {
					return s.lock == "free" && s.queue == "" && !s.marker && behindClock(s)
				},
			})
		}
	}
	// A release by its holder, with and without a candidate, and by a
	// waiter that gives up or a client that lost an acquire's reply,
	// which the fast path leaves to the rest.
	for _, a := range [][]any{
		{"", "", "0", "", ""}, {"", "", "60000", "", ""}, {equivEntry, "", "60000", "", ""}, {"", "5000", "60000", "", ""},
		{"", "", "0", equivNext, "90000"}, {"", "", "60000", equivNext, "90000"},
		// candidates the fast path leaves to the rest: another Locker's
		// waiter, malformed entries, a TTL of 0
		{"", "", "60000", equivOther + "30000", "90000"}, {"", "", "60000", "garbage", "90000"},
		{"", "", "60000", "aaaaaaaaaaaaaaaa3333333333333333:0", "90000"},
		// and ones it takes, of the Locker's id though the library never
		// makes them: an owner of the id alone, one holding a ':', and a
		// nonce shorter than the Locker's with the counter kept for ever
		{"", "", "60000", "aaaaaaaaaaaaaaaa:30000", "90000"}, {"", "", "60000", "aaaaaaaaaaaaaaaa3:3:30000", "90000"},
		{"", "", "0", "aaaaaaaaaaaaaaaa3333:30000", "90000"},
	} {
		runs = append(runs, equivRun{
			name: "release", shipped: releaseScript, markers: true,
			args: []any{equivOwner, "channel:", a[0], a[1], a[2], a[3], a[4], ""},
			fast: func(s equivState, args []any) bool {
				if args[2] != "" || args[3] != "" || s.lock != "own" || s.queue != "" {
					return false
				}
				if args[5] == "" {
					return true
				}
				// with a candidate, handed to it when it is an entry of
				// the caller's Locker that has not left, and the counter
				// is behind the clock
				m := equivEntryRe.FindStringSubmatch(args[5].(string))
				own := m != nil && strings.HasPrefix(m[1], equivOwner[:16])
				return own && !s.marker && behindClock(s)
			},
		})
	}
	for i := range runs {
		r := &runs[i]
		r.full = script.New(string(full[r.name+".lua"]))
		r.fastOnly = script.New(fastPathOnly(t, r.shipped.Source()))
		require.NotEqual(t, r.shipped.Source(), r.full.Source(), "%s.lua has no fast path", r.name)
	}
	return runs
}

// equivBackend compares runs of scripts on one backend.
type equivBackend struct {
	t        *testing.T
	ctx      context.Context
	c        *redis.Client
	prefix   string
	tol      tolerance
	base     time.Time // the server clock the states are built from
	n        int       // sets of keys used so far
	failures int
}

// newEquivBackend stops miniredis's clock, or allows a real server's
// clock to move between the runs of a state.
func newEquivBackend(t *testing.T, be *redistest.Backend) *equivBackend {
	e := &equivBackend{t: t, ctx: context.Background(), c: be.Client, prefix: be.Prefix}
	if m := be.Miniredis(); m != nil {
		m.SetTime(time.Unix(1750000000, 123456789))
	} else {
		// Runs on a loaded machine are seconds apart at most; the
		// TTLs and times of the states are further apart than that.
		e.tol.ms = 3000
	}
	var err error
	e.base, err = e.c.Time(e.ctx).Result()
	require.NoError(t, err)
	return e
}

// errorf reports a difference, and stops the test after 20.
func (e *equivBackend) errorf(format string, args ...any) {
	e.t.Helper()
	e.t.Errorf(format, args...)
	e.failures++
	if e.failures >= 20 {
		e.t.Fatalf("stopped after %d differences", e.failures)
	}
}

// compare builds a state (put) in three sets of keys, runs the shipped
// script, the script without its fast path and the fast path alone on
// them with args, and reports where the first two differ (reply, keys
// after), where the fast path alone answered other than the script when
// it decided, and where it wrote when it did not. It returns whether the
// fast path decided, and what it answered.
func (e *equivBackend) compare(r equivRun, args []any, what string, put func(p redis.Pipeliner, keys []string)) (bool, any) {
	e.t.Helper()
	ctx, c, tol := e.ctx, e.c, e.tol
	e.n++
	keysA, keysB, keysC := equivKeys(e.prefix, e.n, "a"), equivKeys(e.prefix, e.n, "b"), equivKeys(e.prefix, e.n, "c")
	p := c.Pipeline()
	put(p, keysA)
	put(p, keysB)
	put(p, keysC)
	_, err := p.Exec(ctx)
	require.NoError(e.t, err)
	before := snapshot(e.t, ctx, c, keysC)

	shipped := replyOf(r.shipped.Run(ctx, c, script.Keys(keysA...), args...).Result())
	whole := replyOf(r.full.Run(ctx, c, script.Keys(keysB...), args...).Result())
	alone := replyOf(r.fastOnly.Run(ctx, c, script.Keys(keysC...), args...).Result())
	after := snapshot(e.t, ctx, c, append(append(append([]string(nil), keysA...), keysB...), keysC...))
	afterA, afterB, afterC := after[:5], after[5:10], after[10:]
	require.NoError(e.t, c.Del(ctx, append(append(keysA, keysB...), keysC...)...).Err())

	if !tol.sameReply(shipped, whole) {
		e.errorf("%s: replies differ: with the fast path %v, without %v", what, shipped, whole)
	}
	if !tol.sameKeys(afterA, afterB) {
		e.errorf("%s: keys differ after the runs:\n  with the fast path    %v\n  without the fast path %v", what, afterA, afterB)
	}
	took := alone != fellThrough
	if took && !tol.sameReply(alone, shipped) {
		e.errorf("%s: the fast path alone answered %v, the script %v", what, alone, shipped)
	}
	if !took && !tol.sameKeys(before, afterC) {
		e.errorf("%s: the fast path wrote though it did not decide:\n  before %v\n  after  %v", what, before, afterC)
	}
	return took, alone
}

func runEquivStates(t *testing.T, runs []equivRun) {
	redistest.Each(t, func(t *testing.T, be *redistest.Backend) {
		skipMiniUnderRace(t, be)
		e := newEquivBackend(t, be)
		decided := map[string]int{}
		for _, r := range runs {
			for _, s := range equivStates(r.markers) {
				what := fmt.Sprintf("%s %v, %s", r.name, r.args, s)
				took, alone := e.compare(r, r.args, what, func(p redis.Pipeliner, keys []string) {
					s.put(e.ctx, p, keys, e.base)
				})
				if took != r.fast(s, r.args) {
					e.errorf("%s: the fast path alone answered %v; want it to decide only the states it is for", what, alone)
				}
				if took {
					decided[r.name]++
				}
			}
		}
		t.Logf("%d states compared; the fast paths decided %d of acquire's and %d of release's", e.n, decided["acquire"], decided["release"])
		require.Positive(t, decided["acquire"])
		require.Positive(t, decided["release"])
	})
}
