package wal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Options configures the S3 backend. Empty keys mean the default AWS
// credential chain (environment, shared config, instance role).
type S3Options struct {
	Endpoint        string // e.g. http://127.0.0.1:7070 or an R2 endpoint; empty: AWS
	Region          string // empty: from the environment, else us-east-1
	PathStyle       bool   // bucket in the path instead of the host name (most S3-compatible servers)
	AccessKeyID     string
	SecretAccessKey string
}

type s3Store struct {
	client *s3.Client
	bucket string
	prefix string // no leading or trailing slash; may be empty
	// pageSize caps keys per ListObjectsV2 page (0: server default, 1000 on AWS); tests lower it.
	pageSize int32
	// self is who this process is in the lease; tests set another PID namespace's.
	self identity
}

func newS3Store(ctx context.Context, bucket, prefix string, o S3Options) (*s3Store, error) {
	var load []func(*config.LoadOptions) error
	if o.Region != "" {
		load = append(load, config.WithRegion(o.Region))
	}
	if o.AccessKeyID != "" || o.SecretAccessKey != "" {
		load = append(load, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1" // S3-compatible servers need some region to sign with
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
	})
	s := &s3Store{client: client, bucket: bucket, prefix: prefix, self: thisProcess()}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return nil, fmt.Errorf("bucket s3://%s: %w", bucket, err)
	}
	return s, nil
}

func (s *s3Store) key(name string) string {
	if s.prefix == "" {
		return name
	}
	if name == "" {
		return s.prefix
	}
	return s.prefix + "/" + name
}

func (s *s3Store) url(name string) string {
	k := s.key(name)
	if k == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + k
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func (s *s3Store) prepare(context.Context) error { return nil }
func (s *s3Store) sweep(context.Context) error   { return nil }
func (s *s3Store) close() error                  { return nil }

// putObject PUTs data with its CRC-32C, which S3 verifies on arrival, and
// optional conditions. It returns the new ETag.
func (s *s3Store) putObject(ctx context.Context, name string, data []byte, ifNoneMatch, ifMatch string) (string, error) {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32c(data))
	in := &s3.PutObjectInput{
		Bucket:         aws.String(s.bucket),
		Key:            aws.String(s.key(name)),
		Body:           bytes.NewReader(data),
		ContentLength:  aws.Int64(int64(len(data))),
		ChecksumCRC32C: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
	}
	if ifNoneMatch != "" {
		in.IfNoneMatch = aws.String(ifNoneMatch)
	}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	}
	// AWS answers 409 ConditionalRequestConflict while a competing conditional
	// write to the key is in flight, and asks the client to retry.
	for attempt := 0; ; attempt++ {
		out, err := s.client.PutObject(ctx, in)
		if err == nil {
			return aws.ToString(out.ETag), nil
		}
		switch httpStatus(err) {
		case http.StatusPreconditionFailed:
			if ifNoneMatch != "" {
				return "", fmt.Errorf("%s: %w", s.url(name), errExists)
			}
			return "", fmt.Errorf("%s: %w", s.url(name), errCASLost)
		case http.StatusNotFound:
			if ifMatch != "" { // the object to compare against is gone
				return "", fmt.Errorf("%s: %w", s.url(name), errCASLost)
			}
		case http.StatusConflict:
			if attempt < 5 {
				select {
				case <-time.After(time.Duration(attempt+1) * 50 * time.Millisecond):
					if _, serr := in.Body.(*bytes.Reader).Seek(0, io.SeekStart); serr != nil {
						return "", serr
					}
					continue
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
		}
		return "", fmt.Errorf("put %s: %w", s.url(name), err)
	}
}

func (s *s3Store) put(ctx context.Context, name string, data []byte) error {
	_, err := s.putObject(ctx, name, data, "", "")
	return err
}

func (s *s3Store) create(ctx context.Context, name string, data []byte) error {
	_, err := s.putObject(ctx, name, data, "*", "")
	return err
}

func (s *s3Store) getETag(ctx context.Context, name string) ([]byte, string, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.key(name))})
	if err != nil {
		if httpStatus(err) == http.StatusNotFound {
			return nil, "", errNotFound
		}
		return nil, "", fmt.Errorf("get %s: %w", s.url(name), err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", s.url(name), err)
	}
	return b, aws.ToString(out.ETag), nil
}

func (s *s3Store) get(ctx context.Context, name string) ([]byte, error) {
	b, _, err := s.getETag(ctx, name)
	return b, err
}

func (s *s3Store) list(ctx context.Context, dir, startAfter string) ([]object, error) {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(s.key(dir) + "/")}
	if startAfter != "" {
		in.StartAfter = aws.String(s.key(startAfter))
	}
	if s.pageSize > 0 {
		in.MaxKeys = aws.Int32(s.pageSize)
	}
	strip := ""
	if s.prefix != "" {
		strip = s.prefix + "/"
	}
	var out []object
	p := s3.NewListObjectsV2Paginator(s.client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", s.url(dir), err)
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), strip)
			if strings.Contains(strings.TrimPrefix(name, dir+"/"), "/") {
				continue // deeper "directories" are not ours
			}
			out = append(out, object{name: name, size: aws.ToInt64(o.Size)})
		}
	}
	return out, nil
}

