// Package cloudtest finds the local S3, GCS and Azure servers that
// scripts/servers.sh starts, for the checkpoint tests. It is imported only
// by tests.
//
// The servers are described by environment variables (written by
// `scripts/servers.sh start`):
//
//	s3     OPENETL_TEST_S3_URL, OPENETL_TEST_S3_ENDPOINT, _BUCKET, _REGION,
//	       _ACCESS_KEY, _SECRET_KEY (and AWS_ACCESS_KEY_ID and
//	       AWS_SECRET_ACCESS_KEY for the URL opener)
//	gcs    OPENETL_TEST_GCS_URL, OPENETL_TEST_GCS_BUCKET, STORAGE_EMULATOR_HOST
//	azure  OPENETL_TEST_AZURE_URL, OPENETL_TEST_AZURE_ENDPOINT, _ACCOUNT, _KEY,
//	       _CONTAINER (and AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY for
//	       the URL opener)
//
// A test that needs a server whose variables are missing fails, unless
// OPENETL_SKIP_SERVERS=1, when it skips: CI always runs with the servers.
package cloudtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/s3blob"
	"google.golang.org/api/option"
)

// Servers are the names of the cloud backends, in test order.
var Servers = []string{"s3", "gcs", "azure"}

var urlVars = map[string]string{
	"s3":    "OPENETL_TEST_S3_URL",
	"gcs":   "OPENETL_TEST_GCS_URL",
	"azure": "OPENETL_TEST_AZURE_URL",
}

var needVars = map[string][]string{
	"s3": {"OPENETL_TEST_S3_URL", "OPENETL_TEST_S3_ENDPOINT", "OPENETL_TEST_S3_BUCKET", "OPENETL_TEST_S3_REGION",
		"OPENETL_TEST_S3_ACCESS_KEY", "OPENETL_TEST_S3_SECRET_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"},
	"gcs": {"OPENETL_TEST_GCS_URL", "OPENETL_TEST_GCS_BUCKET", "STORAGE_EMULATOR_HOST"},
	"azure": {"OPENETL_TEST_AZURE_URL", "OPENETL_TEST_AZURE_ENDPOINT", "OPENETL_TEST_AZURE_ACCOUNT",
		"OPENETL_TEST_AZURE_KEY", "OPENETL_TEST_AZURE_CONTAINER", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"},
}

// require fails (or, with OPENETL_SKIP_SERVERS=1, skips) tb unless every
// variable server needs is set.
func require(tb testing.TB, server string) {
	tb.Helper()
	vars, ok := needVars[server]
	if !ok {
		tb.Fatalf("cloudtest: unknown server %q", server)
	}
	var missing []string
	for _, v := range vars {
		if os.Getenv(v) == "" {
			missing = append(missing, v)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("%s server not configured (%s unset): run `eval \"$(scripts/servers.sh start)\"` first",
		server, strings.Join(missing, ", "))
	if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
		tb.Skip(msg + " (skipped: OPENETL_SKIP_SERVERS=1)")
	}
	tb.Fatal(msg + ", or set OPENETL_SKIP_SERVERS=1 to skip")
}

// Prefix returns a key prefix no other test run uses, so tests share the
// servers' one bucket without seeing each other's objects.
func Prefix(tb testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, tb.Name())
	if len(name) > 100 {
		name = name[:100]
	}
	return "t/" + name + "-" + strings.ToLower(rand.Text()[:10])
}

// URL returns the server's store URL with a fresh prefix as its path, as
// checkpoint.Open takes it.
func URL(tb testing.TB, server string) string {
	tb.Helper()
	require(tb, server)
	u, err := url.Parse(os.Getenv(urlVars[server]))
	if err != nil {
		tb.Fatalf("cloudtest: %s: %v", urlVars[server], err)
	}
	u.Path = "/" + Prefix(tb)
	return u.String()
}

// Bucket opens the server's bucket with a client configured here, not by
// URL, the way a host that owns its clients would; rt, if not nil, carries
// every HTTP request. The bucket is closed when tb ends. It returns a
// fresh prefix to keep the test's objects under.
func Bucket(tb testing.TB, server string, rt http.RoundTripper) (*blob.Bucket, string) {
	tb.Helper()
	require(tb, server)
	if rt == nil {
		rt = http.DefaultTransport
	}
	ctx := context.Background()
	var b *blob.Bucket
	var err error
	switch server {
	case "s3":
		client := s3.New(s3.Options{
			BaseEndpoint: aws.String(os.Getenv("OPENETL_TEST_S3_ENDPOINT")),
			UsePathStyle: true,
			Region:       os.Getenv("OPENETL_TEST_S3_REGION"),
			Credentials: credentials.NewStaticCredentialsProvider(
				os.Getenv("OPENETL_TEST_S3_ACCESS_KEY"), os.Getenv("OPENETL_TEST_S3_SECRET_KEY"), ""),
			RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
			HTTPClient:                 &http.Client{Transport: rt},
		})
		b, err = s3blob.OpenBucket(ctx, client, os.Getenv("OPENETL_TEST_S3_BUCKET"),
			&s3blob.Options{RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired})
	case "gcs":
		// The storage client sees STORAGE_EMULATOR_HOST and talks to it
		// without authentication. (gcsblob.OpenBucket with a gcp.HTTPClient
		// would ignore the client when that variable is set.)
		var client *storage.Client
		client, err = storage.NewClient(ctx, option.WithHTTPClient(&http.Client{Transport: rt}))
		if err != nil {
			break
		}
		tb.Cleanup(func() { client.Close() })
		b, err = gcsblob.OpenBucket(ctx, nil, os.Getenv("OPENETL_TEST_GCS_BUCKET"), &gcsblob.Options{Client: client})
	case "azure":
		var cred *container.SharedKeyCredential
		cred, err = container.NewSharedKeyCredential(os.Getenv("OPENETL_TEST_AZURE_ACCOUNT"), os.Getenv("OPENETL_TEST_AZURE_KEY"))
		if err != nil {
			break
		}
		var client *container.Client
		client, err = container.NewClientWithSharedKeyCredential(
			os.Getenv("OPENETL_TEST_AZURE_ENDPOINT")+"/"+os.Getenv("OPENETL_TEST_AZURE_CONTAINER"), cred,
			&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: httpDoer{rt}}})
		if err != nil {
			break
		}
		b, err = azureblob.OpenBucket(ctx, client, nil)
	}
	if err != nil {
		tb.Fatalf("cloudtest: open %s bucket: %v", server, err)
	}
	tb.Cleanup(func() { b.Close() })
	return b, Prefix(tb)
}

// httpDoer adapts a RoundTripper to the Azure SDK's transport interface.
type httpDoer struct{ rt http.RoundTripper }

func (d httpDoer) Do(req *http.Request) (*http.Response, error) { return d.rt.RoundTrip(req) }

var _ policy.Transporter = httpDoer{}
