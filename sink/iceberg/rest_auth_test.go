package iceberg_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/apache/iceberg-go/catalog/rest"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// authProxy stands in front of the REST catalog test server (which checks
// no credentials) and enforces what a catalog with auth does: an OAuth2
// token endpoint for the client-credentials grant, and a bearer token on
// every other request. Its tokens say they expire in a second, so the
// client fetches a new one for nearly every request (golang.org/x/oauth2
// treats a token within 10 s of its expiry as expired): a pipeline that
// lost the refresh would fail at once.
type authProxy struct {
	*httptest.Server
	mu       sync.Mutex
	clients  map[string]string   // client ID → secret
	tokens   map[string]struct{} // tokens issued and not revoked
	grants   int                 // tokens issued
	accepted int                 // catalog requests with a valid token
	refused  int                 // catalog requests without one
}

func newAuthProxy(t *testing.T, upstream string) *authProxy {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &authProxy{clients: map[string]string{}, tokens: map[string]struct{}{}}
	forward := httputil.NewSingleHostReverseProxy(target)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/v1/oauth/tokens") {
			p.token(w, r)
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		p.mu.Lock()
		_, valid := p.tokens[tok]
		if ok && valid {
			p.accepted++
		} else {
			p.refused++
		}
		p.mu.Unlock()
		if !ok || !valid {
			// The REST spec's error model.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
				"message": "bearer token missing, unknown or revoked", "type": "NotAuthorizedException", "code": 401}})
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// token answers the client-credentials grant, with the client's ID and
// secret in HTTP basic auth or in the form (RFC 6749, 2.3.1).
func (p *authProxy) token(w http.ResponseWriter, r *http.Request) {
	id, secret, basic := r.BasicAuth()
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	w.Header().Set("Content-Type", "application/json")
	p.mu.Lock()
	defer p.mu.Unlock()
	if want, ok := p.clients[id]; !ok || want != secret || r.PostForm.Get("grant_type") != "client_credentials" {
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client", "error_description": "unknown client or wrong secret"})
		return
	}
	tok := p.issueLocked()
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "bearer", "expires_in": 1,
		"issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})
}

func (p *authProxy) issueLocked() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	p.tokens[tok] = struct{}{}
	p.grants++
	return tok
}

// issue returns a new token, as an identity provider would hand one to a
// host that passes it as a static bearer token.
func (p *authProxy) issue() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.issueLocked()
}

func (p *authProxy) setClient(id, secret string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clients[id] = secret
}

// revokeAll forgets every token issued so far.
func (p *authProxy) revokeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.tokens)
}

func (p *authProxy) counts() (grants, accepted, refused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.grants, p.accepted, p.refused
}

// authSync runs the faker pipeline (rows records per stream, customers
// merged) once into namespace ns of cat, exactly once, with its
// checkpoint log under dir.
func authSync(ctx context.Context, t *testing.T, cat *rest.Catalog, ns, dir string, rows int64) (etl.Result, error) {
	t.Helper()
	dst := newDest(t, cat, iceberg.Config{Namespace: []string{ns}})
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(ctx)
	p, err := etl.NewPipeline("auth").From(src).To(dst).Checkpoints(store).
		Mode(delivery.Merge, faker.Customers).Require(delivery.ExactlyOnce).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	return p.Sync(ctx)
}

