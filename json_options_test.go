package etl_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
)

// schemaRecorder is a fake destination that records the schema of each
// batch its writers get.
type schemaRecorder struct {
	*sinktest.FakeDestination
	mu      sync.Mutex
	schemas map[string]*arrow.Schema
}

func (d *schemaRecorder) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w, err := d.FakeDestination.Writer(ctx, cfg)
	return &recordingWriter{Writer: w, d: d}, err
}

type recordingWriter struct {
	sink.Writer
	d *schemaRecorder
}

func (w *recordingWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	w.d.mu.Lock()
	w.d.schemas[stream] = rec.Schema()
	w.d.mu.Unlock()
	return w.Writer.Write(ctx, stream, rec)
}

// TestJSONOptions: Builder.JSON reaches the engine: nested values as
// JSON text and RFC 3339 strings as timestamps, for the streams named
// only.
func TestJSONOptions(t *testing.T) {
	doc := []byte(`{"o":{"a":1},"l":[1],"t":"2024-01-02T03:04:05Z"}`)
	for _, tc := range []struct {
		name string
		opts *etl.JSONOptions
		want map[string]arrow.Type
	}{
		{"default", nil, map[string]arrow.Type{"o": arrow.STRUCT, "l": arrow.LIST, "t": arrow.STRING}},
		{"nested as text", &etl.JSONOptions{NestedAsText: true}, map[string]arrow.Type{"o": arrow.STRING, "l": arrow.STRING, "t": arrow.STRING}},
		{"timestamps", &etl.JSONOptions{Timestamps: true}, map[string]arrow.Type{"o": arrow.STRUCT, "l": arrow.LIST, "t": arrow.TIMESTAMP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &fuzzSource{stream: source.Stream{Name: fuzzStream, Format: source.FormatJSON},
				recs: []fuzzRecord{{op: source.OpInsert, payload: doc}}}
			dst := &schemaRecorder{FakeDestination: sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply}),
				schemas: map[string]*arrow.Schema{}}
			b := etl.NewPipeline("json").From(src).To(dst).Checkpoints(checkpoint.NewMem())
			if tc.opts != nil {
				b = b.JSON(*tc.opts, fuzzStream)
			}
			p, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			sc := dst.schemas[fuzzStream]
			if sc == nil {
				t.Fatal("no batch written")
			}
			for col, want := range tc.want {
				f, ok := sc.FieldsByName(col)
				if !ok || f[0].Type.ID() != want {
					t.Errorf("column %s: %v, want %v", col, f, want)
				}
			}
		})
	}
	src := &fuzzSource{stream: source.Stream{Name: fuzzStream, Format: source.FormatJSON}}
	_, err := etl.NewPipeline("json").From(src).To(sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})).
		Checkpoints(checkpoint.NewMem()).JSON(etl.JSONOptions{Timestamps: true}).Build()
	if err == nil || !strings.Contains(err.Error(), "JSON options: no stream names") {
		t.Errorf("JSON options naming no stream: Build gave %v", err)
	}
}
