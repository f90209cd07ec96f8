package fencedlock_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
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
