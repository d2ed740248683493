package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

func gather(t *testing.T, r *Registry) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// series renders a gauge family's samples as `{k=v,…} value`, sorted.
func series(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		out = append(out, "{"+strings.Join(ls, ",")+"} "+strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64))
	}
	slices.Sort(out)
	return out
}

func TestSourceMetrics(t *testing.T) {
	slot := func(status string) []pipeline.SourceMetric {
		var out []pipeline.SourceMetric
		for _, s := range []string{"reserved", "lost"} {
			v := 0.0
			if s == status {
				v = 1
			}
			out = append(out, pipeline.SourceMetric{Name: "slot_wal_status", Value: v, Labels: map[string]string{"slot": "s1", "wal_status": s}})
		}
		return out
	}
	tests := []struct {
		name        string
		checkpoints [][]pipeline.SourceMetric
		family      string
		want        []string
		logged      string // a warning the log must hold, once
	}{
		{
			name:        "a gauge with labels",
			checkpoints: [][]pipeline.SourceMetric{{{Name: "slot_retained_wal_bytes", Value: 4096, Labels: map[string]string{"slot": "s1"}, Help: "retained"}}},
			family:      "skippr_source_slot_retained_wal_bytes",
			want:        []string{"{pipeline=p,slot=s1} 4096"},
		},
		{
			name:        "the latest checkpoint replaces every series of a name",
			checkpoints: [][]pipeline.SourceMetric{slot("reserved"), slot("lost")},
			family:      "skippr_source_slot_wal_status",
			want:        []string{"{pipeline=p,slot=s1,wal_status=lost} 1", "{pipeline=p,slot=s1,wal_status=reserved} 0"},
		},
		{
			name: "a checkpoint without a name keeps its last value",
			checkpoints: [][]pipeline.SourceMetric{
				{{Name: "snapshot_rows_done", Value: 10, Labels: map[string]string{"table": "public.a"}}},
				{{Name: "slot_retained_wal_bytes", Value: 1}},
			},
			family: "skippr_source_snapshot_rows_done",
			want:   []string{"{pipeline=p,table=public.a} 10"},
		},
		{
			name:        "a malformed name is dropped and logged once",
			checkpoints: [][]pipeline.SourceMetric{{{Name: "Bad-Name", Value: 1}}, {{Name: "Bad-Name", Value: 2}}},
			family:      "skippr_source_Bad-Name",
			logged:      `metric=Bad-Name`,
		},
		{
			name:        "the pipeline label is the engine's",
			checkpoints: [][]pipeline.SourceMetric{{{Name: "x", Value: 1, Labels: map[string]string{"pipeline": "other"}}}},
			family:      "skippr_source_x",
			logged:      `label \"pipeline\"`,
		},
		{
			name:        "a label name Prometheus refuses",
			checkpoints: [][]pipeline.SourceMetric{{{Name: "x", Value: 1, Labels: map[string]string{"a-b": "1"}}}},
			family:      "skippr_source_x",
			logged:      `label \"a-b\"`,
		},
		{
			name:        "the engine's own source metrics cannot be shadowed",
			checkpoints: [][]pipeline.SourceMetric{{{Name: "lag_seconds", Value: 99}}},
			family:      "skippr_source_lag_seconds",
			want:        []string{"{pipeline=p} 0"},
			logged:      `engine's own skippr_source_lag_seconds`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			r := New(slog.New(slog.NewTextHandler(&logs, nil)))
			p := r.Pipeline("p")
			for _, cp := range tc.checkpoints {
				p.Checkpoint(pipeline.SourceCheckpoint{Metrics: cp})
			}
			fams := gather(t, r)
			if got := series(fams[tc.family]); !slices.Equal(got, tc.want) {
				t.Errorf("%s:\n got %q\nwant %q", tc.family, got, tc.want)
			}
			if tc.logged != "" {
				if n := strings.Count(logs.String(), "source metric dropped"); n != 1 || !strings.Contains(logs.String(), tc.logged) {
					t.Errorf("log holds %d drop warnings, want 1 with %s:\n%s", n, tc.logged, logs.String())
				}
			}
		})
	}
}

