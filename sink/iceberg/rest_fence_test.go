package iceberg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// propsProxy stands in front of the REST catalog test server as a
// catalog that does not take custom table properties: a commit whose
// set-properties update sets an openetl.* key is refused with 400
// (refuse), or taken with those keys dropped (drop). Standard
// properties (iceberg-go's name mapping) pass. With outage set, it takes
// custom properties instead and answers outage commits that set them,
// after the first outageAfter, with 503 Service Unavailable, without
// forwarding them.
type propsProxy struct {
	*httptest.Server
	mu          sync.Mutex
	refused     int // commits refused
	dropped     int // keys dropped
	outageAfter int // commits with custom properties to pass before the outage
	outage      int // commits with custom properties still to answer 503
	unavailable int // commits answered 503
}

func newPropsProxy(t *testing.T, upstream string, drop bool) *propsProxy {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &propsProxy{}
	forward := httputil.NewSingleHostReverseProxy(target)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.Contains(r.URL.Path, "/tables/") {
			forward.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// Numbers stay as they are: snapshot IDs don't fit a float64.
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var req map[string]any
		if dec.Decode(&req) == nil {
			custom := 0
			var keep []any
			updates, _ := req["updates"].([]any)
			for _, u := range updates {
				m, _ := u.(map[string]any)
				if m["action"] == "set-properties" {
					props, _ := m["updates"].(map[string]any)
					for k := range props {
						if strings.HasPrefix(k, "openetl.") {
							custom++
							delete(props, k)
						}
					}
					if len(props) == 0 {
						continue
					}
				}
				keep = append(keep, u)
			}
			p.mu.Lock()
			outage := custom > 0 && p.outage > 0 && p.outageAfter == 0
			if custom > 0 && p.outageAfter > 0 {
				p.outageAfter--
			}
			if outage {
				p.outage--
				p.unavailable++
			}
			passing := p.unavailable > 0 || p.outage > 0
			p.mu.Unlock()
			if outage {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
					"message": "catalog unavailable", "type": "ServiceUnavailableException", "code": 503}})
				return
			}
			if passing {
				// An outage proxy takes custom properties: forward the
				// request as it came.
				r.Body = io.NopCloser(bytes.NewReader(body))
				r.ContentLength = int64(len(body))
				forward.ServeHTTP(w, r)
				return
			}
			if custom > 0 && !drop {
				p.mu.Lock()
				p.refused++
				p.mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
					"message": "custom table properties are not allowed", "type": "BadRequestException", "code": 400}})
				return
			}
			if custom > 0 {
				p.mu.Lock()
				p.dropped += custom
				p.mu.Unlock()
				req["updates"] = keep
				if body, err = json.Marshal(req); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *propsProxy) counts() (refused, dropped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused, p.dropped
}

// checkNoMarkers fails when props hold a pipeline marker.
func checkNoMarkers(t *testing.T, name string, props map[string]string) {
	t.Helper()
	for k := range props {
		if strings.HasPrefix(k, "openetl.") {
			t.Errorf("%s: table property %s=%s: want no pipeline markers in the properties", name, k, props[k])
		}
	}
}

// currentSummary returns the summary properties of the current snapshot
// of table ns.name, read with iceberg-go through the REST catalog at uri.
func currentSummary(t *testing.T, uri, ns, name string) map[string]string {
	t.Helper()
	tbl, err := openREST(t, uri).LoadTable(context.Background(), table.Identifier{ns, name})
	if err != nil {
		t.Fatal(err)
	}
	s := tbl.CurrentSnapshot()
	if s == nil || s.Summary == nil {
		t.Fatalf("%s: no current snapshot", name)
	}
	return s.Summary.Properties
}

// TestRestZombieFencedSnapshots is TestRestZombieFenced with the
// pipeline's markers in snapshot summaries: chosen (Fence: FenceSnapshots),
// and chosen by FenceAuto in front of a catalog that refuses custom
// table properties with 400, or takes them and drops them. The zombie's
// commits and its stale Recover are fenced all the same, the rows are
// read once, and the markers are in the current snapshot's summary, not
// in the properties.
func TestRestZombieFencedSnapshots(t *testing.T) {
	uri := restURI(t)
	t.Run("option", func(t *testing.T) {
		restZombieFenced(t, uri, uri, iceberg.Config{Fence: iceberg.FenceSnapshots}, true)
	})
	for _, drop := range []bool{false, true} {
		name := map[bool]string{false: "auto-refused", true: "auto-dropped"}[drop]
		t.Run(name, func(t *testing.T) {
			proxy := newPropsProxy(t, uri, drop)
			restZombieFenced(t, proxy.URL, uri, iceberg.Config{}, true)
			refused, dropped := proxy.counts()
			t.Logf("commits refused %d, property keys dropped %d", refused, dropped)
			if refused+dropped == 0 {
				t.Error("the proxy saw no pipeline property: nothing was refused or dropped")
			}
		})
	}
}

