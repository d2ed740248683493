package registry

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/skippr-dev/skippr/testkit/s3test"
)

// A registry folder uploaded to a real S3-compatible server (versitygw on
// 127.0.0.1) installs like any other, including Ensure and the error cases.
func TestS3Registry(t *testing.T) {
	srv := s3test.New(t)
	bk := srv.NewBucket(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", s3test.Region)
	// Keep the SDK from reading the developer's own AWS files.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))

	f := newFixture(t)
	art := f.publish("echo", "1.0.0", "source", 1)
	f.sign()
	ctx := testCtx(t)
	err := filepath.WalkDir(f.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(f.dir, p)
		fh, err := os.Open(p)
		if err != nil {
			return err
		}
		defer fh.Close()
		_, err = bk.Client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bk.Name), Key: aws.String("reg/v1/" + filepath.ToSlash(rel)), Body: fh})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	q := "?endpoint=" + url.QueryEscape(srv.Endpoint) + "&path_style=true"
	regURL := "s3://" + bk.Name + "/reg/v1" + q

	home := t.TempDir()
	lockPath := filepath.Join(t.TempDir(), "skippr.lock")
	c := newClient(t, home, nil, f.reg(regURL))
	inst, err := c.Ensure(ctx, EnsureRequest{Name: "echo", Constraint: "~> 1.0", LockPath: lockPath})
	if err != nil {
		t.Fatal(err)
	}
	if inst.SHA256 != art.SHA256 || inst.Registry != "s3://"+bk.Name+"/reg/v1"+q {
		t.Fatalf("installed %+v", inst)
	}
	if err := VerifyFile(inst.Path, art.SHA256); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		url  string
		want error
		msg  string
	}{
		{"missing prefix", "s3://" + bk.Name + "/nope" + q, ErrNotFound, "NoSuchKey"},
		{"missing bucket", "s3://no-such-bucket-" + strings.ToLower(bk.Name[len(bk.Name)-8:]) + "/reg" + q, ErrNotFound, "NoSuchBucket"},
		{"unreachable", "s3://" + bk.Name + "/reg/v1?endpoint=" + url.QueryEscape(closedPortURL(t)) + "&path_style=true", ErrUnreachable, "127.0.0.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			_, err := newClient(t, home, nil, f.reg(tc.url)).Install(ctx, "echo", "", "")
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
			assertNothingInstalled(t, home)
		})
	}
}
