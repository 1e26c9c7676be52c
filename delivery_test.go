package etl_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// supersetSource is faker with a weaker replay class and a catalog a test
// can change between Build and Sync.
type supersetSource struct {
	*faker.Source
	replay  source.Replay
	dropKey string // stream whose primary key Discover hides
}

func (s *supersetSource) Replay() source.Replay { return s.replay }

func (s *supersetSource) Discover(ctx context.Context) (source.Catalog, error) {
	c, err := s.Source.Discover(ctx)
	for i := range c.Streams {
		if c.Streams[i].Name == s.dropKey {
			c.Streams[i].PrimaryKey = nil
		}
	}
	return c, err
}

// mergeDest is sink/parquet claiming it can merge, to reach the merge
// rules (it cannot really; nothing is written in these tests).
type mergeDest struct{ *parquet.Destination }

func (mergeDest) Capabilities() sink.Capabilities { return sink.Capabilities{Merge: true} }

func parts(t *testing.T, replay source.Replay) (*supersetSource, *parquet.Destination) {
	t.Helper()
	f, err := faker.New(faker.Config{Rows: 100})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := parquet.New(parquet.Config{Bucket: memblob.OpenBucket(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return &supersetSource{Source: f, replay: replay}, dst
}

func TestGuaranteesExactlyOnceForFakerToParquet(t *testing.T) {
	src, dst := parts(t, source.ReplayExact)
	p, err := etl.NewPipeline("g").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Require(delivery.ExactlyOnce).Build()
	if err != nil {
		t.Fatal(err)
	}
	gs := p.Guarantees()
	if len(gs) != 2 {
		t.Fatalf("guarantees %+v", gs)
	}
	for _, g := range gs {
		if g.Level != delivery.ExactlyOnce || !strings.Contains(g.Reason, "exact replay") {
			t.Errorf("stream %s: %v (%s)", g.Stream, g.Level, g.Reason)
		}
	}
}

func TestBuildNamesStreamsBelowTheRequiredLevel(t *testing.T) {
	src, dst := parts(t, source.ReplaySuperset)
	_, err := etl.NewPipeline("g").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Require(delivery.ExactlyOnce).Build()
	if !errors.Is(err, delivery.ErrUnmet) {
		t.Fatalf("Build: %v; want ErrUnmet", err)
	}
	for _, want := range []string{`"customers" gets at least once`, `"orders" gets at least once`, "superset replay"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build error %q lacks %q", err, want)
		}
	}
	// Without the requirement it builds, and says what each stream gets.
	p, err := etl.NewPipeline("g").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Build()
	if err != nil || p.Guarantees()[0].Level != delivery.AtLeastOnce {
		t.Fatalf("Build without Require: %v %+v", err, p)
	}
}

func TestBuildRejectsImpossibleModes(t *testing.T) {
	src, dst := parts(t, source.ReplayExact)
	_, err := etl.NewPipeline("g").From(src).To(dst).Checkpoints(checkpoint.NewMem()).
		Mode(delivery.Merge, "orders").Mode(delivery.Append, "invoices").Build()
	for _, want := range []string{`"orders": merge requested, but the destination cannot merge`, `stream "invoices" is not in the source's catalog`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Build error %v lacks %q", err, want)
		}
	}
}

// TestSyncChecksTheCatalogAgain: a stream that loses its primary key after
// Build can no longer be merged; the next sync fails naming it, before
// claiming the pipeline.
func TestSyncChecksTheCatalogAgain(t *testing.T) {
	src, dst := parts(t, source.ReplaySuperset)
	store := checkpoint.NewMem()
	p, err := etl.NewPipeline("g").From(src).To(mergeDest{dst}).Checkpoints(store).
		Mode(delivery.Merge, "customers").Streams("customers").Require(delivery.EffectivelyOnce).Build()
	if err != nil {
		t.Fatal(err)
	}
	if g := p.Guarantees(); len(g) != 1 || g[0].Level != delivery.EffectivelyOnce {
		t.Fatalf("guarantees %+v", g)
	}
	src.dropKey = "customers"
	_, err = p.Sync(context.Background())
	if !errors.Is(err, delivery.ErrInvalid) || !strings.Contains(err.Error(), `"customers": merge needs a primary key`) {
		t.Fatalf("Sync: %v", err)
	}
	if gen, _, err := store.Claim(context.Background(), "g"); err != nil || gen != 1 {
		t.Fatalf("the failed sync claimed the pipeline: generation %d, %v", gen, err)
	}
}

// specDest is sink/parquet that can merge and checks each stream's spec
// the way a user's destination would, keeping what it was asked.
type specDest struct {
	*parquet.Destination
	got []sink.StreamSpec
}

func (*specDest) Capabilities() sink.Capabilities {
	return sink.Capabilities{Merge: true, IdentifierCase: "upper"}
}

func (d *specDest) CheckStream(spec sink.StreamSpec) error {
	d.got = append(d.got, spec)
	if spec.Mode == sink.Merge && spec.Table == "CUSTOMERS" {
		return errors.New("this destination can't merge CUSTOMERS")
	}
	return nil
}

// TestBuildHandsTheDestinationEachStreamsSpec: a destination that
// implements sink.SpecChecker is asked about every selected stream, with
// the pipeline's mode and the stream's key under its naming rules, and
// its refusal fails Build naming the stream.
func TestBuildHandsTheDestinationEachStreamsSpec(t *testing.T) {
	src, dst := parts(t, source.ReplayExact)
	d := &specDest{Destination: dst}
	_, err := etl.NewPipeline("g").From(src).To(d).Checkpoints(checkpoint.NewMem()).
		Mode(delivery.Merge, "orders").Build()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]sink.StreamSpec{
		"orders":    {Stream: "orders", Table: "ORDERS", Mode: sink.Merge, Key: []string{"ID"}},
		"customers": {Stream: "customers", Table: "CUSTOMERS", Mode: sink.Append, Key: []string{"ID"}},
	}
	if len(d.got) != len(want) {
		t.Fatalf("CheckStream got %+v; want %+v", d.got, want)
	}
	for _, g := range d.got {
		w := want[g.Stream]
		if g.Table != w.Table || g.Mode != w.Mode || strings.Join(g.Key, ",") != strings.Join(w.Key, ",") {
			t.Errorf("CheckStream got %+v; want %+v", g, w)
		}
	}
	_, err = etl.NewPipeline("g").From(src).To(&specDest{Destination: dst}).Checkpoints(checkpoint.NewMem()).
		Mode(delivery.Merge, "customers").Build()
	if err == nil || !strings.Contains(err.Error(), `stream "customers": this destination can't merge CUSTOMERS`) {
		t.Fatalf("Build: %v; want the destination's refusal, naming the stream", err)
	}
}

