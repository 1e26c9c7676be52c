// Command quickstart is OpenETL's main job on embedded defaults: it
// generates two streams of fake customers and orders (with updates,
// deletes and a few malformed records) and writes them, exactly once, into
// a local Apache Iceberg warehouse: a SQL catalog on the SQLite file
// ./quickstart-data/catalog.db (catalog "quickstart", namespace
// "quickstart") with the tables' data and metadata files under
// ./quickstart-data/tables/<stream>. Its checkpoints are under
// ./quickstart-data/checkpoints. No servers, no Rust toolchain, no C
// library: the SQLite driver is pure Go.
//
// Both tables are append tables: every version of a record (insert,
// update, delete, in _openetl_op) is a row, _openetl_seq orders them.
//
//	go run ./examples/quickstart            # runs, or continues after a kill
//	go run ./examples/quickstart -rows 2000000   # later: adds more rows
//	go run ./examples/quickstart -http :8080     # with its status page
//
// With -http it serves etl.StatusPage on that address (the page at /,
// the figures at /status.json) while it syncs, and after, until
// interrupted.
//
// Running it again continues from the last checkpoint and adds no
// duplicates: a killed run loses nothing that was committed and repeats
// nothing.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// The warehouse's names: pyiceberg, DuckDB or Spark open the catalog by
// them.
const (
	catalogName = "quickstart"
	namespace   = "quickstart"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "quickstart-data", "directory for the catalog, tables and checkpoints")
	rows := flag.Int64("rows", 500_000, "records per stream the fake source holds; raise it to add more")
	malformed := flag.Float64("malformed", 0.001, "share of malformed records (quarantined)")
	epoch := flag.Duration("epoch", 2*time.Second, "interval between checkpoints")
	lanes := flag.Int("lanes", 1, "writer lanes")
	verbose := flag.Bool("v", false, "log lifecycle events to stderr")
	httpAddr := flag.String("http", "", "serve the status page on this address (say :8080) until interrupted")
	flag.Parse()

	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	tablesDir, ckptDir := filepath.Join(abs, "tables"), filepath.Join(abs, "checkpoints")
	for _, d := range []string{tablesDir, ckptDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}

	src, err := faker.New(faker.Config{Seed: 42, Rows: *rows, MalformedShare: *malformed})
	if err != nil {
		return err
	}
	dbPath := filepath.Join(abs, "catalog.db")
	cat, closeCat, err := openWarehouse(context.Background(), dbPath, tablesDir)
	if err != nil {
		return err
	}
	defer closeCat()
	dst, err := iceberg.New(iceberg.Config{Catalog: cat, Namespace: []string{namespace}})
	if err != nil {
		return err
	}
	store, err := checkpoint.OpenDir(ckptDir)
	if err != nil {
		return err
	}
	defer store.Close(context.Background())

	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	start := time.Now()
	p, err := etl.NewPipeline("quickstart").
		From(src).
		To(dst).
		Checkpoints(store).
		Lanes(*lanes).
		EpochEvery(*epoch, 0).
		Logger(logger).
		OnProgress(func(pr etl.Progress) {
			secs := pr.Elapsed.Seconds()
			if secs <= 0 {
				return
			}
			// Done: what earlier runs committed plus what this run read;
			// the fake source holds -rows records per stream.
			done, quarantined := pr.Read, int64(0)
			for s, t := range pr.Totals {
				done += t.Read - pr.Committed[s].Read
				quarantined += t.Quarantined
			}
			total := 2 * *rows
			fmt.Printf("\r  epoch %-4d  %10d of %d records (%5.1f%%)  %9.0f rows/s  quarantined %d ",
				pr.Epoch, done, total, 100*float64(done)/float64(total), float64(pr.Read)/secs, quarantined)
		}).
		Build()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return fmt.Errorf("status page: %w", err)
		}
		srv := &http.Server{Handler: etl.StatusPage(p), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		// Close, not Shutdown: an open page holds its event stream.
		defer srv.Close()
		fmt.Printf("status page: http://%s/ (figures at /status.json)\n", ln.Addr())
	}
	fmt.Printf("OpenETL quickstart: fake customers and orders → Iceberg tables in %s (catalog %s)\n", tablesDir, dbPath)
	res, err := p.Sync(ctx)
	fmt.Println()
	if errors.Is(err, context.Canceled) {
		fmt.Println("interrupted: run it again to continue from the last checkpoint")
		return nil
	}
	if err != nil {
		return err
	}
	elapsed := time.Since(start)

	var read int64
	for _, c := range res.Streams {
		read += c.Read
	}
	if res.Epochs == 0 {
		fmt.Printf("nothing new: the source holds no records past checkpoint epoch %d (raise -rows to add more)\n", res.Epoch)
	} else {
		fmt.Printf("committed %d epoch(s) (up to epoch %d, generation %d): %d records in %.1fs, %.0f records/s\n",
			res.Epochs, res.Epoch, res.Generation, read, elapsed.Seconds(), float64(read)/elapsed.Seconds())
	}
	fmt.Println("\nrows in the tables (all runs):")
	names := make([]string, 0, len(res.Totals))
	for s := range res.Totals {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		c := res.Totals[s]
		fmt.Printf("  %-10s written %9d  quarantined %6d  (read %d)\n", s, c.Written, c.Quarantined, c.Read)
	}
	fmt.Printf("\ncatalog:     %s (Iceberg SQL catalog %q, namespace %q)\n", dbPath, catalogName, namespace)
	fmt.Printf("tables:      %s/<stream>/{metadata,data}/\n", tablesDir)
	fmt.Printf("quarantine:  %s/quickstart/_quarantine/<stream>/<epoch>.jsonl\n", ckptDir)
	fmt.Printf("checkpoints: %s/quickstart/_checkpoints/\n", ckptDir)
	fmt.Printf("\nquery them (pip install \"pyiceberg[sql-sqlite,pyarrow]\"):\n"+
		"  python3 -c \"from pyiceberg.catalog.sql import SqlCatalog; "+
		"t = SqlCatalog('%s', uri='sqlite:///%s', warehouse='file://%s').load_table('%s.orders'); "+
		"print(t.scan().to_arrow().group_by('_openetl_op').aggregate([('_openetl_id', 'count')]))\"\n",
		catalogName, dbPath, tablesDir, namespace)
	if *httpAddr != "" {
		fmt.Println("\nthe status page is still served: Ctrl-C to exit")
		<-ctx.Done()
	}
	return nil
}

// openWarehouse opens the SQL catalog on the SQLite file dbPath (created
// when missing) and makes sure the namespace exists with its location set
// to tablesDir, so each table lives in tablesDir/<stream>. WAL and a busy
// timeout let two copies of the quickstart share the catalog (the younger
// fences the older). The returned func closes the catalog and database.
func openWarehouse(ctx context.Context, dbPath, tablesDir string) (catalog.Catalog, func(), error) {
	db, err := sql.Open(sqliteshim.ShimName, "file:"+dbPath+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, nil, err
	}
	cat, err := sqlcat.NewCatalog(catalogName, db, sqlcat.SQLite, ice.Properties{"warehouse": "file://" + tablesDir})
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("open the catalog %s: %w", dbPath, err)
	}
	closeAll := func() { _ = cat.Close(); _ = db.Close() }
	ns := []string{namespace}
	ok, err := cat.CheckNamespaceExists(ctx, ns)
	if err == nil && !ok {
		err = cat.CreateNamespace(ctx, ns, ice.Properties{"location": "file://" + tablesDir})
		if errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
			err = nil // another copy created it meanwhile
		}
	}
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("namespace %s in %s: %w", namespace, dbPath, err)
	}
	return cat, closeAll, nil
}
