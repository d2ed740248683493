package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// lockedBuffer is a process's stderr, read while the process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runningSync is a `skippr sync` in the background with its metrics server.
type runningSync struct {
	Cmd    *exec.Cmd
	stderr *lockedBuffer
	addr   string
}

var metricsAddrLog = regexp.MustCompile(`msg="metrics listening" addr=(\S+)`)

// StartSync starts `skippr sync args…` and waits for its metrics server's address in the log (the config or
// flag says port 0).
func (e *Env) StartSync(args ...string) *runningSync {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningSync{Cmd: e.Cmd(ctx, append([]string{"sync"}, args...)...), stderr: &lockedBuffer{}}
	rs.Cmd.Stderr = rs.stderr
	if err := rs.Cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() {
		rs.Cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { rs.Cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cancel()
			<-done
		}
		cancel()
	})
	deadline := time.Now().Add(2 * time.Minute)
	for rs.addr == "" {
		if m := metricsAddrLog.FindStringSubmatch(rs.stderr.String()); m != nil {
			rs.addr = m[1]
			break
		}
		if time.Now().After(deadline) || rs.Cmd.ProcessState != nil {
			e.T.Fatalf("sync logged no metrics address:\n%s", rs.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return rs
}

func (rs *runningSync) Get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + rs.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v\nsync stderr:\n%s", path, err, rs.stderr.String())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// Scrape reads /metrics with Prometheus' own text parser.
func (rs *runningSync) Scrape(t *testing.T) scraped {
	t.Helper()
	code, body := rs.Get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return fams
}

type scraped map[string]*dto.MetricFamily

// Value sums the samples of name whose labels include want (a histogram counts its observations); ok is false
// when there is none.
func (s scraped) Value(name string, want map[string]string) (v float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
metrics:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, w := range want {
			if have[k] != w {
				continue metrics
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
	}
	return v, ok
}

func (s scraped) Must(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	v, ok := s.Value(name, want)
	if !ok {
		t.Fatalf("no %s%v in the scrape", name, want)
	}
	return v
}

// WaitFor polls cond for up to two minutes; on timeout it shows what sync logged.
func (rs *runningSync) WaitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			code, body := rs.Get(t, "/metrics")
			t.Fatalf("condition not met within 2m; /metrics (%d):\n%s\nsync stderr:\n%s", code, grepSkippr(body), rs.stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func grepSkippr(body string) string {
	var keep []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "skippr_") && !strings.Contains(l, "_bucket") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// statusJSON is what the test reads of `skippr status --json`: the WAL as the log itself says.
type statusJSON struct {
	Pipeline string `json:"pipeline"`
	WAL      struct {
		Entries       int    `json:"entries"`
		Bytes         int64  `json:"bytes"`
		LastCommitted uint64 `json:"last_committed"`
	} `json:"wal"`
}

func (e *Env) StatusOf(pipeline string) statusJSON {
	e.T.Helper()
	var all []statusJSON
	r := e.MustRun("status", "--json", pipeline)
	if err := json.Unmarshal([]byte(r.Stdout), &all); err != nil || len(all) != 1 {
		e.T.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	return all[0]
}
