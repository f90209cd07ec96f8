package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// dashboard is the Grafana dashboard this module ships.
const dashboard = "../../dashboards/fencedlock.json"

// queries returns the PromQL of every panel of the dashboard at path.
func queries(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			out = append(out, target.Expr)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no queries", path)
	}
	return out
}

// series is what a scrape holds: each metric's label sets.
type series map[string][]map[string]string

// scraped runs the example's workload and returns what its /metrics
// served, as series.
func scraped(t *testing.T) series {
	t.Helper()
	var lines []string
	err := run("127.0.0.1:0", func(_ context.Context, _ string, got []string) error {
		lines = got
		return nil
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := series{}
	for _, line := range lines {
		name, labels, err := parseSample(line)
		if err != nil {
			t.Fatal(err)
		}
		s[name] = append(s[name], labels)
	}
	return s
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// parseSample parses one sample line of the Prometheus text format.
func parseSample(line string) (string, map[string]string, error) {
	m := sampleLine.FindStringSubmatch(line)
	if m == nil {
		return "", nil, fmt.Errorf("not a sample line: %q", line)
	}
	labels := map[string]string{}
	for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
		labels[p[1]] = p[2]
	}
	return m[1], labels, nil
}

// selector is a metric name a query selects, with its label matchers.
type selector struct {
	metric   string
	matchers []matcher
}

type matcher struct{ label, op, value string }

// parsed is what checkQuery needs of a query: its selectors, and the labels
// its aggregations group by.
type parsed struct {
	selectors []selector
	grouping  []string
}

// The aggregation operators of PromQL, which a by or without clause may
// follow before their parenthesis.
var aggregations = map[string]bool{
	"sum": true, "avg": true, "min": true, "max": true, "count": true, "group": true, "stddev": true,
	"stdvar": true, "topk": true, "bottomk": true, "quantile": true, "count_values": true,
}

// The words of PromQL that are not metric names.
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true,
}

var (
	ident       = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	matcherExpr = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?`)
	labelList   = regexp.MustCompile(`^\s*\(([^)]*)\)`)
)

// parseQuery finds the selectors and groupings of a PromQL query: the
// subset of PromQL the dashboard uses (functions, aggregations with by
// or without, binary operators, range selectors, numbers, strings).
func parseQuery(q string) (parsed, error) {
	var p parsed
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '[': // a range or subquery: [5m]
			end := strings.IndexByte(q[i:], ']')
			if end < 0 {
				return p, fmt.Errorf("unclosed [ in %q", q)
			}
			i += end + 1
		case c == '"':
			end := strings.IndexByte(q[i+1:], '"')
			if end < 0 {
				return p, fmt.Errorf("unclosed string in %q", q)
			}
			i += end + 2
		case c >= '0' && c <= '9' || c == '.':
			for i < len(q) && (q[i] >= '0' && q[i] <= '9' || q[i] == '.' || q[i] == 'e') {
				i++
			}
		case ident.MatchString(q[i:]):
			word := ident.FindString(q[i:])
			i += len(word)
			rest := strings.TrimLeft(q[i:], " ")
			switch {
			case keywords[word]:
				if word == "by" || word == "without" || word == "on" || word == "ignoring" {
					m := labelList.FindStringSubmatch(q[i:])
					if m == nil {
						return p, fmt.Errorf("%s without a label list in %q", word, q)
					}
					for _, l := range strings.Split(m[1], ",") {
						if l = strings.TrimSpace(l); l != "" {
							p.grouping = append(p.grouping, l)
						}
					}
					i += len(m[0])
				}
			case strings.HasPrefix(rest, "(") || aggregations[word]: // a function or an aggregation
			default:
				sel := selector{metric: word}
				if strings.HasPrefix(rest, "{") {
					i += len(q[i:]) - len(rest) + 1
					for {
						if strings.HasPrefix(strings.TrimLeft(q[i:], " "), "}") {
							i += strings.IndexByte(q[i:], '}') + 1
							break
						}
						m := matcherExpr.FindStringSubmatch(q[i:])
						if m == nil {
							return p, fmt.Errorf("bad label matcher at %q in %q", q[i:], q)
						}
						sel.matchers = append(sel.matchers, matcher{m[1], m[2], m[3]})
						i += len(m[0])
					}
				}
				p.selectors = append(p.selectors, sel)
			}
		default:
			i++
		}
	}
	if len(p.selectors) == 0 {
		return p, fmt.Errorf("no metric in %q", q)
	}
	return p, nil
}

// checkQuery returns what q uses that s does not have: a metric, a label of a
// matcher or of a grouping, or a value that no series matches.
func checkQuery(q string, s series) []error {
	p, err := parseQuery(q)
	if err != nil {
		return []error{err}
	}
	var errs []error
	labels := map[string]bool{}
	for _, sel := range p.selectors {
		sets, ok := s[sel.metric]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: no metric %s in the scrape", q, sel.metric))
			continue
		}
		for _, set := range sets {
			for l := range set {
				labels[l] = true
			}
		}
		for _, m := range sel.matchers {
			if !hasLabel(sets, m.label) {
				errs = append(errs, fmt.Errorf("%s: %s has no label %s", q, sel.metric, m.label))
				continue
			}
			var match func(string) bool
			switch m.op {
			case "=":
				match = func(v string) bool { return v == m.value }
			case "=~":
				re, err := regexp.Compile("^(?:" + m.value + ")$")
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %v", q, err))
					continue
				}
				match = re.MatchString
			default: // a negative matcher needs only its label
				continue
			}
			found := false
			for _, set := range sets {
				if v, ok := set[m.label]; ok && match(v) {
					found = true
				}
			}
			if !found {
				errs = append(errs, fmt.Errorf("%s: no series of %s with %s%s%q", q, sel.metric, m.label, m.op, m.value))
			}
		}
	}
	for _, l := range p.grouping {
		if !labels[l] {
			errs = append(errs, fmt.Errorf("%s: no metric of the query has the label %s it groups by", q, l))
		}
	}
	return errs
}

func hasLabel(sets []map[string]string, label string) bool {
	for _, set := range sets {
		if _, ok := set[label]; ok {
			return true
		}
	}
	return false
}

// Every metric, label and label value that the dashboard's queries use is
// in a scrape of this example's /metrics, and every query is in the
// package documentation too.
func TestDashboardQueriesMatchTheScrape(t *testing.T) {
	s := scraped(t)
	qs := queries(t, dashboard)
	for _, q := range qs {
		for _, err := range checkQuery(q, s) {
			t.Error(err)
		}
	}
	doc, err := os.ReadFile("../../doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if !strings.Contains(string(doc), "//\t  "+q+"\n") {
			t.Errorf("the package documentation does not list the query %s", q)
		}
	}
	t.Logf("%d queries checked against %d metrics", len(qs), len(s))
}

// The check fails for a misspelled metric, a misspelled label, a label
// value no series has, and a grouping by a label no metric has.
func TestDashboardCheckCatchesMistakes(t *testing.T) {
	s := series{
		"fencedlock_lock_lost_total":                    {{}},
		"fencedlock_store_writes_total":                 {{"fencedlock_outcome": "accepted"}, {"fencedlock_outcome": "stale"}},
		"fencedlock_acquire_duration_seconds_bucket":    {{"fencedlock_call": "do", "fencedlock_outcome": "acquired", "le": "0.5"}},
		"fencedlock_acquire_duration_seconds_count":     {{"fencedlock_call": "do", "fencedlock_outcome": "acquired"}},
		"fencedlock_election_leader":                    {{"fencedlock_election": "office"}},
		"fencedlock_unrelated_metric_that_only_is_here": {{}},
	}
	for _, c := range []struct {
		query string
		bad   bool
	}{
		{`sum(increase(fencedlock_lock_lost_total[5m]))`, false},
		{`sum(increase(fencedlock_lock_lsot_total[5m]))`, true},
		{`sum(increase(fencedlock_store_writes_total{fencedlock_outcome="stale"}[5m]))`, false},
		{`sum(increase(fencedlock_store_writes_total{fencedlock_outcome="stael"}[5m]))`, true},
		{`sum(increase(fencedlock_store_writes_total{fencedlock_outcom="stale"}[5m]))`, true},
		{`sum(rate(fencedlock_acquire_duration_seconds_count{fencedlock_outcome=~"timeout|acquired"}[5m]))`, false},
		{`sum(rate(fencedlock_acquire_duration_seconds_count{fencedlock_outcome=~"timeout|canceled"}[5m]))`, true},
		{`histogram_quantile(0.99, sum by (le, fencedlock_call) (rate(fencedlock_acquire_duration_seconds_bucket{fencedlock_call!="campaign"}[5m])))`, false},
		{`histogram_quantile(0.99, sum by (le, fencedlock_cal) (rate(fencedlock_acquire_duration_seconds_bucket[5m])))`, true},
		{`sum by (fencedlock_election) (fencedlock_election_leader)`, false},
		{`sum by (fencedlock_election) (fencedlock_election_leaders)`, true},
		{`sum(rate(fencedlock_acquire_duration_seconds_count[5m])) / sum(rate(fencedlock_acquire_duration_seconds_cuont[5m]))`, true},
	} {
		errs := checkQuery(c.query, s)
		if c.bad && len(errs) == 0 {
			t.Errorf("no error for %s", c.query)
		}
		if !c.bad && len(errs) > 0 {
			t.Errorf("errors for %s: %v", c.query, errs)
		}
	}
}