func (s *s3Store) remove(ctx context.Context, name string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.key(name))})
	if err != nil && httpStatus(err) != http.StatusNotFound {
		return fmt.Errorf("delete %s: %w", s.url(name), err)
	}
	return nil
}

// leaseRecord is the body of lease.json.
type leaseRecord struct {
	Owner string `json:"owner"`
	// PIDSpace and PID let a writer restarted in the same PID namespace of the same boot take over at once
	// from its own dead predecessor instead of waiting out the TTL: a dead process cannot commit. Host is
	// for people only (see identity).
	Host     string `json:"host,omitempty"`
	PIDSpace string `json:"pid_space,omitempty"`
	PID      int    `json:"pid,omitempty"`
	// Token is random per Acquire, so a writer recognises its own lease even
	// when another Log runs under the same owner name.
	Token    string    `json:"token"`
	Epoch    uint64    `json:"epoch"`
	Expires  time.Time `json:"expires"`
	Released bool      `json:"released,omitempty"`
}

func (s *s3Store) readLease(ctx context.Context) (leaseRecord, string, error) {
	var rec leaseRecord
	b, etag, err := s.getETag(ctx, leaseName)
	if err != nil {
		return rec, "", err
	}
	if err := openRecord(kindLease, b, &rec); err != nil {
		return rec, "", fmt.Errorf("%s: %w", s.url(leaseName), err)
	}
	return rec, etag, nil
}

func (s *s3Store) holder(ctx context.Context) (string, uint64, error) {
	rec, _, err := s.readLease(ctx)
	if errors.Is(err, errNotFound) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	if rec.Released || !time.Now().Before(rec.Expires) {
		return "", rec.Epoch, nil
	}
	return rec.Owner, rec.Epoch, nil
}

func (s *s3Store) lock(ctx context.Context, req lockRequest) (writerLease, error) {
	tok := make([]byte, 8)
	rand.Read(tok)
	// Two attempts cover losing a race to another Acquire; the re-read then
	// names the winner.
	for attempt := 0; attempt < 3; attempt++ {
		prev, etag, err := s.readLease(ctx)
		found := err == nil
		if err != nil && !errors.Is(err, errNotFound) {
			return nil, err
		}
		if req.epoch != 0 && (req.epoch < req.minEpoch || found && req.epoch < prev.Epoch) {
			return nil, fmt.Errorf("wal %s: %w: elected epoch %d is older than the log's (lease epoch %d by %s, newest segment epoch %d): a newer holder was elected since",
				s.url(""), ErrFenced, req.epoch, prev.Epoch, prev.Owner, req.minEpoch)
		}
		var why string // why a lease nobody released may be taken now
		if found && !prev.Released {
			switch {
			case req.epoch > prev.Epoch:
				why = fmt.Sprintf("a newer election (epoch %d over %d) replaces its holder %s; lease valid until %s",
					req.epoch, prev.Epoch, prev.Owner, prev.Expires.Format(time.RFC3339Nano))
			case !time.Now().Before(prev.Expires):
				why = fmt.Sprintf("its lease expired at %s", prev.Expires.Format(time.RFC3339Nano))
			case s.self.deadHere(prev.PIDSpace, prev.PID):
				why = fmt.Sprintf("its process (pid %d, this machine and PID namespace) has exited; lease valid until %s", prev.PID, prev.Expires.Format(time.RFC3339Nano))
			default:
				return nil, fmt.Errorf("wal %s: %w: held by %s (epoch %d) until %s",
					s.url(""), ErrLocked, prev.Owner, prev.Epoch, prev.Expires.Format(time.RFC3339Nano))
			}
		}
		t0 := time.Now()
		rec := leaseRecord{
			Owner:    req.owner,
			Host:     s.self.host,
			PIDSpace: s.self.pidSpace,
			PID:      s.self.pid,
			Token:    hex.EncodeToString(tok),
			Epoch:    max(prev.Epoch, req.minEpoch) + 1,
			Expires:  t0.UTC().Add(req.ttl),
		}
		if req.epoch != 0 {
			rec.Epoch = req.epoch
		}
		body, err := sealRecord(kindLease, rec)
		if err != nil {
			return nil, err
		}
		var newTag string
		if found {
			newTag, err = s.putObject(ctx, leaseName, body, "", etag)
		} else {
			newTag, err = s.putObject(ctx, leaseName, body, "*", "")
		}
		if errors.Is(err, errExists) || errors.Is(err, errCASLost) {
			continue
		}
		if err != nil {
			return nil, err
		}
		l := &s3Lease{
			s: s, ttl: req.ttl, margin: req.ttl / 4, rec: rec, log: req.log,
			ep: rec.Epoch, own: rec.Owner,
			took:       why,
			etag:       newTag,
			validUntil: t0.Add(req.ttl - req.ttl/4),
			stop:       make(chan struct{}),
			done:       make(chan struct{}),
		}
		l.renewing, l.cancelRenew = context.WithCancel(context.Background())
		go l.renewLoop()
		return l, nil
	}
	return nil, fmt.Errorf("wal %s: %w: lost three races for %s", s.url(""), ErrLocked, s.url(leaseName))
}

