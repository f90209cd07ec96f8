package fencedlock_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// quickStartMarker precedes the README's quick start, a Go code block
// that must be the body of quickStartExample in example_test.go.
const (
	quickStartMarker  = "<!-- quick start: Example_staleWriteRefused in example_test.go -->"
	quickStartExample = "Example_staleWriteRefused"
)

// TestREADMEQuickStartIsExample checks that the README's quick start is
// the code of a tested Example, line for line (indentation and blank
// lines aside), so the README cannot show code that does not run.
func TestREADMEQuickStartIsExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	block, rest, err := codeBlockAfter(string(readme), quickStartMarker, "```go\n")
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	body := exampleBody(t, "example_test.go", quickStartExample)

	compareLines(t, "code", codeLines(block), codeLines(body))

	// The next code block shows what the Example prints.
	printed, _, err := codeBlockAfter(rest, "", "```\n")
	if err != nil {
		t.Fatalf("README.md: the quick start's output: %v", err)
	}
	compareLines(t, "output", codeLines(printed), outputLines(body))
}

// compareLines fails t at the first line where the README's got differs
// from the Example's want.
func compareLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	for i := 0; i < len(got) || i < len(want); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("README.md's quick start %s differs from %s in example_test.go at line %d:\nREADME:  %q\nExample: %q", what, quickStartExample, i+1, g, w)
		}
	}
}

// codeBlockAfter returns the text of the first code block opened by fence
// ("```go\n", say) after marker, and the text after the block.
func codeBlockAfter(text, marker, fence string) (block, rest string, err error) {
	i := strings.Index(text, marker)
	if i < 0 {
		return "", "", fmt.Errorf("no marker %q", marker)
	}
	rest = text[i+len(marker):]
	start := strings.Index(rest, fence)
	if start < 0 {
		return "", "", fmt.Errorf("no %q block after the marker", fence)
	}
	rest = rest[start+len(fence):]
	end := strings.Index(rest, "\n```\n")
	if end < 0 {
		return "", "", fmt.Errorf("the %q block after the marker is not closed", fence)
	}
	return rest[:end], rest[end+len("\n```\n"):], nil
}

// exampleBody returns the source text inside the braces of the function
// name in file.
func exampleBody(t *testing.T, file, name string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != name || fn.Body == nil {
			continue
		}
		from := fset.Position(fn.Body.Lbrace).Offset + 1
		to := fset.Position(fn.Body.Rbrace).Offset
		return string(src[from:to])
	}
	t.Fatalf("%s: no function %s", file, name)
	return ""
}

// codeLines returns the lines of code with their indentation trimmed,
// without blank lines, up to an Example's "// Output:" comment.
func codeLines(code string) []string {
	var lines []string
	for _, line := range strings.Split(code, "\n") {
		line = strings.TrimSpace(line)
		if line == "// Output:" || line == "// Unordered output:" {
			break
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// outputLines returns the lines of an Example's "// Output:" comment.
func outputLines(body string) []string {
	var lines []string
	in := false
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "// Output:":
			in = true
		case in && strings.HasPrefix(line, "//"):
			lines = append(lines, strings.TrimSpace(strings.TrimPrefix(line, "//")))
		}
	}
	return lines
}

// TestREADMEAndDocsLinksResolve checks that every relative link in
// README.md, DEVELOPERS.md and docs/*.md names a file or directory of the
// repository, and that a link's #fragment into a Markdown page names one
// of its headings.
func TestREADMEAndDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"README.md", "DEVELOPERS.md"}, pages...)
	links := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range relativeLinks(string(text)) {
			links++
			target, fragment, _ := strings.Cut(link, "#")
			path := page
			if target != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %q: %v", page, link, err)
				continue
			}
			if fragment == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			linked, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !headingAnchors(string(linked))[fragment] {
				t.Errorf("%s: link %q: %s has no heading with the anchor %q", page, link, path, fragment)
			}
		}
	}
	if links == 0 {
		t.Fatal("found no relative links: the link pattern is broken")
	}
}

// mdLink matches the target of an inline Markdown link, [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// relativeLinks returns the link targets in text that name a path in the
// repository or a heading of the page itself: not web addresses, and
// nothing inside code blocks.
func relativeLinks(text string) []string {
	var out []string
	for _, line := range proseLines(text) {
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			if target := m[1]; !strings.Contains(target, "://") && !strings.HasPrefix(target, "mailto:") {
				out = append(out, target)
			}
		}
	}
	return out
}

