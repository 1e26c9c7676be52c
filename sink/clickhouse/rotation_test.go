package clickhouse_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
	"github.com/openetl/etl/source/faker"
)

// faultProxy is a TCP proxy in front of the real server: the first of two
// addresses, the second being the server's own. When the client sends a
// packet that matches the trigger, the proxy "stops": it closes its
// listener (dials move on to the next address) and every other
// connection, and either cuts the triggering connection at once (the
// server sees half a request and drops it) or stops passing the server's
// answers on it, so that the request completes on the server while the
// client never hears of it and fails on its read timeout.
type faultProxy struct {
	target string
	ln     net.Listener
	// trigger matches the client's bytes on one connection so far.
	trigger func(sent []byte) bool
	// silence: the triggering connection keeps forwarding the client's
	// bytes but drops the server's (the request lands unacknowledged);
	// otherwise it is cut at once.
	silence bool

	mu      sync.Mutex
	conns   map[*proxyConn]bool
	tripped bool
}

type proxyConn struct {
	client, server net.Conn
	silenced       bool
}

func newFaultProxy(t *testing.T, target string, silence bool, trigger func([]byte) bool) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{target: target, ln: ln, trigger: trigger, silence: silence, conns: map[*proxyConn]bool{}}
	go p.accept()
	t.Cleanup(p.stop)
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

func (p *faultProxy) hasTripped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tripped
}

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pc := &proxyConn{client: c, server: s}
		p.mu.Lock()
		if p.tripped {
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.conns[pc] = true
		p.mu.Unlock()
		go p.up(pc)
		go p.down(pc)
	}
}