// TestRestZombieEmptyEpochFencedSnapshots is TestZombieEmptyEpochFenced
// through the REST catalog with the markers in snapshot summaries (by
// option, and by FenceAuto in front of a catalog that refuses them as
// properties).
func TestRestZombieEmptyEpochFencedSnapshots(t *testing.T) {
	uri := restURI(t)
	t.Run("option", func(t *testing.T) {
		ns := restNamespace("empty")
		zombieEmptyEpochFenced(t, func() catalog.Catalog { return openREST(t, uri) },
			iceberg.Config{Namespace: []string{ns}, Fence: iceberg.FenceSnapshots})
	})
	t.Run("auto-refused", func(t *testing.T) {
		proxy := newPropsProxy(t, uri, false)
		ns := restNamespace("empty")
		zombieEmptyEpochFenced(t, func() catalog.Catalog { return openREST(t, proxy.URL) },
			iceberg.Config{Namespace: []string{ns}})
		if refused, _ := proxy.counts(); refused == 0 {
			t.Error("the proxy refused nothing")
		}
	})
}

// TestRestFenceAutoRefusedSync syncs the fake customers (merged) and
// orders through a catalog that refuses custom table properties, with
// the default Fence: the first commit that sets them is refused, the
// destination goes on with snapshot summaries, and pyiceberg reads every
// row once; a second Sync (a new generation: Recover raises the fence in
// a snapshot of its own) adds nothing.
func TestRestFenceAutoRefusedSync(t *testing.T) {
	ctx := context.Background()
	uri := restURI(t)
	proxy := newPropsProxy(t, uri, false)
	ns, dir := restNamespace("refused"), t.TempDir()
	const rows = 1_000
	for i := range 2 {
		res, err := authSync(ctx, t, openREST(t, proxy.URL), ns, dir, rows)
		if err != nil {
			t.Fatalf("Sync %d: %v", i+1, err)
		}
		t.Logf("Sync %d: generation %d, %d epochs", i+1, res.Generation, res.Epochs)
	}
	refused, _ := proxy.counts()
	t.Logf("commits refused: %d", refused)
	if refused == 0 {
		t.Error("the proxy refused nothing")
	}
	got := readREST(t, uri, ns)
	verifyFakerTables(t, got, rows)
	for name, tb := range got {
		checkNoMarkers(t, name, tb.Properties)
		if s := currentSummary(t, uri, ns, name); s["openetl.auth.fence"] != "2" || s["openetl.auth.generation"] != "1" {
			t.Errorf("%s: current snapshot's summary %v: want fence 2 (raised by the second Sync), generation 1", name, s)
		}
	}
}

// TestRestFenceAutoOutageKeepsProperties: with the default Fence, a
// catalog that takes custom table properties but answers 503 to one
// commit that sets them (the first, a table's mark, or a later one, an
// epoch's) is not taken for one that refuses them. The failed commit is
// retried as it was (by the runner, or by the next Sync of the same
// Destination), the output is exact, and the tables' markers stay in
// their properties: FenceAuto did not move them to snapshot summaries
// for the rest of the process on an outage.
func TestRestFenceAutoOutageKeepsProperties(t *testing.T) {
	for _, skip := range []int{0, 2} {
		t.Run(fmt.Sprintf("after-%d", skip), func(t *testing.T) {
			ctx := context.Background()
			uri := restURI(t)
			proxy := newPropsProxy(t, uri, false)
			proxy.outageAfter, proxy.outage = skip, 1
			ns, dir := restNamespace("outage"), t.TempDir()
			const rows = 1_000
			dst := newDest(t, openREST(t, proxy.URL), iceberg.Config{Namespace: []string{ns}})
			store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close(ctx)
			for i := range 2 {
				src, err := faker.New(faker.Config{Seed: 42, Rows: rows})
				if err != nil {
					t.Fatal(err)
				}
				p, err := etl.NewPipeline("auth").From(src).To(dst).Checkpoints(store).
					Mode(delivery.Merge, faker.Customers).Require(delivery.ExactlyOnce).Build()
				if err != nil {
					t.Fatal(err)
				}
				res, err := p.Sync(ctx)
				p.Close(ctx)
				t.Logf("Sync %d: generation %d, %d epochs, err %v", i+1, res.Generation, res.Epochs, err)
				if err != nil && (i > 0 || etl.IsPermanent(err) || !strings.Contains(err.Error(), "unavailable")) {
					t.Fatalf("Sync %d: %v", i+1, err)
				}
			}
			proxy.mu.Lock()
			unavailable := proxy.unavailable
			proxy.mu.Unlock()
			if unavailable != 1 {
				t.Fatalf("the proxy answered %d commits with 503, want 1", unavailable)
			}
			got := readREST(t, uri, ns)
			verifyFakerTables(t, got, rows)
			for name, tb := range got {
				if e := tb.Properties["openetl.auth.epoch"]; e == "" || e == "0" {
					t.Errorf("%s: properties %v: want the pipeline's epoch there (markers moved to summaries after an outage?)", name, tb.Properties)
				}
			}
		})
	}
}