// proseLines returns the lines of a Markdown text outside code blocks.
func proseLines(text string) []string {
	var out []string
	inCode := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if !inCode {
			out = append(out, line)
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lower case, spaces turned into hyphens, and every
// character but letters, digits, hyphens and underscores dropped.
func headingAnchors(text string) map[string]bool {
	anchors := make(map[string]bool)
	for _, line := range proseLines(text) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}

// documentedKeys reads the key tables of docs/redis.md's "Keys" section:
// each row's key pattern (P the prefix, R the resource, K another
// library's lock key, <...> any text) as a regexp, with its Redis type.
func documentedKeys(t *testing.T, prefix, resource, otherKey string) map[*regexp.Regexp]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("docs", "redis.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Keys\n")
	if !ok {
		t.Fatal("docs/redis.md has no \"## Keys\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| ([a-z ]+) \\|")
	keys := make(map[*regexp.Regexp]string)
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		var re strings.Builder
		re.WriteString("^")
		for _, part := range regexp.MustCompile(`<[^>]+>|[PRK]|[^<PRK]+`).FindAllString(m[1], -1) {
			switch {
			case part == "P":
				re.WriteString(regexp.QuoteMeta(prefix))
			case part == "R":
				re.WriteString(regexp.QuoteMeta(resource))
			case part == "K":
				re.WriteString(regexp.QuoteMeta(otherKey))
			case strings.HasPrefix(part, "<"):
				re.WriteString(".+")
			default:
				re.WriteString(regexp.QuoteMeta(part))
			}
		}
		re.WriteString("$")
		keys[regexp.MustCompile(re.String())] = strings.TrimSpace(m[2])
	}
	if len(keys) < 6 {
		t.Fatalf("docs/redis.md's key tables have %d rows; want at least 6", len(keys))
	}
	return keys
}

// TestKeysAreDocumented checks that every key a Locker, IssueToken and a
// RedisStore write for a resource has a row, with its type, in the key
// tables of docs/redis.md: a holder, a waiter from another process, a
// token issued for another library's lock, and a stored value.
func TestKeysAreDocumented(t *testing.T) {
	b := redistest.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const resource, otherKey = "orders", "locks:{invoices}"
	holder := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
	waiter := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
	store := fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix))

	lock, err := holder.TryAcquire(ctx, resource, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, resource, lock.Token(), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.Set(ctx, otherKey, "grant-1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Client.Del(context.Background(), otherKey) })
	if _, err := holder.IssueToken(ctx, otherKey, "grant-1"); err != nil {
		t.Fatal(err)
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(waitCtx, resource, time.Minute)
		if err == nil {
			err = l.Release(context.Background())
		}
		waited <- err
	}()
	defer func() {
		stopWaiting()
		<-waited
	}()

	// The waiter is queued once the queue key exists.
	waitUntil(t, func() bool {
		return b.Client.Exists(ctx, b.Prefix+":{"+resource+"}:queue").Val() == 1
	}, "the waiter queued")
	keys, err := b.Client.Keys(ctx, b.Prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}

	documented := documentedKeys(t, b.Prefix, resource, otherKey)
	seen := make(map[*regexp.Regexp]bool)
	for _, key := range keys {
		typ, err := b.Client.Type(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var row *regexp.Regexp
		for re := range documented {
			if re.MatchString(key) {
				row = re
			}
		}
		switch {
		case row == nil:
			t.Errorf("key %s (a %s) is not in docs/redis.md's key tables", key, typ)
		case redisType[documented[row]] != typ:
			t.Errorf("key %s is a %s; docs/redis.md says %s", key, typ, documented[row])
		default:
			seen[row] = true
		}
	}
	// Every documented key but the marker of an abandoned attempt was
	// written: the tables match what the scenario covers.
	for re := range documented {
		if !seen[re] && !strings.Contains(re.String(), "abandoned") {
			t.Errorf("docs/redis.md lists %s, which the scenario did not write (keys: %v)", re, keys)
		}
	}
}

// redisType maps the types docs/redis.md names to those TYPE returns.
var redisType = map[string]string{"string": "string", "hash": "hash", "sorted set": "zset", "set": "set", "list": "list"}

// repoLink matches a link into this repository's main branch, as Go doc
// comments write them, with an optional heading anchor.
var repoLink = regexp.MustCompile(`https://github\.com/fencedlock/fencedlock/blob/main/([A-Za-z0-9_./-]+[A-Za-z0-9_/-])(#[a-z0-9-]+)?`)

// TestGoDocLinksResolve checks the links that the Go files of the module
// and its nested modules make into the repository: each names a file that
// exists, and a heading of it when it has an anchor.
func TestGoDocLinksResolve(t *testing.T) {
	links := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range repoLink.FindAllStringSubmatch(string(src), -1) {
			links++
			target := filepath.FromSlash(m[1])
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link to %s: %v", path, m[1], err)
				continue
			}
			if m[2] == "" {
				continue
			}
			linked, err := os.ReadFile(target)
			if err != nil {
				return err
			}
			if !headingAnchors(string(linked))[m[2][1:]] {
				t.Errorf("%s: link %s%s: no heading with that anchor", path, m[1], m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if links == 0 {
		t.Fatal("found no links into the repository: the pattern is broken")
	}
	t.Logf("%d links checked", links)
}
