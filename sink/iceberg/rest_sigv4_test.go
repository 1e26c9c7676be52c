package iceberg_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/openetl/etl"
	"github.com/openetl/etl/sink/iceberg"
)

// sigv4Proxy stands in front of the REST catalog test server and does
// what a catalog behind AWS SigV4 (API Gateway, Glue's or S3 Tables'
// REST endpoints) does: every request must carry an AWS4-HMAC-SHA256
// Authorization header whose signature, recomputed here with the
// secret of its access key (aws-sdk-go-v2's signer over the request's
// method, URL, signed headers and body hash), matches; the body must
// hash to its x-amz-content-sha256, and its X-Amz-Date be within five
// minutes. Anything else gets 403 in the REST error model.
type sigv4Proxy struct {
	*httptest.Server
	region, service string

	mu       sync.Mutex
	secrets  map[string]string // access key ID → secret
	accepted int
	refused  []string // why, per refused request
}

func newSigV4Proxy(t *testing.T, upstream, region, service string) *sigv4Proxy {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &sigv4Proxy{region: region, service: service, secrets: map[string]string{}}
	forward := httputil.NewSingleHostReverseProxy(target)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		verr := p.verify(r, body)
		p.mu.Lock()
		if verr == nil {
			p.accepted++
		} else {
			p.refused = append(p.refused, verr.Error())
		}
		p.mu.Unlock()
		if verr != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
				"message": "SigV4: " + verr.Error(), "type": "ForbiddenException", "code": 403}})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *sigv4Proxy) setKey(id, secret string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.secrets[id] = secret
}

func (p *sigv4Proxy) counts() (accepted int, refused []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, append([]string(nil), p.refused...)
}

// verify recomputes r's signature.
func (p *sigv4Proxy) verify(r *http.Request, body []byte) error {
	const algo = "AWS4-HMAC-SHA256 "
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), algo)
	if !ok {
		return errors.New("no AWS4-HMAC-SHA256 Authorization header")
	}
	fields := map[string]string{}
	for _, f := range strings.Split(auth, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/") // AKID/date/region/service/aws4_request
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return fmt.Errorf("malformed credential scope %q", fields["Credential"])
	}
	if scope[2] != p.region || scope[3] != p.service {
		return fmt.Errorf("signed for %s/%s, want %s/%s", scope[2], scope[3], p.region, p.service)
	}
	p.mu.Lock()
	secret, known := p.secrets[scope[0]]
	p.mu.Unlock()
	if !known {
		return fmt.Errorf("unknown access key %q", scope[0])
	}
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	if got := r.Header.Get("X-Amz-Content-Sha256"); got != payload {
		return fmt.Errorf("x-amz-content-sha256 %q is not the body's hash", got)
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("X-Amz-Date: %w", err)
	}
	if d := time.Since(at); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("X-Amz-Date %v is %v away", at, d)
	}
	// The request as the client signed it: method, URL, and only the
	// headers it says it signed.
	c, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		return err
	}
	c.ContentLength = r.ContentLength
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		switch h {
		case "host", "content-length":
		default:
			c.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	creds := aws.Credentials{AccessKeyID: scope[0], SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, c, payload, p.service, p.region, at); err != nil {
		return err
	}
	want, _ := strings.CutPrefix(c.Header.Get("Authorization"), algo)
	if !hmac.Equal([]byte(want), []byte(auth)) {
		return errors.New("signature does not match")
	}
	return nil
}

// openSigV4 opens iceberg-go's REST client with SigV4 signing on, with
// static credentials: what a host on AWS passes (rest.WithAwsConfig with
// its own aws.Config, or none for the SDK's default chain).
func openSigV4(ctx context.Context, uri, region, service, id, secret string) (*rest.Catalog, error) {
	cfg := aws.Config{Region: region, Credentials: credentials.NewStaticCredentialsProvider(id, secret, "")}
	return rest.NewCatalog(ctx, "openetl", uri, rest.WithSigV4RegionSvc(region, service), rest.WithAwsConfig(cfg))
}

// TestRestSigV4 syncs through a catalog that requires AWS SigV4: the
// host opens iceberg-go's REST client with SigV4 on (the destination
// takes the catalog as it is); every catalog request is signed and
// verified, and pyiceberg then reads every row once. A client with a
// wrong secret is refused at the catalog's first request, and once the
// key's secret is rotated under a running host, its next Sync fails
// with the catalog's 403, which Destination.Permanent and so
// etl.IsPermanent report (a restart loop stops instead of retrying).
func TestRestSigV4(t *testing.T) {
	ctx := context.Background()
	uri := restURI(t)
	const region, service, keyID = "eu-west-3", "execute-api", "AKIDOPENETLTEST"
	proxy := newSigV4Proxy(t, uri, region, service)
	proxy.setKey(keyID, "s3cret")
	ns, dir := restNamespace("sigv4"), t.TempDir()

	if _, err := rest.NewCatalog(ctx, "openetl", proxy.URL); !errors.Is(err, rest.ErrForbidden) {
		t.Fatalf("a REST client without SigV4 opened the catalog (%v); the proxy enforces nothing", err)
	}
	_, err := openSigV4(ctx, proxy.URL, region, service, keyID, "wrong")
	if !errors.Is(err, rest.ErrForbidden) {
		t.Fatalf("REST client signing with a wrong secret: %v, want rest.ErrForbidden", err)
	}
	if d := newDest(t, newWarehouse(t).cat, iceberg.Config{}); !d.Permanent(err) {
		t.Errorf("Permanent(%v) = false", err)
	}
	if _, refused := proxy.counts(); len(refused) != 2 || !strings.Contains(refused[1], "signature does not match") {
		t.Fatalf("refused %q, want the unsigned request and the wrong signature", refused)
	}

	cat, err := openSigV4(ctx, proxy.URL, region, service, keyID, "s3cret")
	if err != nil {
		t.Fatalf("REST catalog with SigV4: %v", err)
	}
	defer cat.Close()
	const rows = 1_000
	if _, err := authSync(ctx, t, cat, ns, dir, rows); err != nil {
		t.Fatalf("Sync through the SigV4 catalog: %v", err)
	}
	accepted, refused := proxy.counts()
	t.Logf("signed catalog requests verified: %d", accepted)
	if len(refused) != 2 || accepted < 10 {
		t.Errorf("%d requests verified, refused %q: want every request of the sync signed", accepted, refused)
	}
	verifyFakerTables(t, readREST(t, uri, ns), rows)

	proxy.setKey(keyID, "rotated")
	_, err = authSync(ctx, t, cat, ns, dir, rows)
	if err == nil || !errors.Is(err, rest.ErrForbidden) {
		t.Fatalf("Sync after the key's secret was rotated: %v, want rest.ErrForbidden", err)
	}
	if !etl.IsPermanent(err) {
		t.Errorf("etl.IsPermanent(%v) = false: a host's restart loop would retry a refused signature", err)
	}
}