func TestReadyz(t *testing.T) {
	r := New(nil)
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	a, b := r.Pipeline("a"), r.Pipeline("b")
	steps := []struct {
		name string
		do   func()
		code int
		body []string // substrings
		not  []string
	}{
		{"before any pipeline runs", func() {}, 503, []string{"pipeline a: starting", "pipeline b: starting"}, nil},
		{"one runs", func() { a.Started(nil, nil) }, 503, []string{"pipeline b: starting"}, []string{"pipeline a"}},
		{"both run", func() { b.Started(nil, nil) }, 200, []string{"ok"}, nil},
		{"one restarts", func() { b.Restarting(fault.TransientErr(errors.New("connection reset"))) }, 503,
			[]string{"pipeline b: restarting: transient error: connection reset"}, []string{"pipeline a"}},
		{"it runs again", func() { b.Started(nil, nil) }, 200, []string{"ok"}, nil},
		{"one fails for good", func() { a.Failed(fault.ConfigErr(errors.New("bad dir\nmore"), "fix it")) }, 503,
			[]string{"pipeline a: failed: config error: bad dir"}, []string{"pipeline b", "more"}},
	}
	for _, s := range steps {
		s.do()
		code, body := get("/readyz")
		if code != s.code {
			t.Errorf("%s: /readyz %d, want %d (%q)", s.name, code, s.code, body)
		}
		for _, w := range s.body {
			if !strings.Contains(body, w) {
				t.Errorf("%s: /readyz body %q lacks %q", s.name, body, w)
			}
		}
		for _, w := range s.not {
			if strings.Contains(body, w) {
				t.Errorf("%s: /readyz body %q names %q", s.name, body, w)
			}
		}
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	fams := gather(t, r)
	if got := series(fams["skippr_pipeline_last_error_class"]); !slices.Contains(got, "{class=config,pipeline=a} 1") || !slices.Contains(got, "{class=transient,pipeline=b} 1") || !slices.Contains(got, "{class=transient,pipeline=a} 0") {
		t.Errorf("last error classes: %q", got)
	}
	if v := fams["skippr_pipeline_restarts_total"].GetMetric(); len(v) != 2 || v[0].GetCounter().GetValue() != 0 || v[1].GetCounter().GetValue() != 1 {
		t.Errorf("restarts: %v", v)
	}
}

// TestWALFigures follows entries through commit and apply: depth, unapplied bytes per destination and the age of
// the oldest entry a destination lacks.
func TestWALFigures(t *testing.T) {
	r := New(nil)
	p := r.Pipeline("p")
	if _, ok := p.Lag(); ok {
		t.Fatal("Lag reports a pipeline that has not started")
	}
	old := time.Now().Add(-time.Minute)
	p.Started([]wal.CommitRecord{{Seq: 3, Size: 100, Time: old}}, map[string]uint64{"fast": 2, "slow": 2})
	p.Committed(pipeline.Entry{Seq: 4, Size: 50, Committed: time.Now(), Streams: map[string]pipeline.StreamFigures{"s": {Rows: 7, Bytes: 40}}}, time.Millisecond)
	if l, ok := p.Lag(); !ok || l != (Lag{Committed: 4, Applied: 2, UnappliedBytes: 150, Oldest: old, Started: l.Started}) || l.Started.IsZero() {
		t.Fatalf("lag before any apply: %+v %v", l, ok)
	}
	p.Applied("fast", pipeline.Entry{Seq: 3, Size: 100, Streams: map[string]pipeline.StreamFigures{"s": {Rows: 5, Bytes: 90}}}, false, time.Millisecond)
	p.Applied("fast", pipeline.Entry{Seq: 4, Size: 50, Streams: map[string]pipeline.StreamFigures{"s": {Rows: 7, Bytes: 40}}}, false, time.Millisecond)
	fams := gather(t, r)
	for name, want := range map[string][]string{
		"skippr_wal_entries":                  {"{pipeline=p} 2"},
		"skippr_wal_bytes":                    {"{pipeline=p} 150"},
		"skippr_wal_last_committed_seq":       {"{pipeline=p} 4"},
		"skippr_wal_unapplied_bytes":          {"{destination=fast,pipeline=p} 0", "{destination=slow,pipeline=p} 150"},
		"skippr_destination_last_applied_seq": {"{destination=fast,pipeline=p} 4", "{destination=slow,pipeline=p} 2"},
	} {
		if got := series(fams[name]); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	for _, m := range fams["skippr_wal_oldest_unapplied_age_seconds"].GetMetric() {
		age, dest := m.GetGauge().GetValue(), m.GetLabel()[0].GetValue()
		if (dest == "fast" && age != 0) || (dest == "slow" && (age < 59 || age > 120)) {
			t.Errorf("oldest unapplied age of %s: %v", dest, age)
		}
	}
	// The lag is the slow destination's.
	if l, _ := p.Lag(); l.Committed != 4 || l.Applied != 2 || l.UnappliedBytes != 150 || !l.Oldest.Equal(old) || l.FirstApply.IsZero() {
		t.Fatalf("lag with one destination behind: %+v", l)
	}
	// The slow destination catches up: everything is reclaimed.
	p.Applied("slow", pipeline.Entry{Seq: 3, Size: 100, Streams: map[string]pipeline.StreamFigures{"s": {Rows: 5, Bytes: 90}}}, true, time.Millisecond)
	p.Applied("slow", pipeline.Entry{Seq: 4, Size: 50, Streams: map[string]pipeline.StreamFigures{"s": {Rows: 7, Bytes: 40}}}, false, time.Millisecond)
	fams = gather(t, r)
	if got := series(fams["skippr_wal_entries"]); !slices.Equal(got, []string{"{pipeline=p} 0"}) {
		t.Errorf("after both applied: %q", got)
	}
	if l, _ := p.Lag(); l.Applied != 4 || l.UnappliedBytes != 0 || !l.Oldest.IsZero() {
		t.Fatalf("lag after both applied: %+v", l)
	}
	// A new run (a takeover) has not applied yet: only a non-replayed apply ends it.
	p.Started(nil, map[string]uint64{"fast": 4, "slow": 4})
	p.Applied("fast", pipeline.Entry{Seq: 4, Size: 50}, true, time.Millisecond)
	if l, _ := p.Lag(); !l.FirstApply.IsZero() {
		t.Fatalf("a replay counted as the run's first apply: %+v", l)
	}
	var applied []string
	for _, m := range fams["skippr_rows_applied_total"].GetMetric() {
		applied = append(applied, m.GetLabel()[0].GetValue()+"="+strconv.FormatFloat(m.GetCounter().GetValue(), 'g', -1, 64))
	}
	// slow skipped entry 3 (a replay of what it had applied): only entry 4's rows count.
	if slices.Sort(applied); !slices.Equal(applied, []string{"fast=12", "slow=7"}) {
		t.Errorf("rows applied: %q", applied)
	}
}

// TestCoalescedApply: an apply of a range counts its entries once in skippr_apply_entries, its rows once, and
// moves the destination to the range's last entry.
func TestCoalescedApply(t *testing.T) {
	r := New(nil)
	p := r.Pipeline("p")
	p.Started(nil, map[string]uint64{"d": 2})
	p.Applied("d", pipeline.Entry{First: 3, Seq: 3, Size: 10, Streams: map[string]pipeline.StreamFigures{"s": {Rows: 1, Bytes: 10}}}, false, time.Millisecond)
	p.Applied("d", pipeline.Entry{First: 4, Seq: 8, Size: 50, Streams: map[string]pipeline.StreamFigures{"s": {Rows: 20, Bytes: 50}}}, false, time.Millisecond)
	fams := gather(t, r)
	h := fams["skippr_apply_entries"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 6 {
		t.Errorf("skippr_apply_entries: %d applies, %v entries; want 2 and 6", h.GetSampleCount(), h.GetSampleSum())
	}
	if got := series(fams["skippr_destination_last_applied_seq"]); !slices.Equal(got, []string{"{destination=d,pipeline=p} 8"}) {
		t.Errorf("last applied: %q", got)
	}
	if got := fams["skippr_rows_applied_total"].GetMetric()[0].GetCounter().GetValue(); got != 21 {
		t.Errorf("rows applied: %v, want 21", got)
	}
}

// registered is every family name a busy registry exposes, including a postgres source's figures.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	r := New(nil)
	p := r.Pipeline("p")
	p.Started(nil, map[string]uint64{"d": 0})
	e := pipeline.Entry{Seq: 1, Size: 1, Committed: time.Now(), Streams: map[string]pipeline.StreamFigures{"s": {Rows: 1, Bytes: 1}}}
	p.Read("s", 1, 1)
	p.Committed(e, time.Millisecond)
	p.Applied("d", e, false, time.Millisecond)
	p.Status(pipeline.Status{})
	p.Restarting(errors.New("x"))
	p.Checkpoint(pipeline.SourceCheckpoint{Metrics: []pipeline.SourceMetric{
		{Name: "slot_retained_wal_bytes", Value: 1, Labels: map[string]string{"slot": "s"}},
		{Name: "slot_wal_status", Value: 1, Labels: map[string]string{"slot": "s", "wal_status": "reserved"}},
		{Name: "snapshot_rows_done", Value: 1, Labels: map[string]string{"table": "t"}},
		{Name: "snapshot_rows_total", Value: 1, Labels: map[string]string{"table": "t"}},
		{Name: "resnapshot_rows", Value: 1, Labels: map[string]string{"table": "t"}},
		{Name: "resnapshot_rows_total", Value: 1, Labels: map[string]string{"table": "t"}},
		{Name: "resnapshot_copying", Value: 1, Labels: map[string]string{"table": "t"}},
		{Name: "waiting_seconds", Value: 1, Labels: map[string]string{"reason": "r"}},
		{Name: "captured_table", Value: 1, Labels: map[string]string{"table": "t", "via": "pattern"}},
	}})
	names := map[string]bool{}
	for name := range gather(t, r) {
		if strings.HasPrefix(name, "skippr_") {
			names[name] = true
		}
	}
	return names
}

var metricRef = regexp.MustCompile(`\bskippr_[a-z0-9_]+`)

// TestAlertRules checks deploy/prometheus-alerts.yml: it parses as a Prometheus rule file, each rule has what
// Prometheus needs, and each skippr_* name in an expression is a metric skippr exports (promtool is not
// available here).
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("../../deploy/prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("prometheus-alerts.yml: %v", err)
	}
	names := registered(t)
	want := map[string]bool{"SkipprSlotRetainsTooMuchWAL": false, "SkipprSourceLagRising": false, "SkipprPipelineFailed": false, "SkipprDestinationStalled": false}
	for _, g := range file.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || strings.TrimSpace(rule.Expr) == "" || rule.Annotations["summary"] == "" {
				t.Errorf("group %s: rule %q needs alert, expr and a summary", g.Name, rule.Alert)
			}
			if rule.For != "" {
				if _, err := time.ParseDuration(rule.For); err != nil {
					t.Errorf("%s: for %q: %v", rule.Alert, rule.For, err)
				}
			}
			if strings.Count(rule.Expr, "(") != strings.Count(rule.Expr, ")") {
				t.Errorf("%s: unbalanced parentheses in %q", rule.Alert, rule.Expr)
			}
			refs := metricRef.FindAllString(rule.Expr, -1)
			if len(refs) == 0 {
				t.Errorf("%s: expression names no skippr metric", rule.Alert)
			}
			for _, m := range refs {
				if !names[m] {
					t.Errorf("%s: %s is not a metric skippr exports", rule.Alert, m)
				}
			}
			if _, ok := want[rule.Alert]; ok {
				want[rule.Alert] = true
			}
		}
	}
	for a, seen := range want {
		if !seen {
			t.Errorf("prometheus-alerts.yml lacks %s", a)
		}
	}
}

