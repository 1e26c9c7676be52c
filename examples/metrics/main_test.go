package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/openetl/etl/source/faker"
)

// TestScrape syncs with the program's wiring, then scrapes its endpoint
// and finds the pipeline's counts there: what Sync returned is what the
// metrics say (Sync returns once its last epoch is committed, and the
// exporter reads the instruments at each scrape).
func TestScrape(t *testing.T) {
	mp, handler, err := newTelemetry()
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Shutdown(context.Background())
	srv := httptest.NewServer(handler)
	defer srv.Close()

	const rows = 3000
	res, err := syncFake(t.Context(), mp, t.TempDir(), faker.Config{Rows: rows, SplitsPerStream: 2, MalformedShare: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	got := scrape(t, srv.URL)
	for _, stream := range []string{faker.Customers, faker.Orders} {
		c := res.Streams[stream]
		if c.Written+c.Quarantined != rows || c.Quarantined == 0 {
			t.Errorf("%s: Sync wrote %d and quarantined %d of %d records", stream, c.Written, c.Quarantined, rows)
		}
		for name, want := range map[string]float64{
			"openetl_rows_read_total":        rows,
			"openetl_rows_written_total":     float64(c.Written),
			"openetl_rows_quarantined_total": float64(c.Quarantined),
		} {
			if v := got.value(t, name, "openetl_stream", stream); v != want {
				t.Errorf("%s{openetl_stream=%q} = %v, want %v", name, stream, v, want)
			}
		}
		if v := got.value(t, "openetl_bytes_written_total", "openetl_stream", stream); v < float64(c.Written) {
			t.Errorf("openetl_bytes_written_total{openetl_stream=%q} = %v for %d rows", stream, v, c.Written)
		}
	}
	for name, want := range map[string]float64{
		"openetl_epochs_committed_total": float64(res.Epochs),
		"openetl_epoch_duration_seconds": float64(res.Epochs), // the histogram's count
		"openetl_attempts_total":         1,
	} {
		if v := got.value(t, name, "openetl_pipeline", "metrics"); v != want || want == 0 {
			t.Errorf("%s = %v, want %v (Sync committed %d epochs)", name, v, want, res.Epochs)
		}
	}
	if v := got.value(t, "openetl_attempts_total", "openetl_outcome", "succeeded"); v != 1 {
		t.Errorf("openetl_attempts_total{openetl_outcome=\"succeeded\"} = %v, want 1", v)
	}
}

type families map[string]*dto.MetricFamily

// scrape gets url's /metrics and parses Prometheus's text format.
func scrape(t *testing.T, url string) families {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// value returns the value (a histogram's count) of the one sample of
// family name whose label has the value.
func (fs families) value(t *testing.T, name, label, value string) float64 {
	t.Helper()
	var found []float64
	for _, m := range fs[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				found = append(found, m.GetCounter().GetValue()+m.GetGauge().GetValue()+float64(m.GetHistogram().GetSampleCount()))
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s{%s=%q}: %d samples in the scrape, want 1", name, label, value, len(found))
	}
	return found[0]
}
