package etl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/source/faker"
)

type probe struct {
	code int
	body map[string]any
}

func get(t *testing.T, srv *httptest.Server, method, path string) probe {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := probe{code: resp.StatusCode}
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusServiceUnavailable {
		if method == http.MethodGet {
			if err := json.NewDecoder(resp.Body).Decode(&p.body); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
	}
	return p
}

func TestHealthHandler(t *testing.T) {
	f := newFaker(t, faker.Config{Rows: fakerRows, MalformedShare: 0.01})
	p, err := f.builder("orders").Build()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(etl.HealthHandler(p))
	defer srv.Close()

	check := func(when string, live, ready int, phase string) {
		t.Helper()
		for path, want := range map[string]int{"/healthz": live, "/livez": live, "/readyz": ready} {
			got := get(t, srv, http.MethodGet, path)
			if got.code != want || got.body["phase"] != phase || got.body["pipeline"] != "orders" {
				t.Errorf("%s: GET %s: %d %v, want %d with phase %s", when, path, got.code, got.body, want, phase)
			}
			wantStatus := "ok"
			if want != http.StatusOK {
				wantStatus = "unavailable"
			}
			if got.body["status"] != wantStatus {
				t.Errorf("%s: GET %s: status %v, want %s", when, path, got.body["status"], wantStatus)
			}
			if h := get(t, srv, http.MethodHead, path); h.code != want {
				t.Errorf("%s: HEAD %s: %d, want %d", when, path, h.code, want)
			}
		}
	}
	check("before any sync", 200, 503, "idle")
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	check("after a sync", 200, 200, "succeeded")
	if got := get(t, srv, http.MethodGet, "/readyz"); got.body["epoch"] != float64(res.Epoch) || got.body["generation"] != float64(1) {
		t.Errorf("readyz body %v, result %+v", got.body, res)
	}
	if got := get(t, srv, http.MethodGet, "/nope"); got.code != http.StatusNotFound {
		t.Errorf("GET /nope: %d", got.code)
	}
	if got := get(t, srv, http.MethodPost, "/healthz"); got.code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d", got.code)
	}

	// A failed attempt: not live, not ready, and the error is redacted.
	bad, err := etl.NewPipeline("orders").From(failingSource{f.src}).To(f.dst).Checkpoints(f.store).Build()
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(etl.HealthHandler(bad))
	defer srv2.Close()
	if _, err := bad.Sync(context.Background()); err == nil {
		t.Fatal("sync over a failing source succeeded")
	}
	for path, want := range map[string]int{"/healthz": 503, "/readyz": 503} {
		got := get(t, srv2, http.MethodGet, path)
		msg, _ := got.body["last_error"].(string)
		if got.code != want || got.body["phase"] != "failed" || !strings.Contains(msg, "app:xxxxx@db.internal") || strings.Contains(msg, secret) {
			t.Errorf("after a failure: GET %s: %d %v", path, got.code, got.body)
		}
	}
}

// TestNoSecretsOrRowDataInLogs runs a sync at Debug level and a failing
// one whose source error carries a DSN with a password: the logs, the
// failure event and the status hold no password and no row data.
func TestNoSecretsOrRowDataInLogs(t *testing.T) {
	f := newFaker(t, faker.Config{Rows: fakerRows, MalformedShare: 0.01})
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := f.builder("orders").Logger(log).Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	bad, err := etl.NewPipeline("orders").From(failingSource{f.src}).To(f.dst).Checkpoints(f.store).
		Logger(log).OnEvent(rec.on, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	_, syncErr := bad.Sync(context.Background())
	if syncErr == nil {
		t.Fatal("sync over a failing source succeeded")
	}
	out := buf.String()
	for _, want := range []string{"level=INFO msg=\"attempt started\"", "level=DEBUG msg=batch", "level=DEBUG msg=\"epoch committed\"",
		"level=WARN msg=\"attempt failed\"", "app:xxxxx@db.internal"} {
		if !strings.Contains(out, want) {
			t.Errorf("log has no %q", want)
		}
	}
	if strings.Contains(out, secret) {
		t.Errorf("the password is in the log:\n%s", out)
	}
	// No row data: no payload of a generated record appears.
	for _, stream := range []string{faker.Customers, faker.Orders} {
		for _, i := range []int64{0, 1, 500, 999} {
			_, _, _, payload := f.src.Generate(stream, i, nil)
			if len(payload) > 12 && strings.Contains(out, string(payload[1:12])) {
				t.Errorf("record %s/%d's payload %q is in the log", stream, i, payload)
			}
		}
	}
	es := rec.wait(t)
	last := es[len(es)-1]
	if last.Kind != etl.EventSyncFailed || last.Err == nil || strings.Contains(last.Err.Error(), secret) ||
		!strings.Contains(last.Err.Error(), "xxxxx") {
		t.Errorf("failure event %+v", last)
	}
	if st := bad.Status(); st.Phase != etl.PhaseFailed || strings.Contains(st.LastError, secret) || st.LastError == "" {
		t.Errorf("status after the failure: %+v", st)
	}
	// The error Sync returns is redacted too.
	if strings.Contains(syncErr.Error(), secret) || !strings.Contains(syncErr.Error(), "app:xxxxx@db.internal") {
		t.Errorf("Sync's error: %v", syncErr)
	}
}
