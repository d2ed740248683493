package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Stale marks a status that is not etcd's current state: etcd did not answer a quorum read within
// StatusBudget, so the status shows the last state known.
type Stale struct {
	// Reason is why etcd did not answer.
	Reason string `json:"reason"`
	// Since is when etcd was last known to work: the newest record the fleet's workers wrote (they write every
	// heartbeat, a third of the lease TTL, so etcd stopped taking writes at most that long after it), or this
	// host's last answered read, whichever is later. The state shown is as of then.
	Since time.Time `json:"since"`
	// Source is where the state shown comes from.
	Source string `json:"source"`
}

// StatusBudget is how long ReadStatusOrLast waits for etcd's quorum before it falls back; the fallback read
// takes at most StatusFallbackBudget more, so `skippr fleet status` answers within 2 s whatever etcd's state.
// A quorum read of a healthy cluster takes milliseconds, even on a loaded machine.
const (
	StatusBudget         = time.Second
	StatusFallbackBudget = 600 * time.Millisecond
)

// Where the last state comes from when etcd's quorum does not answer, best first:
//
//  1. A serializable read: any member that is up answers from its own copy, without the quorum. After a
//     quorum loss a surviving member still holds everything the fleet wrote until then — every worker's
//     record, holder and heartbeat — so this is the fleet's own last state, whoever asks, and the newest
//     heartbeat in it dates the loss.
//  2. This host's cache of its last quorum read (StatusCachePath), written by every status that got one:
//     for when no member can be reached at all (this host is cut off, or every member is down). It is only
//     as recent as the last `fleet status` run here, and says so.
//
// A cache kept by the workers was the other choice; it would be fresh only on a worker's own host, where an
// operator rarely runs the command, and would cost every worker a watch of every key.

// ReadStatusOrLast reads the status as ReadStatus does, and records it in the cache at cachePath ("" for
// none). When etcd does not answer within StatusBudget, it returns the last state it knows, marked Stale; an
// error only when it knows none, or when etcd refused the read for a reason other than being unreachable.
func ReadStatusOrLast(ctx context.Context, cli *clientv3.Client, prefix string, pipelines []Pipeline, cachePath string) (*Status, error) {
	qctx, cancel := context.WithTimeout(ctx, StatusBudget)
	deadline, _ := qctx.Deadline()
	resp, err := cli.Get(qctx, prefix+"/", clientv3.WithPrefix())
	// By the clock, not only qctx.Err(): the context's timer is a goroutine of its own, which on a loaded machine
	// may not have run yet when the member's answer to the same deadline arrives (a CI run: 1.003 s, Err nil).
	timedOut := errors.Is(qctx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline)
	cancel()
	if err == nil {
		kvs := kvsOf(resp)
		if cachePath != "" {
			// A cache that cannot be written costs only the fallback of a later run; the status is still right.
			_ = writeStatusCache(cachePath, statusCache{Prefix: prefix, ReadAt: time.Now().UTC(), KVs: kvs})
		}
		return statusOf(kvs, prefix, pipelines), nil
	}
	if !unreachable(err, timedOut) || ctx.Err() != nil {
		return nil, fmt.Errorf("read fleet %s: %w", prefix, err)
	}
	reason := err.Error()
	cached, cerr := readStatusCache(cachePath, prefix)

	sctx, cancel := context.WithTimeout(ctx, StatusFallbackBudget)
	resp, serr := cli.Get(sctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithSerializable())
	cancel()
	if serr == nil && len(resp.Kvs) > 0 {
		kvs := kvsOf(resp)
		st := statusOf(kvs, prefix, pipelines)
		since := newestRecord(kvs, prefix)
		if cerr == nil && cached.ReadAt.After(since) {
			since = cached.ReadAt
		}
		st.Stale = &Stale{Reason: reason, Since: since,
			Source: "an etcd member's own copy (a read without the quorum): the fleet as etcd last recorded it"}
		return st, nil
	}
	if cerr == nil {
		why := "no etcd member answered"
		if serr == nil {
			why = "the etcd member that answered has no record of this fleet"
		}
		st := statusOf(cached.KVs, prefix, pipelines)
		st.Stale = &Stale{Reason: reason, Since: cached.ReadAt,
			Source: "this host's last answered `skippr fleet status` (" + cachePath + "); " + why}
		return st, nil
	}
	return nil, fmt.Errorf("read fleet %s: etcd unreachable (%s), and this host has no earlier status of it (%v)", prefix, reason, cerr)
}

// unreachable tells a read that etcd could not serve (no quorum, no member reachable, out of time) from one it
// refused (permissions, a bad request): only the first has a last state worth showing. Out of time is out of
// reach whatever code the error carries (timedOut: the read's own budget ran out): a member that got the request
// but no quorum in time answers with its own "context deadline exceeded" as code Unknown.
func unreachable(err error, timedOut bool) bool {
	if timedOut || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.Unknown:
		// The member ran out of the deadline the request carried (grpc-timeout, counted from its arrival, so it
		// can lapse a little before ours does): its own context's error, sent as code Unknown.
		return st.Message() == context.DeadlineExceeded.Error()
	}
	return false
}

// newestRecord is the time of the newest record the fleet's workers wrote: their heartbeats, holders and
// registrations.
func newestRecord(kvs map[string]string, prefix string) time.Time {
	var newest time.Time
	for key, value := range kvs {
		kind, _, _ := strings.Cut(strings.TrimPrefix(key, prefix+"/"), "/")
		var at time.Time
		switch kind {
		case "progress":
			var p progressRecord
			if json.Unmarshal([]byte(value), &p) == nil {
				at = p.Published
			}
		case "pipelines":
			var h Holding
			if json.Unmarshal([]byte(value), &h) == nil {
				at = h.Since
			}
		case "workers":
			var m Member
			if json.Unmarshal([]byte(value), &m) == nil {
				at = m.Started
			}
		}
		if at.After(newest) {
			newest = at
		}
	}
	return newest
}

// statusCache is the file at StatusCachePath: the fleet's keys as of the last quorum read from this host.
type statusCache struct {
	Prefix string            `json:"prefix"`
	ReadAt time.Time         `json:"read_at"`
	KVs    map[string]string `json:"kvs"`
}

// StatusCachePath is where `skippr fleet status` keeps its last answered read of fleet t under home
// ($SKIPPR_HOME): one file per fleet (endpoints and prefix).
func StatusCachePath(home string, t Target) string {
	sum := sha256.Sum256([]byte(strings.Join(t.Endpoints, ",") + t.Prefix))
	return filepath.Join(home, "fleet", "status-"+hex.EncodeToString(sum[:8])+".json")
}

func writeStatusCache(path string, c statusCache) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".status-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func readStatusCache(path, prefix string) (statusCache, error) {
	var c statusCache
	if path == "" {
		return c, errors.New("no cache")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if c.Prefix != prefix {
		return c, fmt.Errorf("%s: holds fleet %s, not %s", path, c.Prefix, prefix)
	}
	return c, nil
}