// up forwards the client's bytes, watching for the trigger.
func (p *faultProxy) up(pc *proxyConn) {
	defer pc.server.Close()
	var seen []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := pc.client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			fire := !p.tripped
			p.mu.Unlock()
			tripped := false
			if fire {
				seen = append(seen, buf[:n]...)
				tripped = p.trigger(seen)
			}
			if tripped && p.silence {
				// Silenced before the bytes go on: the server may answer
				// before this goroutine runs again, and that answer
				// must not get through (the next request on the
				// connection would be the one left unanswered).
				p.trip(pc)
			} else if tripped {
				// A cut: no answer to this request may get through
				// before the cut either, or a server quicker than this
				// goroutine (a loaded machine) answers it and the
				// client never sees the fault.
				p.mu.Lock()
				pc.silenced = true
				p.mu.Unlock()
			}
			if _, werr := pc.server.Write(buf[:n]); werr != nil {
				return
			}
			if tripped && !p.silence {
				p.trip(pc)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down forwards the server's bytes, unless the connection was silenced.
func (p *faultProxy) down(pc *proxyConn) {
	defer pc.client.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := pc.server.Read(buf)
		p.mu.Lock()
		silenced := pc.silenced
		p.mu.Unlock()
		if n > 0 && !silenced {
			if _, werr := pc.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// trip stops the proxy: no more connections, every other one cut; pc is
// cut too or silenced.
func (p *faultProxy) trip(pc *proxyConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tripped = true
	p.ln.Close()
	for c := range p.conns {
		if c == pc && p.silence {
			c.silenced = true
			continue
		}
		c.client.Close()
		c.server.Close()
	}
}

func (p *faultProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln.Close()
	for c := range p.conns {
		c.client.Close()
		c.server.Close()
	}
}

// syncBuffer is a log sink safe for the writer's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func rotationRecord(from, n int) arrow.RecordBatch {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := from; i < from+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(strings.Repeat("x", 20) + fmt.Sprint(i))
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("id-%d", i))
		b.Field(3).(*array.StringBuilder).Append("insert")
		b.Field(4).(*array.Int64Builder).Append(int64(i + 1))
	}
	return b.NewRecordBatch()
}

// TestRotation gives the destination two addresses of the one server:
// the first dead from the start, or a proxy that stops in the middle of
// a send of a block to its staging table or of a block's copy into its
// table (cutting the request, or letting it land and swallowing the
// answer). The writer must retry the same sealed block on the second
// address, find the ones that landed, and leave every row in the table
// exactly once, as clickhouse-client reads it.
func TestRotation(t *testing.T) {
	real := addr(t)
	admin := open(t, real)
	const (
		epochs    = 4
		perWrite  = 3000
		writes    = 2 // per epoch; BlockRows 2500: each Write seals a block
		blockRows = 2500
	)
	stageSend := func(sent []byte) bool {
		// A send, not a prepare: the INSERT into a staging table, then
		// block data well past the prepare's empty block.
		i := bytes.Index(sent, []byte("INSERT INTO `"))
		if i < 0 || !bytes.Contains(sent[i:], []byte("_openetl_stage_")) {
			return false
		}
		return len(sent)-i > 32<<10
	}
	// The copy: only its SQL has the squashing settings.
	apply := func(sent []byte) bool { return bytes.Contains(sent, []byte("min_insert_block_size_rows")) }
	for _, tc := range []struct {
		name    string
		proxy   bool
		silence bool
		trigger func([]byte) bool
		want    string // in the log: the path the fault must have taken
	}{
		{name: "first address dead"},
		{name: "cut during a staging send", proxy: true, trigger: stageSend, want: "clickhouse: retrying"},
		{name: "staging send lands unanswered", proxy: true, silence: true, trigger: stageSend, want: "a failed try had landed"},
		{name: "cut during a copy", proxy: true, trigger: apply, want: "clickhouse: retrying"},
		{name: "copy lands unanswered", proxy: true, silence: true, trigger: apply, want: "a failed try had landed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := freshDB(t, admin)
			first := deadAddr(t)
			var p *faultProxy
			if tc.proxy {
				p = newFaultProxy(t, real, tc.silence, tc.trigger)
				first = p.addr()
			}
			conn, err := ch.Open(&ch.Options{
				Addr:             []string{first, real},
				ConnOpenStrategy: ch.ConnOpenInOrder,
				DialTimeout:      5 * time.Second,
				ReadTimeout:      5 * time.Second, // how long a swallowed answer is waited for
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			logs := &syncBuffer{}
			d := newDest(t, clickhouse.Config{Conn: conn, Database: db, BlockRows: blockRows,
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "rotation"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close(ctx)
			if _, err := w.Recover(ctx, 1, nil); err != nil {
				t.Fatal(err)
			}
			next := 0
			for e := uint64(1); e <= epochs; e++ {
				for range writes {
					rec := rotationRecord(next, perWrite)
					next += perWrite
					err := w.Write(ctx, "events", rec)
					rec.Release()
					if err != nil {
						t.Fatalf("epoch %d: Write: %v", e, err)
					}
				}
				c, err := w.PreCommit(ctx, e)
				if err != nil {
					t.Fatalf("epoch %d: PreCommit: %v", e, err)
				}
				if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
					t.Fatalf("epoch %d: Commit: %v", e, err)
				}
			}
			if p != nil && !p.hasTripped() {
				t.Fatal("the proxy never saw its trigger: the fault was not injected")
			}
			if tc.want != "" && !strings.Contains(logs.String(), tc.want) {
				t.Fatalf("the log never says %q: the fault did not take the path under test\n%s", tc.want, logs.String())
			}
			out := strings.TrimSpace(clientQuery(t, fmt.Sprintf("SELECT count(), uniqExact(id), min(id), max(id) FROM %s.events", db)))
			want := fmt.Sprintf("%d\t%d\t0\t%d", next, next, next-1)
			if out != want {
				t.Fatalf("count, distinct ids, min, max = %q, want %q: rows lost or repeated", out, want)
			}
		})
	}
}

// TestReadCut cuts the connection of Commit's first read (the count of
// a block's staged rows, sent before its copy) while the read is in
// flight, and stops the proxy it went through, as a network fault does:
// the read must be tried again on the second address, and every row
// land once.
func TestReadCut(t *testing.T) {
	real := addr(t)
	admin := open(t, real)
	ctx := context.Background()
	db := freshDB(t, admin)
	p := newFaultProxy(t, real, false, func(sent []byte) bool {
		i := bytes.LastIndex(sent, []byte("SELECT count() FROM"))
		return i >= 0 && bytes.Contains(sent[i:], []byte("_openetl_stage_events` WHERE `_openetl_batch` ="))
	})
	conn, err := ch.Open(&ch.Options{
		Addr:             []string{p.addr(), real},
		ConnOpenStrategy: ch.ConnOpenInOrder,
		DialTimeout:      5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	logs := &syncBuffer{}
	d := newDest(t, clickhouse.Config{Conn: conn, Database: db,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "readcut"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	const rows = 3000
	rec := rotationRecord(0, rows)
	err = w.Write(ctx, "events", rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if !p.hasTripped() {
		t.Fatal("the proxy never saw a staged-row count: the fault was not injected")
	}
	if !strings.Contains(logs.String(), `msg="clickhouse: retrying" pipeline=readcut lane=0 op=read`) {
		t.Fatalf("the cut read was not tried again\n%s", logs.String())
	}
	out := strings.TrimSpace(clientQuery(t, fmt.Sprintf("SELECT count(), uniqExact(id) FROM %s.events", db)))
	if want := fmt.Sprintf("%d\t%d", rows, rows); out != want {
		t.Fatalf("count, distinct ids = %q, want %q", out, want)
	}
}

// TestPipelineRotation runs the whole pipeline (faker customers merged,
// orders appended, two lanes) against two addresses, the first a proxy
// that stops in the middle of the run: while a block is sent to its
// staging table (cut), or once a copy has landed (its answer
// swallowed). Other requests in flight on the proxy fail with it; a
// Sync that fails is run again, as a host would. The tables must end
// equal to the source, read with clickhouse-client.
func TestPipelineRotation(t *testing.T) {
	real := addr(t)
	admin := open(t, real)
	const rows = 20_000
	for _, tc := range []struct {
		name    string
		silence bool
		trigger func([]byte) bool
	}{
		{"cut during a staging send", false, func(sent []byte) bool {
			i := bytes.Index(sent, []byte("INSERT INTO `"))
			return i >= 0 && bytes.Contains(sent[i:], []byte("_openetl_stage_")) && len(sent)-i > 32<<10
		}},
		{"copy lands unanswered", true, func(sent []byte) bool { return bytes.Contains(sent, []byte("min_insert_block_size_rows")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := freshDB(t, admin)
			p := newFaultProxy(t, real, tc.silence, tc.trigger)
			conn, err := ch.Open(&ch.Options{
				Addr:             []string{p.addr(), real},
				ConnOpenStrategy: ch.ConnOpenInOrder,
				DialTimeout:      5 * time.Second,
				ReadTimeout:      5 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			dst := newDest(t, clickhouse.Config{Conn: conn, Database: db, BlockRows: 5000})
			src, err := faker.New(faker.Config{Seed: fakerSeed, Rows: rows})
			if err != nil {
				t.Fatal(err)
			}
			store, err := checkpoint.OpenDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close(ctx)
			pl, err := etl.NewPipeline("chrot").From(src).To(dst).Checkpoints(store).
				Mode(delivery.Merge, faker.Customers).Lanes(2).
				EpochEvery(100*time.Millisecond, 0).Build()
			if err != nil {
				t.Fatal(err)
			}
			var syncErr error
			for try := range 5 {
				if _, syncErr = pl.Sync(ctx); syncErr == nil {
					break
				}
				t.Logf("sync %d failed (run again): %v", try+1, syncErr)
			}
			if syncErr != nil {
				t.Fatalf("5 syncs failed, the last: %v", syncErr)
			}
			if !p.hasTripped() {
				t.Fatal("the proxy never saw its trigger: the fault was not injected")
			}
			checkTables(t, db, rows)
		})
	}
}
