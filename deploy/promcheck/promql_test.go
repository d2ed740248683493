package promcheck

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// expression is one PromQL expression and where it was found.
type expression struct {
	where string
	expr  string
}

// grafanaVars are the dashboard's interval variables, which Prometheus cannot parse; Grafana substitutes a
// duration before it sends the query.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// labelValues is Grafana's variable query `label_values(METRIC, LABEL)`: its first argument is a selector.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// dashboardExpressions returns every target's expr of every panel (rows' nested panels too) and every
// templating query of the dashboard JSON in data.
func dashboardExpressions(t *testing.T, data []byte) []expression {
	t.Helper()
	type target struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var out []expression
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("dashboard panel %q target %s has no expr", p.Title, tg.RefID)
					continue
				}
				out = append(out, expression{"panel " + p.Title + " " + tg.RefID, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("dashboard variable %s: query: %v", v.Name, err)
			continue
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("dashboard variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
			continue
		}
		out = append(out, expression{"variable " + v.Name, m[1]})
	}
	return out
}

// alertExpressions returns every rule's expr of the Prometheus rule file in data.
func alertExpressions(t *testing.T, data []byte) []expression {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("prometheus-alerts.yml: %v", err)
	}
	var out []expression
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, expression{"rule " + r.Alert + r.Record, r.Expr})
		}
	}
	return out
}

// documentedMetrics is the set of metric names in the first column of docs/metrics.md's tables, with each
// histogram's _bucket, _sum and _count series.
func documentedMetrics(t *testing.T, data []byte) map[string]bool {
	t.Helper()
	row := regexp.MustCompile("^\\| `(skippr_[a-z0-9_]+)` \\| ([a-z]+)? ?\\|")
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		out[m[1]] = true
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m[1]+s] = true
			}
		}
	}
	return out
}

// selectedMetrics parses expr and returns the metric names its selectors name (by __name__ equality too).
func selectedMetrics(expr string) ([]string, error) {
	p := parser.NewParser(parser.Options{})
	e, err := p.ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" && m.Type.String() == "=" {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDeployPromQL: every expression of the dashboard and the alert rules parses, selects at least one metric,
// and selects only metrics docs/metrics.md documents.
func TestDeployPromQL(t *testing.T) {
	documented := documentedMetrics(t, readFile(t, "../../docs/metrics.md"))
	if len(documented) < 20 {
		t.Fatalf("found %d metrics in docs/metrics.md: the table parser is broken", len(documented))
	}
	exprs := dashboardExpressions(t, readFile(t, "../grafana-dashboard.json"))
	if len(exprs) < 15 {
		t.Fatalf("found %d expressions in grafana-dashboard.json", len(exprs))
	}
	exprs = append(exprs, alertExpressions(t, readFile(t, "../prometheus-alerts.yml"))...)
	used := map[string]bool{}
	for _, x := range exprs {
		names, err := selectedMetrics(x.expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", x.where, x.expr, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", x.where, x.expr)
		}
		for _, n := range names {
			used[n] = true
			if !documented[n] {
				t.Errorf("%s: %s is not in docs/metrics.md", x.where, n)
			}
		}
	}
	// The dashboard covers what issue #31 asked for: lag, WAL depth, apply rate, retries, failures, slots and
	// holders.
	for _, n := range []string{"skippr_source_lag_seconds", "skippr_wal_oldest_unapplied_age_seconds", "skippr_wal_entries",
		"skippr_wal_bytes", "skippr_rows_applied_total", "skippr_pipeline_restarts_total", "skippr_pipeline_state",
		"skippr_pipeline_last_error_class", "skippr_source_slot_retained_wal_bytes"} {
		if !used[n] {
			t.Errorf("no expression uses %s", n)
		}
	}
}

// TestSelectedMetrics checks the checker: a bad expression fails, names are found through functions,
// binary operators, __name__ matchers and Grafana's interval variables.
func TestSelectedMetrics(t *testing.T) {
	for _, tc := range []struct {
		expr    string
		want    string
		wantErr bool
	}{
		{`rate(a_total{pipeline=~"$pipeline"}[$__rate_interval])`, "a_total", false},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m]))) / on () b`, "h_bucket b", false},
		{`{__name__="c"} == 1`, "c", false},
		{`sum by (pipeline) (rate(x[5m])`, "", true},
		{`x{pipeline=}`, "", true},
	} {
		got, err := selectedMetrics(tc.expr)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err = %v, want error %v", tc.expr, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && strings.Join(got, " ") != tc.want {
			t.Errorf("%q: names %v, want %s", tc.expr, got, tc.want)
		}
	}
}
