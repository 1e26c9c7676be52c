package etl_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// statusDoc is the part of status.json the tests read, decoded as a
// script would (docs/status-page.md).
type statusDoc struct {
	Time      time.Time `json:"time"`
	Pipelines []struct {
		Name       string    `json:"name"`
		Phase      string    `json:"phase"`
		Bounded    bool      `json:"bounded"`
		Generation uint64    `json:"generation"`
		Epoch      uint64    `json:"epoch"`
		EpochTime  time.Time `json:"epoch_time"`
		EpochAge   *float64  `json:"epoch_age_seconds"`
		Epochs     int       `json:"epochs"`
		Read       int64     `json:"read"`
		Streams    []struct {
			Name      string            `json:"name"`
			Read      int64             `json:"read"`
			Committed checkpoint.Counts `json:"committed"`
			Totals    checkpoint.Counts `json:"totals"`
			Snapshot  *struct {
				Done      int64 `json:"done"`
				Estimated int64 `json:"estimated"`
			} `json:"snapshot"`
		} `json:"streams"`
		Splits []struct {
			ID      string   `json:"id"`
			Streams []string `json:"streams"`
			Lag     *struct {
				Behind int64    `json:"behind"`
				Unit   string   `json:"unit"`
				Age    *float64 `json:"age_seconds"`
			} `json:"lag"`
			Paused bool `json:"paused"`
		} `json:"splits"`
		LastError string `json:"last_error"`
		Retries   int    `json:"retries"`
		Events    []struct {
			Kind  string `json:"kind"`
			Error string `json:"error"`
		} `json:"events"`
		Quarantine []struct {
			Stream string `json:"stream"`
			Reason string `json:"reason"`
			Rows   int64  `json:"rows"`
		} `json:"quarantine"`
		LagHistory []struct {
			Time   time.Time `json:"time"`
			Splits []struct {
				ID  string   `json:"id"`
				Age *float64 `json:"age_seconds"`
			} `json:"splits"`
		} `json:"lag_history"`
	} `json:"pipelines"`
}