// s3Lease is a time-bounded lease renewed by compare-and-swap on lease.json's
// ETag; doc.go explains why that makes a fenced writer stop in time.
type s3Lease struct {
	s      *s3Store
	ttl    time.Duration
	margin time.Duration
	log    *slog.Logger
	took   string // why the previous holder's unreleased lease was taken; "" when it was free
	ep     uint64 // immutable copies of rec's epoch and owner, read without mu
	own    string
	stop   chan struct{}
	done   chan struct{}
	// renewing ends a renewal in flight (cancelRenew) when a bounded release cannot wait for it.
	renewing    context.Context
	cancelRenew context.CancelFunc

	mu         sync.Mutex
	rec        leaseRecord
	etag       string
	validUntil time.Time // carries a monotonic reading: immune to wall-clock steps
	lost       error
	stopped    bool
}

func (l *s3Lease) epoch() uint64     { return l.ep }
func (l *s3Lease) owner() string     { return l.own }
func (l *s3Lease) takenOver() string { return l.took }

func (l *s3Lease) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

func (l *s3Lease) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if now := time.Now(); !now.Before(l.validUntil) {
		return fmt.Errorf("lease %s (epoch %d) not renewed in time: valid until %s minus a %s safety margin, now %s: %w",
			l.s.url(leaseName), l.ep, l.rec.Expires.Format(time.RFC3339Nano), l.margin,
			now.UTC().Format(time.RFC3339Nano), ErrFenced)
	}
	return nil
}

func (l *s3Lease) renewLoop() {
	defer close(l.done)
	every := l.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		next := every
		if err := l.renew(); err != nil {
			if errors.Is(err, ErrFenced) {
				l.log.Error("wal lease lost", "lease", l.s.url(leaseName), "epoch", l.ep, "err", err)
				return
			}
			l.log.Warn("wal lease renewal failed; retrying", "lease", l.s.url(leaseName), "epoch", l.ep, "err", err)
			next = max(l.ttl/10, 10*time.Millisecond)
		}
		t.Reset(next)
	}
}

func (l *s3Lease) renew() error {
	// A renewal that takes longer than the renewal period is useless; bound it.
	ctx, cancel := context.WithTimeout(l.renewing, l.ttl/3)
	defer cancel()
	l.mu.Lock()
	rec, etag := l.rec, l.etag
	l.mu.Unlock()
	t0 := time.Now()
	rec.Expires = t0.UTC().Add(l.ttl)
	body, err := sealRecord(kindLease, rec)
	if err != nil {
		return err
	}
	newTag, err := l.s.putObject(ctx, leaseName, body, "", etag)
	if errors.Is(err, errCASLost) {
		// Maybe our previous renewal landed but its answer was lost: the
		// object is then still ours, with an ETag we never saw.
		cur, curTag, rerr := l.s.readLease(ctx)
		if rerr != nil && !errors.Is(rerr, errNotFound) {
			return fmt.Errorf("lease %s: CAS failed and re-read failed: %w", l.s.url(leaseName), rerr)
		}
		if rerr == nil && cur.Token == rec.Token && cur.Epoch == rec.Epoch && !cur.Released {
			l.mu.Lock()
			l.etag = curTag
			l.mu.Unlock()
			return fmt.Errorf("lease %s: adopted ETag after a lost response", l.s.url(leaseName))
		}
		lost := fmt.Errorf("lease %s (epoch %d) taken over by %s (epoch %d): %w",
			l.s.url(leaseName), rec.Epoch, cur.Owner, cur.Epoch, ErrFenced)
		l.mu.Lock()
		l.lost = lost
		l.mu.Unlock()
		return lost
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.rec, l.etag = rec, newTag
	l.validUntil = t0.Add(l.ttl - l.margin)
	l.mu.Unlock()
	return nil
}

// halt stops renewing without releasing: what a crashed writer leaves behind.
func (l *s3Lease) halt() {
	l.mu.Lock()
	already := l.stopped
	l.stopped = true
	l.mu.Unlock()
	if !already {
		close(l.stop)
	}
	<-l.done
}

func (l *s3Lease) release(ctx context.Context) error {
	// A renewal in flight may take up to a third of the TTL on an unreachable store: end it with ctx.
	stop := context.AfterFunc(ctx, l.cancelRenew)
	defer stop()
	l.halt()
	defer l.cancelRenew()
	l.mu.Lock()
	rec, etag, lost := l.rec, l.etag, l.lost
	l.lost = fmt.Errorf("lease %s released: %w", l.s.url(leaseName), ErrClosed)
	l.mu.Unlock()
	if lost != nil {
		return nil // someone else holds it now; nothing of ours to release
	}
	rec.Released = true
	rec.Expires = time.Now().UTC()
	body, err := sealRecord(kindLease, rec)
	if err != nil {
		return err
	}
	_, err = l.s.putObject(ctx, leaseName, body, "", etag)
	if errors.Is(err, errCASLost) {
		return nil
	}
	return err
}
