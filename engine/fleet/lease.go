package fleet

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseClock is this worker's own count of its etcd lease: from each keep-alive answer, etcd keeps the lease
// for the TTL the answer gives, counted from when etcd renewed it, which was before the answer arrived. So the
// lease lives at etcd at least until (answer's arrival − the answer's transit) + TTL, and at most until the
// answer's arrival + TTL. The clock takes the lease as lost at the answer's arrival + TTL − lossMargin: before
// etcd can expire it unless an answer took longer than the margin to arrive, so that the worker has stopped
// its pipelines by the time another worker can be elected for them.
//
// The etcd client's own reckoning (concurrency.Session.Done) is later on both counts: it starts from the same
// arrival, takes the whole TTL, and checks its deadlines once a second — up to a second after etcd expired
// the lease, which a pipeline that must stop within a second of the expiry cannot afford.
type leaseClock struct {
	lost chan struct{}
	mu   sync.Mutex
	last time.Time // the last answer's arrival (or the grant request's start)
}

// lossMargin is how much earlier than the answer's arrival + TTL the lease counts as lost: a sixth of the TTL,
// at most a second. The client sends a keep-alive every third of the TTL and again every 500 ms until one is
// answered, so at the default 10 s TTL a lease is given up after 8 s of silence, and at 3 s after 2.5 s —
// still two missed answers, so a loaded machine's late answer does not cost the pipelines.
func lossMargin(ttl time.Duration) time.Duration {
	return min(ttl/6, time.Second)
}

// watchLease keeps count of lease id, granted with ttl by a request started at asked, until ctx ends.
func watchLease(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID, asked time.Time, ttl time.Duration) *leaseClock {
	lc := &leaseClock{lost: make(chan struct{}), last: asked}
	answers, err := cli.KeepAlive(ctx, id)
	if err != nil {
		close(lc.lost)
		return lc
	}
	go func() {
		timer := time.NewTimer(time.Until(asked.Add(ttl - lossMargin(ttl))))
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				close(lc.lost)
				return
			case a, ok := <-answers:
				if !ok || a.TTL <= 0 {
					// The client gave up on the lease, or etcd said it has expired.
					close(lc.lost)
					return
				}
				now := time.Now()
				lc.mu.Lock()
				lc.last = now
				lc.mu.Unlock()
				ttl := time.Duration(a.TTL) * time.Second
				timer.Reset(time.Until(now.Add(ttl - lossMargin(ttl))))
			}
		}
	}()
	return lc
}

// Lost is closed when the lease must be taken as lost.
func (lc *leaseClock) Lost() <-chan struct{} { return lc.lost }

// Last is when the last keep-alive answer arrived.
func (lc *leaseClock) Last() time.Time {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.last
}