// TestMetricsReference checks docs/metrics.md against the registry: every exported skippr_* family is
// documented, and every documented name is exported.
func TestMetricsReference(t *testing.T) {
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := regexp.MustCompile("^\\| `(skippr_[a-z0-9_]+)` \\|").FindStringSubmatch(line); m != nil {
			documented[m[1]] = true
		}
	}
	names := registered(t)
	for n := range names {
		if !documented[n] {
			t.Errorf("docs/metrics.md does not document %s", n)
		}
	}
	for n := range documented {
		if !names[n] {
			t.Errorf("docs/metrics.md documents %s, which skippr does not export", n)
		}
	}
}

// TestDeployMetricNames checks every skippr_* name in deploy/grafana-dashboard.json's queries against the
// metrics the engine registers (a histogram's _bucket, _sum and _count by its family). The PromQL itself is
// parsed with Prometheus' parser in deploy/promcheck, a module of its own (`make check-deploy`).
func TestDeployMetricNames(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana-dashboard.json")
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
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	names := registered(t)
	check := func(where, expr string) int {
		refs := metricRef.FindAllString(expr, -1)
		for _, m := range refs {
			base := m
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, s); ok && names[b] {
					base = b
				}
			}
			if !names[base] {
				t.Errorf("%s: %s is not a metric skippr exports", where, m)
			}
		}
		return len(refs)
	}
	total := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			total += check("panel "+p.Title, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		total += check("variable", v.Definition)
	}
	if total < 20 {
		t.Fatalf("found %d metric names in the dashboard: the reader is broken", total)
	}
}
