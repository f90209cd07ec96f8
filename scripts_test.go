package fencedlock_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/luagen"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestLuaFilesAreGeneratedFromTheirSources fails when a script Redis
// runs, lua/<name>.lua, is not what its sources in lua/src generate: a
// source edited without `go generate`, or a generated file edited by
// hand.
func TestLuaFilesAreGeneratedFromTheirSources(t *testing.T) {
	want, err := luagen.Generate(filepath.Join("lua", "src"))
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join("lua", "*.lua"))
	require.NoError(t, err)
	have := map[string]bool{}
	for _, f := range files {
		name := filepath.Base(f)
		have[name] = true
		got, err := os.ReadFile(f)
		require.NoError(t, err)
		w, ok := want[name]
		switch {
		case !ok:
			t.Errorf("%s has no source lua/src/%s: remove it, or write its source and run go generate", f, name)
		case !bytes.Equal(got, w):
			t.Errorf("%s differs from what its sources generate, from line %d: run go generate (never edit it by hand)", f, firstDifferentLine(got, w))
		}
	}
	for name := range want {
		if !have[name] {
			t.Errorf("lua/%s is missing: run go generate", name)
		}
	}
}

// firstDifferentLine returns the first line (from 1) where a and b
// differ.
func firstDifferentLine(a, b []byte) int {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range la {
		if i >= len(lb) || la[i] != lb[i] {
			return i + 1
		}
	}
	return len(la) + 1
}

var (
	// a use of a key or an argument in the code
	scriptArgRe = regexp.MustCompile(`\b(KEYS|ARGV)\[(\d+)\]`)
	// a line of the header that says what a key or an argument is
	headerArgRe = regexp.MustCompile(`^-- (KEYS|ARGV)\[(\d+)\]\s+\S`)
	// the declaration of a script's statuses: local GRANTED, REFUSED = 1, 0
	statusDeclRe = regexp.MustCompile(`^local ([A-Z][A-Z_]*(?:, [A-Z][A-Z_]*)*) = (\d+(?:, \d+)*)$`)
	// a status named in the header: GRANTED (1)
	headerStatusRe = regexp.MustCompile(`\b([A-Z][A-Z_]+) \((\d+)\)`)
	// a reply with a bare number where a named status belongs
	bareStatusRe = regexp.MustCompile(`\breturn\s*(\{\s*)?-?\d+\s*(,|\}|$)`)
)