// gateProxy forwards to the REST catalog; once armed, it holds the next
// commit to table hold (closing arrived) until release is closed.
type gateProxy struct {
	*httptest.Server
	mu      sync.Mutex
	hold    string
	arrived chan struct{}
	release chan struct{}
}

func newGateProxy(t *testing.T, upstream string) *gateProxy {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateProxy{}
	forward := httputil.NewSingleHostReverseProxy(target)
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		var arrived, release chan struct{}
		if g.hold != "" && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tables/"+g.hold) {
			arrived, release = g.arrived, g.release
			g.hold = ""
		}
		g.mu.Unlock()
		if arrived != nil {
			close(arrived)
			<-release
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(g.Close)
	return g
}

// arm makes the next commit to table name wait for release.
func (g *gateProxy) arm(name string) (arrived, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold, g.arrived, g.release = name, make(chan struct{}), make(chan struct{})
	return g.arrived, g.release
}

// TestRestFenceSnapshotsRace: a zombie's commit has passed its fence
// check (on metadata loaded right before it) and is on its way to the
// catalog when the newer attempt's Recover raises the fence. With the
// markers in snapshot summaries (FenceSnapshots, and FenceAuto, which
// raises a fence in a snapshot too on a catalog that can't check the
// fence atomically) the raise is a snapshot, the zombie's commit
// requires the snapshot it checked, and the catalog refuses it: the
// zombie's Commit fails with sink.ErrFenced and its rows are not in the
// table. (With FenceProperties on a REST catalog this is the window of
// one request the package doc states: the commit lands.)
func TestRestFenceSnapshotsRace(t *testing.T) {
	for _, fence := range []iceberg.Fence{iceberg.FenceSnapshots, iceberg.FenceAuto} {
		t.Run(fence.String(), func(t *testing.T) { testRestFenceRace(t, fence) })
	}
}

func testRestFenceRace(t *testing.T, fence iceberg.Fence) {
	ctx := context.Background()
	uri := restURI(t)
	gate := newGateProxy(t, uri)
	ns := restNamespace("race")
	cfg := iceberg.Config{Namespace: []string{ns}, Fence: fence}
	specs := []sink.StreamSpec{appended("a")}
	const pipeline = "race"
	write := func(w sink.Writer, epoch uint64, ops []op) sink.Committable {
		t.Helper()
		rec := batch(ops, false)
		defer rec.Release()
		if err := w.Write(ctx, "a", rec); err != nil {
			t.Fatal(err)
		}
		c, err := w.PreCommit(ctx, epoch)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old, err := newDest(t, openREST(t, gate.URL), cfg).Writer(ctx, writerConfig(pipeline, 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	if _, err := old.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	epoch1 := []op{{key: 1, kind: "insert", seq: 1, name: "a1"}, {key: 2, kind: "insert", seq: 2, name: "b1"}}
	c1 := write(old, 1, epoch1)
	if err := old.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatalf("Commit(1): %v", err)
	}
	zombie2 := write(old, 2, []op{{key: 9, kind: "insert", seq: 30, name: "zombie"}})

	arrived, release := gate.arm("a")
	zerr := make(chan error, 1)
	go func() { zerr <- old.Commit(ctx, 2, []sink.Committable{zombie2}) }()
	select {
	case <-arrived: // checked, and on its way
	case err := <-zerr:
		t.Fatalf("zombie Commit(2) returned before its commit reached the catalog: %v", err)
	}
	young, err := newDest(t, openREST(t, uri), cfg).Writer(ctx, writerConfig(pipeline, 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer young.Close(ctx)
	head := &checkpoint.Record{Pipeline: pipeline, Epoch: 1, Generation: 1, Committables: [][]byte{c1}}
	if _, err := young.Recover(ctx, 2, head); err != nil {
		t.Fatalf("Recover(2): %v", err)
	}
	close(release)
	if err := <-zerr; !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("zombie Commit(2) that raced Recover: %v, want an error wrapping sink.ErrFenced", err)
	}
	rows, err := scan(ctx, openREST(t, uri), ns, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(epoch1) {
		t.Errorf("table a has %d rows, want epoch 1's %d: the zombie's commit landed", len(rows), len(epoch1))
	}
}
