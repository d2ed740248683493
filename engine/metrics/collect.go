package metrics

import (
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collector computes at scrape time what depends on the clock (the oldest unapplied entry's age) or on a set of
// series that changes (states, error classes, the sources' own gauges). It describes nothing, which makes it an
// unchecked collector: the sources' names are only known when they report them.
type collector Registry

var (
	stateDesc = prometheus.NewDesc("skippr_pipeline_state",
		"1 for the pipeline's current state (starting, running, restarting, failed, stopped), 0 for the others.", []string{"pipeline", "state"}, nil)
	errorClassDesc = prometheus.NewDesc("skippr_pipeline_last_error_class",
		"1 for the fault class of the pipeline's last error (transient, config, data, resnapshot, unknown), 0 for the others; absent before the first error.", []string{"pipeline", "class"}, nil)
	walEntriesDesc = prometheus.NewDesc("skippr_wal_entries",
		"Entries in the WAL: committed and not yet applied by every destination (then reclaimed).", []string{"pipeline"}, nil)
	walBytesDesc = prometheus.NewDesc("skippr_wal_bytes",
		"Bytes of the entries in the WAL.", []string{"pipeline"}, nil)
	walCommittedDesc = prometheus.NewDesc("skippr_wal_last_committed_seq",
		"Sequence number of the newest WAL entry.", []string{"pipeline"}, nil)
	walUnappliedDesc = prometheus.NewDesc("skippr_wal_unapplied_bytes",
		"Bytes of the WAL entries a destination has not applied.", []string{"pipeline", "destination"}, nil)
	lastAppliedDesc = prometheus.NewDesc("skippr_destination_last_applied_seq",
		"Sequence number of the newest WAL entry a destination applied.", []string{"pipeline", "destination"}, nil)
	oldestUnappliedDesc = prometheus.NewDesc("skippr_wal_oldest_unapplied_age_seconds",
		"Age of the oldest WAL entry a destination has not applied (0 when it has applied everything).", []string{"pipeline", "destination"}, nil)
)

// sourcePrefix prefixes the name a source gives its gauges.
const sourcePrefix = "skippr_source_"

// reservedSourceNames are the engine's own skippr_source_… metrics, which a source may not shadow.
var reservedSourceNames = map[string]bool{"lag_seconds": true, "rows_done": true, "rows_total": true}

func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	r := (*Registry)(c)
	r.mu.Lock()
	ps := make([]*Pipeline, 0, len(r.order))
	for _, n := range r.order {
		ps = append(ps, r.pipelines[n])
	}
	r.mu.Unlock()
	now := time.Now()
	// One family per source metric name across pipelines; its help is the first one reported.
	helps := map[string]string{}
	for _, p := range ps {
		p.mu.Lock()
		for _, s := range states {
			ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, flag(s == p.state), p.name, s)
		}
		if p.lastClass != nil {
			for _, cl := range errorClasses {
				ch <- prometheus.MustNewConstMetric(errorClassDesc, prometheus.GaugeValue, flag(cl == *p.lastClass), p.name, cl.String())
			}
		}
		if p.started {
			var bytes int64
			for _, e := range p.wal {
				bytes += e.size
			}
			ch <- prometheus.MustNewConstMetric(walEntriesDesc, prometheus.GaugeValue, float64(len(p.wal)), p.name)
			ch <- prometheus.MustNewConstMetric(walBytesDesc, prometheus.GaugeValue, float64(bytes), p.name)
			ch <- prometheus.MustNewConstMetric(walCommittedDesc, prometheus.GaugeValue, float64(p.lastSeq), p.name)
		}
		for _, d := range slices.Sorted(maps.Keys(p.applied)) {
			applied := p.applied[d]
			age := 0.0
			// Sequence numbers are consecutive, so the oldest entry d lacks is the one after its applied point.
			if e, ok := p.wal[applied+1]; ok {
				age = max(now.Sub(e.committed).Seconds(), 0)
			}
			var unapplied int64
			for seq, e := range p.wal {
				if seq > applied {
					unapplied += e.size
				}
			}
			ch <- prometheus.MustNewConstMetric(lastAppliedDesc, prometheus.GaugeValue, float64(applied), p.name, d)
			ch <- prometheus.MustNewConstMetric(walUnappliedDesc, prometheus.GaugeValue, float64(unapplied), p.name, d)
			ch <- prometheus.MustNewConstMetric(oldestUnappliedDesc, prometheus.GaugeValue, age, p.name, d)
		}
		for _, name := range slices.Sorted(maps.Keys(p.source)) {
			for _, s := range p.source[name] {
				keys := slices.Sorted(maps.Keys(s.labels))
				help, ok := helps[name]
				if !ok {
					// Prometheus wants one help text per family: the first one reported wins.
					help = s.help
					if help == "" {
						help = "Reported by the source plugin."
					}
					helps[name] = help
				}
				labels := append([]string{"pipeline"}, keys...)
				values := []string{p.name}
				for _, k := range keys {
					values = append(values, s.labels[k])
				}
				desc := prometheus.NewDesc(sourcePrefix+name, help, labels, nil)
				m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, s.value, values...)
				if err != nil {
					r.dropOnce(name, err)
					continue
				}
				ch <- m
			}
		}
		p.mu.Unlock()
	}
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