// TestScriptHeadersNameKeysArgumentsAndReplies checks the header of
// every script against its code: the header lists each KEYS[n] and
// ARGV[n] the code uses, and no other, has a "Replies:" section, and
// names every status the script declares with its value, and only
// those; the statuses of one declaration have distinct values; and no
// reply carries a bare number where a named status belongs.
func TestScriptHeadersNameKeysArgumentsAndReplies(t *testing.T) {
	for _, f := range scriptFiles(t) {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		lines := strings.Split(string(src), "\n")
		first := 1 // the line number of lines[0]
		if luagen.IsGenerated(src) {
			lines, first = lines[1:], 2
		}
		var header []string
		for len(lines) > 0 && strings.HasPrefix(lines[0], "--") {
			header = append(header, lines[0])
			lines, first = lines[1:], first+1
		}
		listed, used := map[string]bool{}, map[string]bool{}
		for _, h := range header {
			if m := headerArgRe.FindStringSubmatch(h); m != nil {
				listed[m[1]+"["+m[2]+"]"] = true
			}
		}
		declared := map[string]string{}
		for i, line := range lines {
			code, _, _ := strings.Cut(line, "--")
			for _, m := range scriptArgRe.FindAllStringSubmatch(code, -1) {
				used[m[1]+"["+m[2]+"]"] = true
			}
			if bareStatusRe.MatchString(code) {
				t.Errorf("%s:%d: a reply with a bare number: %s", f, first+i, strings.TrimSpace(line))
			}
			m := statusDeclRe.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			names, values := strings.Split(m[1], ", "), strings.Split(m[2], ", ")
			if len(names) != len(values) {
				t.Errorf("%s:%d: %d names and %d values: %s", f, first+i, len(names), len(values), line)
				continue
			}
			seen := map[string]string{}
			for j, name := range names {
				if other, ok := seen[values[j]]; ok {
					t.Errorf("%s:%d: %s and %s are both %s", f, first+i, other, name, values[j])
				}
				seen[values[j]] = name
				declared[name] = values[j]
			}
		}
		require.NotEmpty(t, header, "%s has no header", f)
		if !sameKeys(listed, used) {
			t.Errorf("%s: the header lists %v, the code uses %v", f, sortedKeys(listed), sortedKeys(used))
		}
		// The header, its lines joined: a status and its value may be
		// on two lines.
		text := strings.Join(strings.Fields(strings.ReplaceAll(strings.Join(header, "\n"), "\n--", " ")), " ")
		if !strings.Contains(text, "Replies:") {
			t.Errorf("%s: the header has no Replies: section", f)
		}
		named := map[string]string{}
		for _, m := range headerStatusRe.FindAllStringSubmatch(text, -1) {
			if v, ok := declared[m[1]]; !ok || v != m[2] {
				t.Errorf("%s: the header names %s (%s), which the script does not declare with that value", f, m[1], m[2])
			}
			named[m[1]] = m[2]
		}
		for name, v := range declared {
			if _, ok := named[name]; !ok {
				t.Errorf("%s: the header does not name status %s (%s)", f, name, v)
			}
		}
	}
}

func sameKeys(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		// KEYS before ARGV, then by number
		if ki, kj := keys[i][:4], keys[j][:4]; ki != kj {
			return ki > kj
		}
		ni, _ := strconv.Atoi(strings.Trim(keys[i][4:], "[]"))
		nj, _ := strconv.Atoi(strings.Trim(keys[j][4:], "[]"))
		return ni < nj
	})
	return keys
}

// TestScriptsRunAfterTheScriptCacheIsFlushed flushes the server's script
// cache before each call: every script is sent again with EVAL when
// EVALSHA answers NOSCRIPT (a restart or SCRIPT FLUSH), and the call
// succeeds.
func TestScriptsRunAfterTheScriptCacheIsFlushed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, be *redistest.Backend) {
		ctx := context.Background()
		l := fencedlock.New(be.Client, fencedlock.WithPrefix(be.Prefix))
		flush := func() {
			t.Helper()
			if err := be.Client.ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
		}
		flush()
		lock, err := l.TryAcquire(ctx, "flushed", time.Minute)
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		flush()
		if err := lock.Refresh(ctx, time.Minute); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		flush()
		if ttl, err := lock.TTL(ctx); err != nil || ttl <= 0 {
			t.Fatalf("TTL = %v, %v; want a positive TTL", ttl, err)
		}
		flush()
		store := fencedlock.NewRedisStore(be.Client, fencedlock.WithStorePrefix(be.Prefix))
		if err := store.Put(ctx, "flushed", lock.Token(), []byte("v")); err != nil {
			t.Fatalf("Put: %v", err)
		}
		flush()
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		flush()
		external := be.Prefix + ":external"
		if err := be.Client.Set(ctx, external, "owner", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.IssueToken(ctx, external, "owner"); err != nil {
			t.Fatalf("IssueToken: %v", err)
		}
		flush()
		if err := l.Advance(ctx, "flushed", lock.Token()+1000); err != nil {
			t.Fatalf("Advance: %v", err)
		}
		next, err := l.TryAcquire(ctx, "flushed", time.Minute)
		if err != nil {
			t.Fatalf("TryAcquire after Advance: %v", err)
		}
		if next.Token() <= lock.Token()+1000 {
			t.Fatalf("token after Advance(%d) = %d; want above it", lock.Token()+1000, next.Token())
		}
	})
}
