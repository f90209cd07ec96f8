package sqlstore

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The statements that the package documentation shows are those the
// Store runs on DefaultTable: PostgreSQL's (SQLite's differ only in
// placeholders and max for GREATEST) and MySQL's, for the table, Put and
// Fence (Tx's first statements), and MySQL's locking read of the fence.
func TestDocShowsTheStatements(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// The documentation's code blocks, their comments ("-- max(...) in
	// SQLite") dropped.
	var blocks []string
	for _, line := range strings.Split(string(src), "\n") {
		if code, ok := strings.CutPrefix(line, "//\t"); ok {
			code, _, _ = strings.Cut(code, "--")
			blocks = append(blocks, code)
		}
	}
	doc := squeeze(strings.Join(blocks, "\n"))
	pg, my := newQueries(Postgres, DefaultTable), newQueries(MySQL, DefaultTable)
	for _, st := range []struct{ name, sql string }{
		{"PostgreSQL create", pg.create},
		{"PostgreSQL put", pg.put},
		{"PostgreSQL raise", pg.raise},
		{"MySQL create", my.create},
		{"MySQL put", my.put},
		{"MySQL raise", my.raise},
		{"MySQL lock", my.lock},
	} {
		// The documentation writes the table's name unquoted.
		want := squeeze(strings.NewReplacer(`"`, "", "`", "").Replace(st.sql))
		if !strings.Contains(doc, want) {
			t.Errorf("the package documentation does not show the %s statement:\n%s", st.name, want)
		}
	}
}

// squeeze turns every run of white space in s into one space.
func squeeze(s string) string {
	return strings.TrimSpace(regexp.MustCompile(`\s+`).ReplaceAllString(s, " "))
}
