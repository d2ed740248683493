package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Status is the fleet as etcd sees it.
type Status struct {
	Workers   []Member         `json:"workers"`
	Pipelines []PipelineStatus `json:"pipelines"`
	// Stale is set when etcd could not answer (see ReadStatusOrLast): what is shown is the last state known.
	Stale *Stale `json:"stale,omitempty"`
}

// PipelineStatus is one pipeline of the config.
type PipelineStatus struct {
	Name     string    `json:"name"`
	Pin      string    `json:"pin,omitempty"`
	Holder   string    `json:"holder"` // "" when no worker runs it
	Epoch    uint64    `json:"epoch,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Assigned string    `json:"assigned"` // the worker the assignment gives it to
	// LastError is the last error a run of it ended with, on any worker, and when.
	LastError *LastError `json:"last_error,omitempty"`
	// Progress is what its holder last published (nil before its first heartbeat); it is as of Published,
	// at most one heartbeat (a third of the lease TTL) old while the holder lives.
	Progress  *Progress `json:"progress,omitempty"`
	Published time.Time `json:"published,omitzero"`
	// LagEntries are the WAL entries committed and not yet applied by every destination; LagSeconds the
	// age of the oldest of them at Published (0 when caught up).
	LagEntries uint64  `json:"lag_entries"`
	LagSeconds float64 `json:"lag_seconds"`
}

// ReadStatus reads members, holders and last errors; pipelines are the config's.
func ReadStatus(ctx context.Context, cli *clientv3.Client, prefix string, pipelines []Pipeline) (*Status, error) {
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read fleet %s: %w", prefix, err)
	}
	return statusOf(kvsOf(resp), prefix, pipelines), nil
}

// kvsOf keeps a read's keys and values, the form the status is built from (and cached in).
func kvsOf(resp *clientv3.GetResponse) map[string]string {
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// statusOf builds the status from the fleet's keys; pipelines are the config's.
func statusOf(kvs map[string]string, prefix string, pipelines []Pipeline) *Status {
	members := map[string]Member{}
	holds := map[string]Holding{}
	errs := map[string]LastError{}
	progress := map[string]progressRecord{}
	for key, value := range kvs {
		k := strings.TrimPrefix(key, prefix+"/")
		kind, name, ok := strings.Cut(k, "/")
		if !ok {
			continue
		}
		switch kind {
		case "workers":
			var m Member
			if json.Unmarshal([]byte(value), &m) == nil {
				members[name] = m
			}
		case "pipelines":
			var h Holding
			if json.Unmarshal([]byte(value), &h) == nil {
				holds[name] = h
			}
		case "progress":
			var p progressRecord
			if json.Unmarshal([]byte(value), &p) == nil {
				progress[name] = p
			}
		case "errors":
			var e LastError
			if json.Unmarshal([]byte(value), &e) == nil {
				errs[name] = e
			}
		}
	}
	st := &Status{Workers: []Member{}, Pipelines: []PipelineStatus{}}
	for _, m := range members {
		st.Workers = append(st.Workers, m)
	}
	sort.Slice(st.Workers, func(i, j int) bool { return st.Workers[i].Name < st.Workers[j].Name })
	assigned := Assign(pipelines, live(members))
	for _, p := range pipelines {
		ps := PipelineStatus{Name: p.Name, Pin: p.Pin, Assigned: assigned[p.Name]}
		if h, ok := holds[p.Name]; ok {
			ps.Holder, ps.Epoch, ps.Since = h.Holder, h.Epoch, h.Since
			rec := progress[h.Holder]
			if pr, ok := rec.Pipelines[p.Name]; ok {
				ps.Progress, ps.Published = &pr, rec.Published
				if pr.Committed > pr.Applied {
					ps.LagEntries = pr.Committed - pr.Applied
				}
				if !pr.OldestUnapplied.IsZero() {
					ps.LagSeconds = max(rec.Published.Sub(pr.OldestUnapplied).Seconds(), 0)
				}
			}
		}
		if e, ok := errs[p.Name]; ok {
			ps.LastError = &e
		}
		st.Pipelines = append(st.Pipelines, ps)
	}
	sort.Slice(st.Pipelines, func(i, j int) bool { return st.Pipelines[i].Name < st.Pipelines[j].Name })
	return st
}

// ErrNoWorker: the named worker is not alive in the fleet.
var ErrNoWorker = errors.New("no live worker")

// Drain asks worker name to hand all its pipelines to the others (on) or to take its share again (off). The
// request outlives the worker's restarts until cancelled. Draining a worker that is not alive is refused.
func Drain(ctx context.Context, cli *clientv3.Client, prefix, name string, on bool) error {
	if !on {
		if _, err := cli.Delete(ctx, drainKey(prefix, name)); err != nil {
			return fmt.Errorf("cancel drain of %s: %w", name, err)
		}
		return nil
	}
	resp, err := cli.Get(ctx, workersKey(prefix), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("read fleet %s: %w", prefix, err)
	}
	var names []string
	for _, kv := range resp.Kvs {
		names = append(names, strings.TrimPrefix(string(kv.Key), workersKey(prefix)))
	}
	found := false
	for _, n := range names {
		found = found || n == name
	}
	if !found {
		return fmt.Errorf("%w %q in fleet %s (live: %s): check the name with `skippr fleet status`", ErrNoWorker, name, prefix, strings.Join(names, ", "))
	}
	b, _ := json.Marshal(map[string]any{"requested": time.Now().UTC()})
	if _, err := cli.Put(ctx, drainKey(prefix, name), string(b)); err != nil {
		return fmt.Errorf("drain %s: %w", name, err)
	}
	return nil
}
