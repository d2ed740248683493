package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/skippr-dev/skippr/testkit/netns"
	"github.com/skippr-dev/skippr/testkit/s3test"
)

// startEtcdIn starts an n-member etcd cluster inside host h (members on ports 2379+100i and 2380+100i of its
// address) and returns its etcd:// URL without a prefix once every member answers /health from inside h.
func startEtcdIn(t *testing.T, h *netns.Host, n int) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd is needed (apt-get install -y etcd-server): %v", err)
	}
	var initial, clients []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, h.HostPort(2380+100*i)))
		clients = append(clients, h.HostPort(2379+100*i))
	}
	var procs []*netns.Process
	for i := range n {
		client, peer := "http://"+clients[i], "http://"+h.HostPort(2380+100*i)
		procs = append(procs, h.Start(t, nil, bin, "--name", "m"+strconv.Itoa(i), "--data-dir", t.TempDir(),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "skfleet",
			// A loaded machine: a slow fsync must not look like a dead leader.
			"--heartbeat-interval", "100", "--election-timeout", "1500", "--logger", "zap", "--log-level", "warn"))
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: h.DialContext}}
	healthy := func(addr string) error {
		resp, err := hc.Get("http://" + addr + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
			return fmt.Errorf("%s: %s", resp.Status, body)
		}
		return nil
	}
	deadline := time.Now().Add(time.Minute)
	for i, addr := range clients {
		for {
			err := healthy(addr)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd member m%d in host %s not healthy within a minute: %v\n%s", i, h.Namespace, err, procs[i].Output())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return "etcd://" + strings.Join(clients, ",")
}

// commitWatch records the epoch of every WAL commit record it sees on S3 while the fleet runs: appliers
// reclaim commits soon after applying them, so the records must be read as they appear, not at the end.
type commitWatch struct {
	stop chan struct{}
	done chan struct{}
	// seen maps pipeline → sequence → epoch; err is the first failure.
	seen map[string]map[uint64]uint64
	err  error
}

func watchCommits(c *s3.Client, bucket string) *commitWatch {
	w := &commitWatch{stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]map[uint64]uint64{}}
	go func() {
		defer close(w.done)
		ctx := context.Background()
		after := map[string]string{}
		for {
			for i := 1; i <= fleetPipelines && w.err == nil; i++ {
				p := fleetPipelineName(i)
				if w.seen[p] == nil {
					w.seen[p] = map[uint64]uint64{}
				}
				w.err = w.poll(ctx, c, bucket, p, after)
			}
			if w.err != nil {
				return
			}
			select {
			case <-w.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

// poll reads p's commit records past the last one seen (keys are zero-padded sequence numbers).
func (w *commitWatch) poll(ctx context.Context, c *s3.Client, bucket, p string, after map[string]string) error {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(p + "/commits/")}
	if a := after[p]; a != "" {
		in.StartAfter = aws.String(a)
	}
	pages := s3.NewListObjectsV2Paginator(c, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list %s's commits: %w", p, err)
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)})
			if s3test.IsStatus(err, http.StatusNotFound) {
				continue // reclaimed between the listing and the read
			}
			if err != nil {
				return fmt.Errorf("get %s: %w", k, err)
			}
			raw, err := io.ReadAll(out.Body)
			out.Body.Close()
			if err != nil {
				return fmt.Errorf("read %s: %w", k, err)
			}
			var env struct {
				Body struct {
					Seq   uint64 `json:"seq"`
					Epoch uint64 `json:"epoch"`
				} `json:"body"`
			}
			if err := json.Unmarshal(raw, &env); err != nil {
				return fmt.Errorf("commit record %s: %w\n%s", k, err, raw)
			}
			w.seen[p][env.Body.Seq] = env.Body.Epoch
			after[p] = k
		}
	}
	return nil
}

// check stops the watch and fails the test if any pipeline's commits, in sequence order, ever go down in
// epoch: that would be an old holder committing after its successor fenced the WAL.
func (w *commitWatch) check(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	if w.err != nil {
		t.Fatal(w.err)
	}
	epochs, commits := map[uint64]bool{}, 0
	for i := 1; i <= fleetPipelines; i++ {
		p := fleetPipelineName(i)
		seqs := slices.Sorted(maps.Keys(w.seen[p]))
		if len(seqs) == 0 {
			t.Fatalf("pipeline %s: no WAL commit record seen on S3", p)
		}
		var last, lastSeq uint64
		for _, seq := range seqs {
			ep := w.seen[p][seq]
			if ep < last {
				t.Fatalf("pipeline %s: commit %d has epoch %d after commit %d's epoch %d: a fenced writer committed", p, seq, ep, lastSeq, last)
			}
			last, lastSeq = ep, seq
			epochs[ep] = true
		}
		commits += len(seqs)
	}
	t.Logf("%d WAL commits of %d pipelines read from S3 as they appeared: epochs never decrease (%d distinct epochs)", commits, fleetPipelines, len(epochs))
}
