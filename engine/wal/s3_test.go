package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func s3Open(t *testing.T, ttl time.Duration) (string, Options, *Log) {
	url, opts := s3Log(t, versity.Get(t).NewBucket(t), ttl)
	return url, opts, mustOpen(t, url, opts)
}

// The backend's correctness rests on the server: these check that our store
// gets exactly-one-winner creates and refused stale compare-and-swaps.
func TestS3ConditionalWrites(t *testing.T) {
	_, _, l := s3Open(t, time.Second)
	st := l.st.(*s3Store)

	const racers = 16
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			errs[i] = st.create(ctxT(t), commitName(1), []byte(fmt.Sprintf("writer %d", i)))
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both created the object", winner, i)
			}
			winner = i
		case !errors.Is(err, errExists):
			t.Fatalf("writer %d: %v (want errExists)", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	got, err := st.get(ctxT(t), commitName(1))
	if err != nil || string(got) != fmt.Sprintf("writer %d", winner) {
		t.Fatalf("object holds %q (%v), winner was %d", got, err, winner)
	}

	tag1, err := st.putObject(ctxT(t), "cas", []byte("v1"), "*", "")
	if err != nil {
		t.Fatal(err)
	}
	tag2, err := st.putObject(ctxT(t), "cas", []byte("v2"), "", tag1)
	if err != nil {
		t.Fatalf("CAS with the current ETag: %v", err)
	}
	if _, err := st.putObject(ctxT(t), "cas", []byte("v3"), "", tag1); !errors.Is(err, errCASLost) {
		t.Fatalf("CAS with a stale ETag: %v (want errCASLost)", err)
	}
	if _, err := st.putObject(ctxT(t), "missing", []byte("v1"), "", tag2); !errors.Is(err, errCASLost) {
		t.Fatalf("CAS on a missing key: %v (want errCASLost)", err)
	}
	if got, _ := st.get(ctxT(t), "cas"); string(got) != "v2" {
		t.Fatalf("object holds %q after the refused CAS", got)
	}
}

func TestS3ServerVerifiesOurChecksum(t *testing.T) {
	b := versity.Get(t).NewBucket(t)
	_, err := b.Client.PutObject(ctxT(t), &s3.PutObjectInput{
		Bucket: aws.String(b.Name), Key: aws.String("x"), Body: bytes.NewReader([]byte("payload")),
		ChecksumCRC32C: aws.String("AAAAAA=="),
	})
	if err == nil {
		t.Fatal("server accepted a body whose CRC-32C does not match the header")
	}
	if _, err := b.Client.HeadObject(ctxT(t), &s3.HeadObjectInput{Bucket: aws.String(b.Name), Key: aws.String("x")}); err == nil {
		t.Fatal("object stored despite the checksum mismatch")
	}
}