// TestRestOAuth2ClientCredentials syncs through a catalog that requires
// OAuth2: the host opens iceberg-go's REST client with a client ID and
// secret (rest.WithCredential), tokens expire as the sync runs and the
// client fetches new ones; pyiceberg then reads every row once. When
// the client's secret is rotated and the host still has the old one,
// the next Sync fails with the token endpoint's invalid_client, which
// etl.IsPermanent reports (a restart loop stops instead of retrying).
func TestRestOAuth2ClientCredentials(t *testing.T) {
	ctx := context.Background()
	uri := restURI(t)
	proxy := newAuthProxy(t, uri)
	proxy.setClient("etl", "s3cret")
	ns, dir := restNamespace("oauth"), t.TempDir()

	if _, err := rest.NewCatalog(ctx, "openetl", proxy.URL); err == nil {
		t.Fatal("a REST client without credentials opened the catalog; the proxy enforces nothing")
	}
	cat, err := rest.NewCatalog(ctx, "openetl", proxy.URL, rest.WithCredential("etl:s3cret"))
	if err != nil {
		t.Fatalf("REST catalog with client credentials: %v", err)
	}
	defer cat.Close()
	const rows = 2_000
	if _, err := authSync(ctx, t, cat, ns, dir, rows); err != nil {
		t.Fatalf("Sync through the OAuth2 catalog: %v", err)
	}
	grants, accepted, _ := proxy.counts()
	t.Logf("token grants %d, catalog requests %d", grants, accepted)
	if grants < 3 || accepted < 3 {
		t.Errorf("%d tokens granted for %d catalog requests: want the client to refresh its expiring token", grants, accepted)
	}
	verifyFakerTables(t, readREST(t, uri, ns), rows)

	proxy.setClient("etl", "rotated")
	_, err = authSync(ctx, t, cat, ns, dir, rows)
	if err == nil || !errors.Is(err, rest.ErrOAuthError) || !strings.Contains(err.Error(), "invalid_client") {
		t.Fatalf("Sync with a secret the token endpoint refuses: %v, want rest.ErrOAuthError with invalid_client", err)
	}
	if !etl.IsPermanent(err) {
		t.Errorf("etl.IsPermanent(%v) = false: a host's restart loop would retry refused credentials", err)
	}
}

// TestRestBearerToken syncs with a static bearer token the host got
// elsewhere (rest.WithOAuthToken). Once the token is revoked, Sync fails
// with the catalog's 401, which etl.IsPermanent reports.
func TestRestBearerToken(t *testing.T) {
	ctx := context.Background()
	uri := restURI(t)
	proxy := newAuthProxy(t, uri)
	ns, dir := restNamespace("bearer"), t.TempDir()
	cat, err := rest.NewCatalog(ctx, "openetl", proxy.URL, rest.WithOAuthToken(proxy.issue()))
	if err != nil {
		t.Fatalf("REST catalog with a bearer token: %v", err)
	}
	defer cat.Close()
	const rows = 1_000
	if _, err := authSync(ctx, t, cat, ns, dir, rows); err != nil {
		t.Fatalf("Sync with a bearer token: %v", err)
	}
	if _, _, refused := proxy.counts(); refused != 0 {
		t.Errorf("%d catalog requests refused during a Sync with a valid token", refused)
	}
	verifyFakerTables(t, readREST(t, uri, ns), rows)

	proxy.revokeAll()
	_, err = authSync(ctx, t, cat, ns, dir, rows)
	if err == nil || !errors.Is(err, rest.ErrUnauthorized) {
		t.Fatalf("Sync with a revoked token: %v, want rest.ErrUnauthorized", err)
	}
	if !etl.IsPermanent(err) {
		t.Errorf("etl.IsPermanent(%v) = false: a host's restart loop would retry a revoked token", err)
	}
}

// TestPermanentCatalogErrors pins the classification to iceberg-go's
// error values: an upgrade that renames them fails here.
func TestPermanentCatalogErrors(t *testing.T) {
	d := newDest(t, newWarehouse(t).cat, iceberg.Config{})
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("load table: %w", rest.ErrUnauthorized), true},
		{fmt.Errorf("commit: %w", rest.ErrForbidden), true},
		{errors.Join(context.Canceled, fmt.Errorf("x: %w", rest.ErrForbidden)), true},
		{fmt.Errorf("load table: %w", rest.ErrAuthorizationExpired), false},
		{fmt.Errorf("load table: %w", rest.ErrServerError), false},
		{fmt.Errorf("load table: %w", rest.ErrServiceUnavailable), false},
		{fmt.Errorf("%w: Post \"http://x/v1/oauth/tokens\": connection refused", rest.ErrOAuthError), false},
		{errors.New("invalid_client: unknown client"), false},
	} {
		if got := d.Permanent(tc.err); got != tc.want {
			t.Errorf("Permanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
