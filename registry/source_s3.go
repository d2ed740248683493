package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// s3Source reads a registry stored in an S3 bucket (or any S3-compatible
// store) under a prefix. Settings come from the URL query so a registry entry
// in the trust store or lock file is self-contained:
//
//	s3://bucket/prefix?region=eu-west-1&endpoint=http://127.0.0.1:9000&path_style=true
//
// Credentials come from the environment (the AWS default chain: AWS_ACCESS_KEY_ID,
// AWS_PROFILE, instance roles, ...); anonymous=true sends unsigned requests,
// for public buckets.
type s3Source struct {
	url                  string
	bucket, prefix       string
	region, endpoint     string
	pathStyle, anonymous bool

	mu     sync.Mutex
	client *s3.Client
}

func newS3Source(norm string, u *url.URL) (*s3Source, error) {
	s := &s3Source{
		url:    norm,
		bucket: u.Host,
		prefix: strings.Trim(u.Path, "/"),
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "region", "endpoint", "path_style", "anonymous":
		default:
			return nil, fmt.Errorf("%w: registry URL %s: unknown parameter %q (want region, endpoint, path_style, anonymous)", ErrInvalid, norm, k)
		}
	}
	s.region = q.Get("region")
	s.endpoint = q.Get("endpoint")
	var err error
	if v := q.Get("path_style"); v != "" {
		if s.pathStyle, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("%w: registry URL %s: path_style=%q is not a boolean", ErrInvalid, norm, v)
		}
	}
	if v := q.Get("anonymous"); v != "" {
		if s.anonymous, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("%w: registry URL %s: anonymous=%q is not a boolean", ErrInvalid, norm, v)
		}
	}
	return s, nil
}

func (s *s3Source) URL() string { return s.url }

func (s *s3Source) s3Client(ctx context.Context) (*s3.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return s.client, nil
	}
	var lo []func(*config.LoadOptions) error
	if s.region != "" {
		lo = append(lo, config.WithRegion(s.region))
	}
	if s.anonymous {
		lo = append(lo, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fmt.Errorf("registry %s: load AWS configuration: %w", s.url, err)
	}
	if cfg.Region == "" {
		// Signing needs a region; S3-compatible stores accept any.
		cfg.Region = "us-east-1"
	}
	s.client = s3.NewFromConfig(cfg, func(o *s3.Options) {
		if s.endpoint != "" {
			o.BaseEndpoint = aws.String(s.endpoint)
		}
		o.UsePathStyle = s.pathStyle
	})
	return s.client, nil
}

func (s *s3Source) Open(ctx context.Context, rel string) (io.ReadCloser, int64, error) {
	key := s.prefix
	if rel != "" {
		if err := checkRelPath(rel); err != nil {
			return nil, 0, err
		}
		if key != "" {
			key += "/"
		}
		key += rel
	}
	name := "s3://" + s.bucket + "/" + key
	c, err := s.s3Client(ctx)
	if err != nil {
		return nil, 0, err
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, 0, fmt.Errorf("get %s: %w", name, ctxErr)
		}
		var ae smithy.APIError
		if errors.As(err, &ae) {
			switch ae.ErrorCode() {
			case "NoSuchKey", "NotFound", "NoSuchBucket":
				return nil, 0, fmt.Errorf("get %s: %w: %s", name, ErrNotFound, ae.ErrorCode())
			}
			return nil, 0, fmt.Errorf("get %s: %s: %s", name, ae.ErrorCode(), ae.ErrorMessage())
		}
		return nil, 0, fmt.Errorf("get %s: %w: %v", name, ErrUnreachable, err)
	}
	size := int64(-1)
	if out.ContentLength != nil {
		size = *out.ContentLength
	}
	return &sizedReader{r: out.Body, c: out.Body, want: size, name: name}, size, nil
}
