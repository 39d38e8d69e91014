package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// S3 is a Store on an S3-compatible service.
type S3 struct {
	cfg    Config
	client *s3.Client
}

// OpenS3 returns the Store of cfg. It does not touch the network; Check
// does.
func OpenS3(ctx context.Context, cfg Config) (*S3, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(region),
		// Bounded retries with the SDK's backoff; the shipper retries
		// whole rounds on top of this.
		awsconfig.WithRetryMaxAttempts(3),
		awsconfig.WithHTTPClient(&http.Client{Timeout: 60 * time.Second}),
	}
	if cfg.CredentialsFile != "" {
		opts = append(opts, awsconfig.WithSharedCredentialsFiles([]string{cfg.CredentialsFile}))
	}
	if cfg.Profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(cfg.Profile))
	}
	acfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("remote %s: load AWS configuration (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a credentials file; note a non-empty AWS_CA_BUNDLE must name a readable PEM file): %w", cfg, err)
	}
	client := s3.NewFromConfig(acfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Checksums only where S3 requires them: S3-compatible servers
		// differ in their support of the newer trailing checksums.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &S3{cfg: cfg, client: client}, nil
}

func (s *S3) String() string { return s.cfg.String() }

func (s *S3) key(k string) string {
	if s.cfg.Prefix == "" {
		return k
	}
	return s.cfg.Prefix + "/" + k
}

func (s *S3) wrap(op, key string, err error) error {
	return &Error{Op: op, Store: s.String(), Key: key, Err: explain(err)}
}

// explain adds what to do to the errors an operator can fix.
func explain(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchBucket":
			return fmt.Errorf("%w (the bucket does not exist: create it, or fix \"bucket\" in the remote section of wsfs.json)", err)
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied":
			return fmt.Errorf("%w (check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the credentials file)", err)
		}
	}
	return err
}

// Put uploads data under key (one PUT, atomic).
func (s *S3) Put(ctx context.Context, key string, data []byte) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(key)),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		return s.wrap("put", key, err)
	}
	return nil
}

// PutIf uploads data under key only if the object is the version etag
// (ifMatch != "") or, with ifMatch == "", only if it does not exist (a
// conditional write, as S3 has supported since 2024). It returns the new
// ETag.
func (s *S3) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	in := &s3.PutObjectInput{
		Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(key)),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	} else {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := s.client.PutObject(ctx, in)
	if err != nil {
		var re interface{ HTTPStatusCode() int }
		if errors.As(err, &re) && (re.HTTPStatusCode() == http.StatusPreconditionFailed || re.HTTPStatusCode() == http.StatusConflict) {
			return "", s.wrap("put", key, fmt.Errorf("%w: %v", ErrPrecondition, err))
		}
		return "", s.wrap("put", key, err)
	}
	return aws.ToString(out.ETag), nil
}

// GetETag downloads key and returns its ETag too.
func (s *S3) GetETag(ctx context.Context, key string) ([]byte, string, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(key))})
	if err != nil {
		var nk *types.NoSuchKey
		if errors.As(err, &nk) || isNotFound(err) {
			return nil, "", s.wrap("get", key, fmt.Errorf("%w: %v", ErrNotFound, err))
		}
		return nil, "", s.wrap("get", key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, "", s.wrap("get", key, err)
	}
	return data, aws.ToString(out.ETag), nil
}

// Get downloads key; a missing key wraps ErrNotFound.
func (s *S3) Get(ctx context.Context, key string) ([]byte, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(key))})
	if err != nil {
		var nk *types.NoSuchKey
		if errors.As(err, &nk) || isNotFound(err) {
			return nil, s.wrap("get", key, fmt.Errorf("%w: %v", ErrNotFound, err))
		}
		return nil, s.wrap("get", key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, s.wrap("get", key, err)
	}
	return data, nil
}

func isNotFound(err error) bool {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		var ae smithy.APIError
		// A missing bucket is also a 404; it is not a missing key.
		return !(errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket")
	}
	return false
}

// Exists reports whether key exists (HEAD).
func (s *S3) Exists(ctx context.Context, key string) (bool, error) {
	_, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(key))})
	if err == nil {
		return true, nil
	}
	var nf *types.NotFound
	if errors.As(err, &nf) || isNotFound(err) {
		// HEAD has no body, so a missing bucket also looks like this;
		// Check tells them apart at start-up.
		return false, nil
	}
	return false, s.wrap("head", key, err)
}

// Stat describes key (HEAD); found is false if it does not exist.
func (s *S3) Stat(ctx context.Context, key string) (Info, bool, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(key))})
	if err == nil {
		return Info{Key: key, Size: aws.ToInt64(out.ContentLength), Modified: aws.ToTime(out.LastModified)}, true, nil
	}
	var nf *types.NotFound
	if errors.As(err, &nf) || isNotFound(err) {
		return Info{}, false, nil
	}
	return Info{}, false, s.wrap("head", key, err)
}

// ListInfo returns the objects under prefix with size and modification
// time.
func (s *S3) ListInfo(ctx context.Context, prefix string) ([]Info, error) {
	var out []Info
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(s.key(prefix))})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.wrap("list", prefix, err)
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			if s.cfg.Prefix != "" {
				k = strings.TrimPrefix(k, s.cfg.Prefix+"/")
			}
			out = append(out, Info{Key: k, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)})
		}
	}
	return out, nil
}

// Delete removes key (absent is not an error).
func (s *S3) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(key))})
	if err != nil {
		return s.wrap("delete", key, err)
	}
	return nil
}

// List returns the keys under prefix (relative to the store's prefix).
func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	infos, err := s.ListInfo(ctx, prefix)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(infos))
	for i, in := range infos {
		keys[i] = in.Key
	}
	return keys, nil
}

// Check verifies that the bucket exists and the credentials are accepted
// (HEAD bucket), so a misconfiguration is reported at start-up with what
// to do.
func (s *S3) Check(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.cfg.Bucket)})
	if err != nil {
		var re interface{ HTTPStatusCode() int }
		if errors.As(err, &re) {
			switch re.HTTPStatusCode() {
			case http.StatusNotFound:
				err = fmt.Errorf("%w (the bucket does not exist: create it, or fix \"bucket\" in the remote section of wsfs.json)", err)
			case http.StatusForbidden, http.StatusUnauthorized:
				err = fmt.Errorf("%w (credentials refused: check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the credentials file)", err)
			}
		}
		return &Error{Op: "head bucket", Store: s.String(), Key: s.cfg.Bucket, Err: err}
	}
	return nil
}

// CreateBucket creates the bucket (tests and first-time setup).
func (s *S3) CreateBucket(ctx context.Context) error {
	_, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.cfg.Bucket)})
	if err != nil {
		var owned *types.BucketAlreadyOwnedByYou
		if errors.As(err, &owned) {
			return nil
		}
		return &Error{Op: "create bucket", Store: s.String(), Key: s.cfg.Bucket, Err: err}
	}
	return nil
}
