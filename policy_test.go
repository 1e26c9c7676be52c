package etl_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
)

// docs is a source of one JSON stream, "docs", read by one split that
// emits the documents in order with a resume point after each (its
// state: how many it emitted). Documents can be appended between syncs.
type docs struct {
	mu   sync.Mutex
	docs []string
}

func (d *docs) Discover(context.Context) (source.Catalog, error) {
	return source.Catalog{Streams: []source.Stream{{Name: "docs", PrimaryKey: []string{"id"}}}}, nil
}
func (d *docs) Replay() source.Replay { return source.ReplayExact }
func (d *docs) Open(_ context.Context, _ []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	n, _ := strconv.Atoi(string(resume["docs"]))
	return []source.Split{&docsSplit{d: d, next: n}}, nil
}

type docsSplit struct {
	d    *docs
	next int
}

func (s *docsSplit) ID() source.SplitID { return "docs" }
func (s *docsSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	s.d.mu.Lock()
	all := append([]string(nil), s.d.docs...)
	s.d.mu.Unlock()
	for ; s.next < len(all); s.next++ {
		if err := e.Record("docs", source.OpInsert, int64(s.next+1), []byte(strconv.Itoa(s.next)), []byte(all[s.next])); err != nil {
			return err
		}
		if err := e.ResumePoint([]byte(strconv.Itoa(s.next + 1))); err != nil {
			return err
		}
	}
	return e.ResumePoint([]byte(strconv.Itoa(s.next)))
}

// TestSchemaPolicies: Builder.SchemaPolicy reaches the engine. After a
// first sync learns the stream's schema, a document with a new field is
// quarantined under PolicyFreeze and loses the field under
// PolicyDiscard, each with a schema.blocked event; under the default
// policy the column is added.
func TestSchemaPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy      etl.Policy
		quarantined int64
		change      string
		column      bool
	}{
		{etl.PolicyFreeze, 1, "blocked", false},
		{etl.PolicyDiscard, 0, "discarded", false},
		{"", 0, "", true},
	} {
		name := string(tc.policy)
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			src := &docs{docs: []string{`{"id":1,"a":1}`, `{"id":2,"a":2}`}}
			dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
			store := checkpoint.NewMem()
			if _, err := mustSync(t, etl.NewPipeline("policy").From(src).To(dst).Checkpoints(store)); err != nil {
				t.Fatal(err)
			}
			src.docs = append(src.docs, `{"id":3,"a":3,"b":"new"}`, `{"id":4,"a":4}`)
			var mu sync.Mutex
			var blocked []etl.Event
			done := make(chan struct{})
			b := etl.NewPipeline("policy").From(src).To(dst).Checkpoints(store).OnEvent(func(e etl.Event) {
				mu.Lock()
				defer mu.Unlock()
				switch e.Kind {
				case etl.EventSchemaBlocked:
					blocked = append(blocked, e)
				case etl.EventSyncSucceeded:
					close(done)
				}
			}, 0)
			if tc.policy != "" {
				b = b.SchemaPolicy(tc.policy, "docs")
			}
			p, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Sync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Streams["docs"]; c.Read != 2 || c.Quarantined != tc.quarantined {
				t.Errorf("counts %+v, want 2 read, %d quarantined", c, tc.quarantined)
			}
			testutil.Recv(t, "the sync.succeeded event", done)
			mu.Lock()
			defer mu.Unlock()
			if tc.change == "" && len(blocked) != 0 || tc.change != "" && (len(blocked) != 1 || blocked[0].Change != tc.change || blocked[0].Column != "b") {
				t.Errorf("schema.blocked events %+v, want change %q of b", blocked, tc.change)
			}
			hasB := false
			for _, r := range dst.Rows("docs") {
				if _, ok := r.Values["b"]; ok {
					hasB = true
				}
			}
			if hasB != tc.column {
				t.Errorf("column b at the destination: %v, want %v", hasB, tc.column)
			}
		})
	}
}

func mustSync(t *testing.T, b *etl.Builder) (etl.Result, error) {
	t.Helper()
	p, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return p.Sync(context.Background())
}