func getStatus(t *testing.T, url string) statusDoc {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s, Content-Type %q", url, res.Status, res.Header.Get("Content-Type"))
	}
	var d statusDoc
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestStatusPageJSON syncs faker → Parquet with malformed records and a
// failing after-sync step whose error quotes a password, and checks that
// status.json holds what Status says, the quarantine reasons of every
// quarantined record, the attempt's events, and no password; that the
// page and the event stream are served with their headers; and that
// nothing but GET and HEAD is answered.
func TestStatusPageJSON(t *testing.T) {
	src, err := faker.New(faker.Config{Seed: 5, Rows: 4000, MalformedShare: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := parquet.New(parquet.Config{Bucket: memblob.OpenBucket(nil)})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	const secret = "hunter2-very-secret"
	p, err := etl.NewPipeline("json").From(src).To(dst).Checkpoints(store).BatchSize(500, 0).
		AfterSync("publish", func(context.Context, etl.Result) error {
			return errors.New("connect postgres://loader:" + secret + "@db.internal/warehouse: refused")
		}).Build()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.StripPrefix("/debug/etl", etl.StatusPage(p)))
	t.Cleanup(srv.Close)
	base := srv.URL + "/debug/etl/"

	idle := getStatus(t, base+"status.json")
	if len(idle.Pipelines) != 1 || idle.Pipelines[0].Phase != "idle" || idle.Pipelines[0].EpochAge != nil {
		t.Fatalf("before the first sync: %+v; want one idle pipeline, never committed", idle.Pipelines)
	}
	if _, err := p.Sync(context.Background()); err == nil {
		t.Fatal("Sync succeeded; want the step's error")
	}
	st := p.Status()
	d := getStatus(t, base+"status.json")
	if len(d.Pipelines) != 1 {
		t.Fatalf("%d pipelines, want 1", len(d.Pipelines))
	}
	got := d.Pipelines[0]
	if got.Name != "json" || got.Phase != string(st.Phase) || !got.Bounded || got.Generation != uint64(st.Generation) ||
		got.Epoch != st.Epoch || !got.EpochTime.Equal(st.EpochTime) || got.Epochs != st.Epochs || got.Read != st.Read {
		t.Errorf("status.json says %s %s gen %d epoch %d at %v, %d epochs, %d read; Status %s gen %d epoch %d at %v, %d epochs, %d read",
			got.Name, got.Phase, got.Generation, got.Epoch, got.EpochTime, got.Epochs, got.Read,
			st.Phase, st.Generation, st.Epoch, st.EpochTime, st.Epochs, st.Read)
	}
	if got.EpochAge == nil || *got.EpochAge < 0 || *got.EpochAge > d.Time.Sub(st.EpochTime).Seconds()+1e-6 {
		t.Errorf("epoch_age_seconds = %v; want the time from %v to %v", got.EpochAge, st.EpochTime, d.Time)
	}
	if len(got.Streams) != len(st.Streams) {
		t.Fatalf("%d streams, Status %d", len(got.Streams), len(st.Streams))
	}
	reasons := map[string]int64{}
	for _, q := range got.Quarantine {
		if q.Reason == "" || q.Rows <= 0 {
			t.Errorf("quarantine reason %+v: want a reason and rows", q)
		}
		reasons[q.Stream] += q.Rows
	}
	for _, s := range got.Streams {
		want := st.Streams[s.Name]
		if s.Read != want.Read || s.Committed != want.Committed || s.Totals != want.Totals {
			t.Errorf("stream %s: read %d, committed %+v, totals %+v; Status %d, %+v, %+v", s.Name, s.Read,
				s.Committed, s.Totals, want.Read, want.Committed, want.Totals)
		}
		if want.Totals.Quarantined == 0 || reasons[s.Name] != want.Totals.Quarantined {
			t.Errorf("stream %s: reasons count %d records, Status %d quarantined (want > 0 and equal)",
				s.Name, reasons[s.Name], want.Totals.Quarantined)
		}
	}
	var kinds []string
	for _, e := range got.Events {
		kinds = append(kinds, e.Kind)
	}
	for _, k := range []etl.EventKind{etl.EventSyncStarted, etl.EventQuarantineAdded, etl.EventStepFailed, etl.EventSyncFailed} {
		if !strings.Contains(strings.Join(kinds, " "), string(k)) {
			t.Errorf("events %v: want %s among them", kinds, k)
		}
	}
	if strings.Contains(strings.Join(kinds, " "), string(etl.EventEpochCommitted)) {
		t.Errorf("events %v: epoch.committed is left out", kinds)
	}
	if got.Retries != st.Retries {
		t.Errorf("retries %d, Status %d", got.Retries, st.Retries)
	}
	if got.LastError == "" || !strings.Contains(got.LastError, "xxxxx") {
		t.Errorf("last_error %q: want the step's error, redacted", got.LastError)
	}

	// Nothing served holds the password or a record's payload.
	payload := func() string {
		_, _, _, pl := src.Generate(faker.Orders, 7, nil)
		return string(pl)
	}()
	for _, path := range []string{"status.json", "", "events"} {
		body := fetchBody(t, base+path)
		if strings.Contains(body, secret) {
			t.Errorf("GET %s shows the password: %s", path, body)
		}
		if strings.Contains(body, payload[:min(len(payload), 40)]) {
			t.Errorf("GET %s shows a record's payload", path)
		}
	}

	for _, tc := range []struct{ path, ctype string }{
		{"", "text/html; charset=utf-8"}, {"status.json", "application/json"}, {"events", "text/event-stream"},
	} {
		req, _ := http.NewRequest(http.MethodHead, base+tc.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != tc.ctype || res.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("HEAD %q: %s, %q, %q; want 200, %q, no-store", tc.path, res.Status, res.Header.Get("Content-Type"),
				res.Header.Get("Cache-Control"), tc.ctype)
		}
		if tc.path == "" && !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("the page's Content-Security-Policy %q: want default-src 'none'", res.Header.Get("Content-Security-Policy"))
		}
		res, err = http.Post(base+tc.path, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST %q: %s, want 405", tc.path, res.Status)
		}
	}
	// (The SVG namespace is a name, not a URL anything loads.)
	page := strings.ReplaceAll(fetchBody(t, base), "'http://www.w3.org/2000/svg'", "")
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") || strings.Contains(page, " src=") {
		t.Error("the page refers to an outside URL or loads a file: it must be self-contained")
	}
}

// fetchBody GETs url and returns its body; for the event stream, its
// first event's data.
func fetchBody(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	if res.Header.Get("Content-Type") != "text/event-stream" {
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var d statusDoc
			if err := json.Unmarshal([]byte(data), &d); err != nil || len(d.Pipelines) != 1 {
				t.Fatalf("the event stream's data is not the status document: %v", err)
			}
			return data
		}
	}
	t.Fatalf("the event stream ended without data: %v", sc.Err())
	return ""
}

// TestStatusPageNone: a page of no pipelines (nil ones are left out)
// serves an empty list, at any mount path.
func TestStatusPageNone(t *testing.T) {
	srv := httptest.NewServer(etl.StatusPage(nil))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/status.json", "/x/status.json"} {
		if d := getStatus(t, srv.URL+path); d.Pipelines == nil || len(d.Pipelines) != 0 || d.Time.IsZero() {
			t.Errorf("GET %s: %+v; want a time and an empty list", path, d)
		}
	}
}