// TestBuildRefusesOverwriteIntoParquet: Parquet only appends (its
// Capabilities declare no overwrite), so a stream set to overwrite fails
// Build instead of being appended to.
func TestBuildRefusesOverwriteIntoParquet(t *testing.T) {
	src, dst := parts(t, source.ReplayExact)
	_, err := etl.NewPipeline("g").From(src).To(dst).Checkpoints(checkpoint.NewMem()).
		Mode(delivery.Overwrite, "orders").Build()
	if !errors.Is(err, delivery.ErrInvalid) || !strings.Contains(err.Error(), `stream "orders": overwrite requested, but the destination can't replace`) {
		t.Fatalf("Build: %v; want overwrite refused for orders", err)
	}
}

// capsDest is a user's destination that implements no sink.SpecChecker:
// its writers (sinktest's fake) would write any mode as an append, as a
// writer that ignores WriterConfig's modes does. Its Capabilities are
// what a test sets, and may change between Build and Sync (a user's
// configuration reloaded).
type capsDest struct {
	*sinktest.FakeDestination
	mu   sync.Mutex
	caps sink.Capabilities
}

func (d *capsDest) Capabilities() sink.Capabilities {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.caps
}

// TestModesNeedCapabilities: a destination that doesn't implement
// sink.SpecChecker no longer accepts every spec: a stream set to
// overwrite, or merged with hard deletes, fails Build naming the stream
// unless the destination's Capabilities declare it, so Guarantees never
// claims a mode the writers were not made for; and an attempt whose
// destination no longer declares it fails before it claims the
// pipeline.
func TestModesNeedCapabilities(t *testing.T) {
	newSrc := func() *supersetSource { src, _ := parts(t, source.ReplayExact); return src }
	newDst := func(caps sink.Capabilities) *capsDest {
		return &capsDest{FakeDestination: sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply}), caps: caps}
	}
	for _, c := range []struct {
		caps sink.Capabilities
		b    func(*etl.Builder) *etl.Builder
		want string
	}{
		{sink.Capabilities{}, func(b *etl.Builder) *etl.Builder { return b.Mode(delivery.Overwrite, "orders") },
			`stream "orders": overwrite requested, but the destination can't replace a table's contents`},
		{sink.Capabilities{Merge: true}, func(b *etl.Builder) *etl.Builder {
			return b.Mode(delivery.Merge, "orders").Deletes(sink.HardDeletes, "orders")
		}, `stream "orders": hard deletes requested, but the destination keeps a deleted key's row`},
		{sink.Capabilities{}, func(b *etl.Builder) *etl.Builder { return b.Mode(delivery.Merge, "orders") },
			`stream "orders": merge requested, but the destination cannot merge`},
	} {
		_, err := c.b(etl.NewPipeline("g").From(newSrc()).To(newDst(c.caps)).Checkpoints(checkpoint.NewMem())).Build()
		if !errors.Is(err, delivery.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Build into %+v: %v; want delivery.ErrInvalid saying %s", c.caps, err, c.want)
		}
	}
	dst := newDst(sink.Capabilities{Merge: true, HardDeletes: true, Overwrite: true})
	store := checkpoint.NewMem()
	p, err := etl.NewPipeline("g").From(newSrc()).To(dst).Checkpoints(store).
		Mode(delivery.Overwrite, "orders").Mode(delivery.Merge, "customers").Deletes(sink.HardDeletes, "customers").Build()
	if err != nil {
		t.Fatalf("Build into a destination that declares every mode: %v", err)
	}
	defer p.Close(context.Background())
	dst.mu.Lock()
	dst.caps = sink.Capabilities{Merge: true}
	dst.mu.Unlock()
	_, err = p.Sync(context.Background())
	if !errors.Is(err, delivery.ErrInvalid) || !strings.Contains(err.Error(), `stream "orders": overwrite requested`) ||
		!strings.Contains(err.Error(), `stream "customers": hard deletes requested`) {
		t.Fatalf("Sync after the destination dropped overwrite and hard deletes: %v", err)
	}
	if gen, _, err := store.Claim(context.Background(), "g"); err != nil || gen != 1 {
		t.Fatalf("the refused sync claimed the pipeline: generation %d, %v", gen, err)
	}
}
