package s3test

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/skippr-dev/skippr/testkit/netns"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// One server for every test below, like a package would use it.
func TestServer(t *testing.T) {
	srv := New(t)
	if !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("endpoint %s is not on loopback", srv.Endpoint)
	}

	t.Run("buckets are unique and usable", func(t *testing.T) {
		a, b := srv.NewBucket(t), srv.NewBucket(t)
		if a.Name == b.Name {
			t.Fatalf("two buckets named %s", a.Name)
		}
		_, err := a.Client.PutObject(ctxT(t), &s3.PutObjectInput{Bucket: aws.String(a.Name), Key: aws.String("k"), Body: strings.NewReader("v")})
		if err != nil {
			t.Fatal(err)
		}
		out, err := b.Client.ListObjectsV2(ctxT(t), &s3.ListObjectsV2Input{Bucket: aws.String(b.Name)})
		if err != nil || len(out.Contents) != 0 {
			t.Fatalf("second bucket not empty: %v %v", out, err)
		}
	})

	t.Run("exactly one of 16 conditional creates wins", func(t *testing.T) {
		bk := srv.NewBucket(t)
		var wg sync.WaitGroup
		errs := make([]error, 16)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = bk.Client.PutObject(ctxT(t), &s3.PutObjectInput{
					Bucket: aws.String(bk.Name), Key: aws.String("commits/1"), Body: bytes.NewReader([]byte{byte(i)}),
					IfNoneMatch: aws.String("*"),
				})
			})
		}
		wg.Wait()
		wins := 0
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
			case !IsStatus(err, http.StatusPreconditionFailed):
				t.Fatalf("writer %d: %v, want 412", i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d writers won", wins)
		}
	})

	t.Run("stale ETag is refused", func(t *testing.T) {
		bk := srv.NewBucket(t)
		put := func(body string, ifMatch *string) (*s3.PutObjectOutput, error) {
			return bk.Client.PutObject(ctxT(t), &s3.PutObjectInput{
				Bucket: aws.String(bk.Name), Key: aws.String("lease"), Body: strings.NewReader(body), IfMatch: ifMatch,
			})
		}
		v1, err := put("v1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := put("v2", v1.ETag); err != nil {
			t.Fatalf("IfMatch with the current ETag: %v", err)
		}
		if _, err := put("v3", v1.ETag); !IsStatus(err, http.StatusPreconditionFailed) {
			t.Fatalf("IfMatch with a stale ETag: %v, want 412", err)
		}
		_, err = bk.Client.PutObject(ctxT(t), &s3.PutObjectInput{
			Bucket: aws.String(bk.Name), Key: aws.String("missing"), Body: strings.NewReader("x"), IfMatch: v1.ETag,
		})
		if !IsStatus(err, http.StatusNotFound) {
			t.Fatalf("IfMatch on a missing key: %v, want 404", err)
		}
	})

	t.Run("listing pages", func(t *testing.T) {
		bk := srv.NewBucket(t)
		for i := range 7 {
			_, err := bk.Client.PutObject(ctxT(t), &s3.PutObjectInput{Bucket: aws.String(bk.Name), Key: aws.String(string(rune('a' + i))), Body: strings.NewReader("x")})
			if err != nil {
				t.Fatal(err)
			}
		}
		p := s3.NewListObjectsV2Paginator(bk.Client, &s3.ListObjectsV2Input{Bucket: aws.String(bk.Name), MaxKeys: aws.Int32(3), StartAfter: aws.String("a")})
		var keys []string
		pages := 0
		for p.HasMorePages() {
			page, err := p.NextPage(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, o := range page.Contents {
				keys = append(keys, aws.ToString(o.Key))
			}
		}
		if strings.Join(keys, "") != "bcdefg" || pages != 2 {
			t.Fatalf("keys %v in %d pages", keys, pages)
		}
	})

	t.Run("stop kills the process", func(t *testing.T) {
		other := New(t)
		other.Stop()
		if _, err := other.Client().ListBuckets(ctxT(t), &s3.ListBucketsInput{}); err == nil {
			t.Fatal("server still answers after Stop")
		}
	})
}

func TestBinaryMissing(t *testing.T) {
	t.Setenv("VERSITYGW", "/nonexistent/versitygw")
	_, err := Binary()
	if err == nil || !strings.Contains(err.Error(), "versitygw@v1.8.0") {
		t.Fatalf("got %v, want the install hint", err)
	}
}

func TestBucketName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)
	for _, name := range []string{"TestX", "TestLong/" + strings.Repeat("Sub_Test#", 20), "///", "Test--A__B"} {
		got := bucketName(name)
		if !valid.MatchString(got) || strings.Contains(got, "--") {
			t.Errorf("bucketName(%q) = %q is not a valid bucket name", name, got)
		}
	}
}

// TestInNetns: a server started in host a listens on a's address, is reachable from host b and not from the
// root namespace, and its own Client (which dials from inside a) serves the test binary.
func TestInNetns(t *testing.T) {
	n := netns.New(t, "s3tns")
	a, b := n.Host(t, "a"), n.Host(t, "b")
	srv := NewIn(t, a)
	if !strings.HasPrefix(srv.Endpoint, "http://"+a.Addr()+":") {
		t.Fatalf("endpoint %s is not on host a's address %s", srv.Endpoint, a.Addr())
	}
	bk := srv.NewBucket(t)
	if _, err := bk.Client.PutObject(ctxT(t), &s3.PutObjectInput{Bucket: aws.String(bk.Name), Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	out, err := srv.ClientVia(b.DialContext).ListObjectsV2(ctxT(t), &s3.ListObjectsV2Input{Bucket: aws.String(bk.Name)})
	if err != nil {
		t.Fatalf("list from host b: %v", err)
	}
	if len(out.Contents) != 1 || aws.ToString(out.Contents[0].Key) != "k" {
		t.Fatalf("host b lists %v, want the one object k", out.Contents)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	root := srv.ClientVia(nil)
	if _, err := root.ListBuckets(ctx, &s3.ListBucketsInput{}, func(o *s3.Options) { o.RetryMaxAttempts = 1 }); err == nil {
		t.Fatalf("the root namespace reached the server in host a at %s", srv.Endpoint)
	}
}