// waitAcquire retries Acquire until the previous lease expires.
func waitAcquire(t *testing.T, l *Log, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := l.Acquire(ctxT(t))
		if err == nil {
			return
		}
		if !errors.Is(err, ErrLocked) || time.Now().After(deadline) {
			t.Fatalf("Acquire: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestS3LeaseTakeoverAfterExpiry(t *testing.T) {
	const ttl = 800 * time.Millisecond
	url, opts, l1 := s3Open(t, ttl)
	if err := l1.Acquire(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, l1, []Frame{batchFrame(t, "s", 5, 1)}, "a")
	l1.lease.(*s3Lease).halt() // the writer hangs: no more renewals, no release

	opts2 := opts
	opts2.Owner = "replacement"
	l2 := mustOpen(t, url, opts2)
	old, _, err := l2.st.(*s3Store).readLease(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	err = l2.Acquire(ctxT(t))
	wantErr(t, err, ErrLocked, "held by s3-test (epoch 1) until "+old.Expires.Format(time.RFC3339Nano))
	waitAcquire(t, l2, 5*ttl)
	if now := time.Now(); now.Before(old.Expires) {
		t.Fatalf("took over at %s, before the old lease expired at %s", now, old.Expires)
	}

	_, err = l1.Commit(ctxT(t), []Frame{batchFrame(t, "s", 5, 2)}, []byte("b"))
	wantErr(t, err, ErrFenced, "not renewed in time")

	h := mustHead(t, l2)
	if h.Epoch != 2 || h.Holder != "replacement" || h.LastSeq != 2 || string(h.LastCheckpoint) != "a" {
		t.Fatalf("head after takeover: %+v", h)
	}
	rec := mustCommit(t, l2, []Frame{batchFrame(t, "s", 5, 3)}, "c")
	if rec.Seq != 3 || rec.Epoch != 2 {
		t.Fatalf("new writer's commit: %+v", rec)
	}
	recs := mustEntries(t, l2, 0)
	if !slices.Equal(seqsOf(recs), []uint64{1, 2, 3}) {
		t.Fatalf("entries: %v", seqsOf(recs))
	}
	fence := recs[1]
	if fence.Segment != "" || fence.Epoch != 2 || string(fence.Checkpoint) != "a" || fence.Rows != nil {
		t.Fatalf("fence entry: %+v", fence)
	}
	if frames, err := l2.ReadSegment(ctxT(t), fence); err != nil || len(frames) != 0 {
		t.Fatalf("fence ReadSegment: %d frames, %v", len(frames), err)
	}
	// The old writer's segment for seq 2 never became an entry and is gone.
	if n := names(t, l2, segmentsDir); !slices.Equal(n, []string{recs[0].Segment, recs[2].Segment}) {
		t.Fatalf("segments: %v", n)
	}
	if err := l1.Close(); err != nil {
		t.Fatalf("closing the fenced writer: %v", err)
	}
	if h := mustHead(t, l2); h.Holder != "replacement" {
		t.Fatalf("the fenced writer's Close released the new writer's lease: %+v", h)
	}
}

func TestS3RenewalKeepsTheLease(t *testing.T) {
	const ttl = time.Second
	url, opts, l1 := s3Open(t, ttl)
	if err := l1.Acquire(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	opts2 := opts
	opts2.Owner = "rival"
	l2 := mustOpen(t, url, opts2)
	for i := range 6 { // 6 × 400ms: well past the first expiry
		time.Sleep(ttl * 2 / 5)
		mustCommit(t, l1, []Frame{batchFrame(t, "s", 1, uint64(i))}, fmt.Sprint(i))
		wantErr(t, l2.Acquire(ctxT(t)), ErrLocked, "held by s3-test")
	}
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l2.Acquire(ctxT(t)); err != nil {
		t.Fatalf("Acquire right after a clean Close: %v", err)
	}
	// A released lease needs no fence: the next entry is the rival's own.
	if rec := mustCommit(t, l2, nil, "x"); rec.Seq != 7 || rec.Segment == "" {
		t.Fatalf("rival's first commit: %+v", rec)
	}
}

func TestS3RenewalDetectsTakeover(t *testing.T) {
	_, _, l1 := s3Open(t, time.Minute)
	if err := l1.Acquire(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	lease := l1.lease.(*s3Lease)
	lease.halt()
	// Someone replaced the lease behind our back (a clock far ahead of ours).
	body, err := sealRecord(kindLease, leaseRecord{Owner: "usurper", Token: "t", Epoch: 2, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.st.put(ctxT(t), leaseName, body); err != nil {
		t.Fatal(err)
	}
	wantErr(t, lease.renew(), ErrFenced, "taken over by usurper (epoch 2)")
	_, err = l1.Commit(ctxT(t), nil, nil)
	wantErr(t, err, ErrFenced, "taken over by usurper")
}

// A writer whose clock says its lease is still valid, after a takeover, must
// still be unable to commit: the fence entry takes its next seq.
func TestS3FenceStopsZombieWriter(t *testing.T) {
	const ttl = 500 * time.Millisecond
	url, opts, l1 := s3Open(t, ttl)
	if err := l1.Acquire(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, l1, []Frame{batchFrame(t, "s", 5, 1)}, "a")
	zombie := l1.lease.(*s3Lease)
	zombie.halt()

	opts2 := opts
	opts2.Owner = "successor"
	l2 := mustOpen(t, url, opts2)
	waitAcquire(t, l2, 5*ttl)

	zombie.mu.Lock()
	zombie.validUntil = time.Now().Add(time.Hour) // its clock is wrong
	zombie.mu.Unlock()
	_, err := l1.Commit(ctxT(t), []Frame{batchFrame(t, "s", 5, 2)}, []byte("zombie"))
	wantErr(t, err, ErrFenced, "wal commit 2: commit record", "was written by another writer")
	_, err = l1.Commit(ctxT(t), []Frame{batchFrame(t, "s", 5, 2)}, []byte("zombie"))
	wantErr(t, err, ErrFenced, "refusing to write after an earlier failure")

	mustCommit(t, l2, []Frame{batchFrame(t, "s", 5, 3)}, "c")
	recs := mustEntries(t, l2, 0)
	if !slices.Equal(seqsOf(recs), []uint64{1, 2, 3}) || recs[1].Segment != "" || recs[1].Epoch != 2 {
		t.Fatalf("entries: %+v", recs)
	}
	for _, r := range recs {
		if string(r.Checkpoint) == "zombie" {
			t.Fatalf("zombie entry committed: %+v", r)
		}
	}
	if n := names(t, l2, segmentsDir); len(n) != 2 {
		t.Fatalf("zombie segment left behind: %v", n)
	}
}

// If the old writer's commit lands between the new writer's scan and its
// fence, the fence adopts it and takes the next seq.
func TestFenceAdoptsLateCommit(t *testing.T) {
	url, opts := localBackend().fresh(t)
	l := mustAcquire(t, url, opts)
	mustCommit(t, l, []Frame{batchFrame(t, "s", 1, 1)}, "a")
	mustCommit(t, l, []Frame{batchFrame(t, "s", 1, 2)}, "b")
	stale := logState{last: 1, lastCkpt: []byte("a"), seqs: []uint64{1}}
	if err := l.fence(ctxT(t), l.lease, &stale, "test"); err != nil {
		t.Fatal(err)
	}
	if stale.last != 3 || string(stale.lastCkpt) != "b" || !slices.Equal(stale.seqs, []uint64{1, 2, 3}) {
		t.Fatalf("state after fence: %+v", stale)
	}
	rec, err := l.readCommit(ctxT(t), 3)
	if err != nil || rec.Segment != "" || string(rec.Checkpoint) != "b" {
		t.Fatalf("fence record: %+v %v", rec, err)
	}
}

// The log on S3 is all the state there is: a writer process dies (SIGKILL,
// nothing released, no local files kept), and a brand-new Log elsewhere picks
// up with every entry intact.
func TestS3RestartFromBucketAlone(t *testing.T) {
	const ttl = time.Second
	b := versity.Get(t).NewBucket(t)
	url, opts := s3Log(t, b, ttl)
	_, _, kill := startWriter(t, url,
		"WAL_TEST_HELPER_COMMITS=5", "WAL_TEST_HELPER_TTL="+ttl.String(),
		"WAL_TEST_S3_ENDPOINT="+b.Endpoint, "WAL_TEST_S3_KEY="+b.AccessKey, "WAL_TEST_S3_SECRET="+b.SecretKey)
	kill()

	opts.Owner = "fresh-host"
	l := mustOpen(t, url, opts)
	if h := mustHead(t, l); h.LastSeq != 5 || string(h.LastCheckpoint) != "ckpt-5" || h.Holder != "helper-process" {
		t.Fatalf("head seen right after the crash: %+v", h)
	}
	waitAcquire(t, l, 5*ttl)
	h := mustHead(t, l)
	if h.LastSeq != 6 || string(h.LastCheckpoint) != "ckpt-5" || h.Epoch != 2 {
		t.Fatalf("head after taking over: %+v", h)
	}
	recs := mustEntries(t, l, 0)
	if !slices.Equal(seqsOf(recs), []uint64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("entries: %v", seqsOf(recs))
	}
	for i, r := range recs[:5] {
		want, err := helperFrames(i + 1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.ReadSegment(ctxT(t), r)
		if err != nil {
			t.Fatal(err)
		}
		if !framesEqual(got, want) || string(r.Checkpoint) != fmt.Sprintf("ckpt-%d", i+1) || r.Rows["public.orders"] != int64(21+i) {
			t.Fatalf("entry %d differs from what the dead writer committed", r.Seq)
		}
	}
	if rec := mustCommit(t, l, []Frame{batchFrame(t, "s", 3, 9)}, "ckpt-7"); rec.Seq != 7 {
		t.Fatalf("next commit seq %d", rec.Seq)
	}
	// A destination that had applied through 3 catches up.
	if got := seqsOf(mustEntries(t, l, 3)); !slices.Equal(got, []uint64{4, 5, 6, 7}) {
		t.Fatalf("Entries(3) = %v", got)
	}
}

func TestS3ListingPages(t *testing.T) {
	url, opts, _ := s3Open(t, time.Second)
	l := mustAcquire(t, url, opts)
	l.st.(*s3Store).pageSize = 2
	for i := range 7 {
		mustCommit(t, l, []Frame{batchFrame(t, "s", 1, uint64(i))}, fmt.Sprint(i))
	}
	// Neighbour prefixes and deeper keys must not leak into this log's listing.
	st := l.st.(*s3Store)
	for _, key := range []string{"pipelines/orders-old/" + commitName(8), "pipelines/orders/" + commitsDir + "/nested/" + pad(8) + recordExt} {
		if _, err := st.client.PutObject(ctxT(t), &s3.PutObjectInput{Bucket: aws.String(st.bucket), Key: aws.String(key), Body: bytes.NewReader(nil)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := seqsOf(mustEntries(t, l, 0)); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("Entries(0) over 2-key pages = %v", got)
	}
	if got := seqsOf(mustEntries(t, l, 4)); !slices.Equal(got, []uint64{5, 6, 7}) {
		t.Fatalf("Entries(4) = %v", got)
	}
	if h := mustHead(t, l); h.Entries != 7 || h.LastSeq != 7 {
		t.Fatalf("head: %+v", h)
	}
}

// A writer restarted on the same host after a SIGKILL does not wait out the TTL: the recorded pid is dead, and
// a dead process cannot commit.
func TestS3TakeoverFromDeadProcessOnThisHost(t *testing.T) {
	const ttl = time.Hour
	b := versity.Get(t).NewBucket(t)
	url, opts := s3Log(t, b, ttl)
	_, _, kill := startWriter(t, url,
		"WAL_TEST_HELPER_COMMITS=2", "WAL_TEST_HELPER_TTL="+ttl.String(),
		"WAL_TEST_S3_ENDPOINT="+b.Endpoint, "WAL_TEST_S3_KEY="+b.AccessKey, "WAL_TEST_S3_SECRET="+b.SecretKey)
	kill()
	l := mustOpen(t, url, opts)
	if err := l.Acquire(ctxT(t)); err != nil {
		t.Fatalf("acquire after the holder died on this host: %v", err)
	}
	if h := mustHead(t, l); h.LastSeq != 3 || string(h.LastCheckpoint) != "ckpt-2" {
		t.Fatalf("head after takeover (want the fence entry 3 carrying ckpt-2): %+v", h)
	}
}

// Containers share a host name but not pids: a holder in another PID namespace whose pid means nothing here
// must keep its lease until it expires, however dead that pid looks from here.
func TestS3NoTakeoverAcrossPIDNamespaces(t *testing.T) {
	const ttl = time.Hour
	b := versity.Get(t).NewBucket(t)
	url, opts := s3Log(t, b, ttl)
	here := thisProcess()
	if here.pidSpace == "" {
		t.Fatal("no boot id or PID namespace in /proc: the shortcut can never apply here")
	}
	dead := deadPID(t)
	for _, tc := range []struct {
		name     string
		holder   identity
		takeover bool
	}{
		{"same host name, another PID namespace", identity{host: here.host, pidSpace: here.pidSpace + "-other", pid: dead}, false},
		{"same host name, another boot", identity{host: here.host, pidSpace: "boot 00000000 pidns 1", pid: dead}, false},
		{"lease written before pid spaces were recorded", identity{host: here.host, pid: dead}, false},
		{"same PID namespace, holder exited", identity{host: "another-name", pidSpace: here.pidSpace, pid: dead}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := url + "/" + strings.ReplaceAll(tc.name, " ", "-")
			holder := mustOpen(t, u, opts)
			holder.st.(*s3Store).self = tc.holder
			if err := holder.Acquire(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			mustCommit(t, holder, []Frame{batchFrame(t, "s", 1, 1)}, "a")
			var logs bytes.Buffer
			o := opts
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			taker := mustOpen(t, u, o)
			err := taker.Acquire(ctxT(t))
			if !tc.takeover {
				wantErr(t, err, ErrLocked, "held by")
				if _, cerr := holder.Commit(ctxT(t), []Frame{batchFrame(t, "s", 1, 2)}, []byte("b")); cerr != nil {
					t.Fatalf("the holder lost its log to a writer that should have waited: %v", cerr)
				}
				return
			}
			if err != nil {
				t.Fatalf("acquire from a dead holder in this PID namespace: %v", err)
			}
			if !strings.Contains(logs.String(), "has exited") || strings.Contains(logs.String(), "expired at") {
				t.Fatalf("takeover log should say the holder exited, not that its lease expired:\n%s", logs.String())
			}
		})
	}
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if pidAlive(pid) {
		t.Fatalf("pid %d reused at once", pid)
	}
	return pid
}

// In fleet mode the epoch comes from an etcd election: a higher one takes a live lease at once and fences its
// holder (a paused process that still believes it leads), a lower one is refused, an equal one waits as usual.
func TestS3ElectedEpoch(t *testing.T) {
	url, opts := s3Log(t, versity.Get(t).NewBucket(t), time.Minute)
	opts.Epoch = 100
	l1 := mustOpen(t, url, opts)
	if err := l1.Acquire(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if h := mustHead(t, l1); h.Epoch != 100 {
		t.Fatalf("epoch %d, want the elected 100", h.Epoch)
	}
	mustCommit(t, l1, []Frame{batchFrame(t, "s", 5, 1)}, "a")
	zombie := l1.lease.(*s3Lease)
	zombie.halt() // paused: its lease stays valid for a minute

	for _, c := range []struct {
		epoch uint64
		want  error
		msg   string
	}{
		{50, ErrFenced, "elected epoch 50 is older than the log's (lease epoch 100 by s3-test"},
		{100, ErrLocked, "held by s3-test (epoch 100)"},
	} {
		o := opts
		o.Owner, o.Epoch = "other", c.epoch
		wantErr(t, mustOpen(t, url, o).Acquire(ctxT(t)), c.want, c.msg)
	}

	o := opts
	o.Owner, o.Epoch = "successor", 200
	l2 := mustOpen(t, url, o)
	if err := l2.Acquire(ctxT(t)); err != nil {
		t.Fatalf("a newer election must take the live lease at once: %v", err)
	}
	_, err := l1.Commit(ctxT(t), []Frame{batchFrame(t, "s", 5, 2)}, []byte("zombie"))
	wantErr(t, err, ErrFenced, "wal commit 2: commit record")
	wantErr(t, zombie.renew(), ErrFenced, "taken over by successor (epoch 200)")

	mustCommit(t, l2, []Frame{batchFrame(t, "s", 5, 3)}, "c")
	recs := mustEntries(t, l2, 0)
	if !slices.Equal(seqsOf(recs), []uint64{1, 2, 3}) || recs[1].Segment != "" || recs[1].Epoch != 200 || recs[2].Epoch != 200 {
		t.Fatalf("entries: %+v", recs)
	}
	for _, r := range recs {
		if string(r.Checkpoint) == "zombie" {
			t.Fatalf("zombie entry committed: %+v", r)
		}
	}
	// The same term again after a clean Close (a retry in one election term): allowed, no fence.
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	l3 := mustOpen(t, url, o)
	if err := l3.Acquire(ctxT(t)); err != nil {
		t.Fatalf("re-acquire in the same term: %v", err)
	}
	if rec := mustCommit(t, l3, nil, "d"); rec.Seq != 4 || rec.Segment == "" || rec.Epoch != 200 {
		t.Fatalf("commit after re-acquire: %+v", rec)
	}
}
