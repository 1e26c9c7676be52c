package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// The tests run the example against the test server's Postgres
// (scripts/servers.sh) and the dbt of scripts/test-tools.sh, each in
// schemas of its own, on a copy of the dbt project (dbt writes target/
// and logs/ into it), and check the model's rows against what the fake
// source generates.

var unique atomic.Int64

func dsn(t *testing.T) string {
	t.Helper()
	d := os.Getenv("OPENETL_TEST_POSTGRES_DSN")
	if d == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_POSTGRES_DSN is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_POSTGRES_DSN is not set: start Postgres with scripts/servers.sh start postgres, or set OPENETL_SKIP_SERVERS=1")
	}
	return d
}

// setUp returns the example's options for a fresh pair of schemas, a
// copy of the project and a checkpoint directory, and a pool to check
// with; the schemas are dropped afterwards.
func setUp(t *testing.T, rows int64) (options, *pgxpool.Pool) {
	t.Helper()
	d := dsn(t)
	dbt := testutil.DBT(t)
	pool, err := pgxpool.New(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	n := fmt.Sprintf("%d_%d", time.Now().UnixNano()%1e9, unique.Add(1))
	o := options{DSN: d, Raw: "dbt_raw_" + n, Analytics: "dbt_analytics_" + n, Project: filepath.Join(t.TempDir(), "project"),
		DBT: dbt, Dir: t.TempDir(), Rows: rows, Out: &bytes.Buffer{}}
	t.Cleanup(func() {
		for _, s := range []string{o.Raw, "_openetl_staging_" + o.Raw, o.Analytics} {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
		}
	})
	copyProject(t, o.Project)
	return o, pool
}

// copyProject copies the dbt project's files (not the Go ones, nor what
// dbt wrote) to dir.
func copyProject(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"dbt_project.yml", "profiles.yml", "models"} {
		err := filepath.WalkDir(name, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(path)), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, path), b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// run runs the example and logs its output.
func run(t *testing.T, o options) (etl.Result, error) {
	t.Helper()
	out := o.Out.(*bytes.Buffer)
	out.Reset()
	start := time.Now()
	res, err := syncAndBuild(context.Background(), o)
	t.Logf("rows %d: sync + dbt %.1fs, %d epochs, err %v", o.Rows, time.Since(start).Seconds(), res.Epochs, err)
	if err != nil || testing.Verbose() {
		t.Logf("output:\n%s", out)
	}
	return res, err
}

// The fake source's records as the merged tables hold them.
type customer struct {
	name, country string
	deleted       bool
}

type order struct {
	customer         int64
	status, currency string
	cents            int64
	placed           time.Time
}

type want struct {
	customers map[int64]customer
	orders    map[int64]order
	written   map[string]int64 // records that are JSON objects, per stream
}

// expect replays the first rows records of each stream the way a merge
// by id applies them: the latest version of each key; a delete keeps the
// key, marked; a malformed record is quarantined and changes nothing.
func expect(t *testing.T, rows int64) want {
	t.Helper()
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows, MalformedShare: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	w := want{customers: map[int64]customer{}, orders: map[int64]order{}, written: map[string]int64{}}
	for _, stream := range []string{faker.Customers, faker.Orders} {
		for i := range rows {
			op, _, key, payload := src.Generate(stream, i, nil)
			dec := json.NewDecoder(bytes.NewReader(payload))
			dec.UseNumber() // numbers as json.Number: amounts exactly
			var doc map[string]any
			if dec.Decode(&doc) != nil || dec.More() {
				continue // not a JSON object: quarantined
			}
			w.written[stream]++
			id, err := strconv.ParseInt(string(key), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case stream == faker.Customers && op == source.OpDelete:
				c := w.customers[id]
				c.deleted = true
				w.customers[id] = c
			case stream == faker.Customers:
				w.customers[id] = customer{name: doc["name"].(string), country: doc["country"].(string)}
			default:
				placed, err := time.Parse(time.RFC3339, doc["placed_at"].(string))
				if err != nil {
					t.Fatal(err)
				}
				cust, err := doc["customer_id"].(json.Number).Int64()
				if err != nil {
					t.Fatal(err)
				}
				w.orders[id] = order{customer: cust, status: doc["status"].(string), currency: doc["currency"].(string),
					cents: cents(t, doc["amount"].(json.Number)), placed: placed}
			}
		}
	}
	return w
}

// cents turns "12.34" into 1234, exactly.
func cents(t *testing.T, n json.Number) int64 {
	t.Helper()
	whole, frac, _ := strings.Cut(string(n), ".")
	frac = (frac + "00")[:2]
	v, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// modelRow is a row of customer_orders, as text for comparing.
type modelRow struct {
	id               int64
	name, country    string
	orders, pending  int64
	lastOrder, spent string
}

// model computes customer_orders from w, as the model's SQL says.
func (w want) model() map[int64]modelRow {
	out := map[int64]modelRow{}
	for id, c := range w.customers {
		if !c.deleted {
			out[id] = modelRow{id: id, name: c.name, country: c.country, lastOrder: "null", spent: "0.00"}
		}
	}
	spent := map[int64]int64{}
	last := map[int64]time.Time{}
	for _, o := range w.orders {
		r, ok := out[o.customer]
		if !ok || o.status == "cancelled" || o.status == "refunded" {
			continue
		}
		r.orders++
		if o.status == "pending" {
			r.pending++
		}
		if o.currency == "EUR" {
			spent[o.customer] += o.cents
		}
		if o.placed.After(last[o.customer]) {
			last[o.customer] = o.placed
		}
		out[o.customer] = r
	}
	for id, r := range out {
		if t, ok := last[id]; ok {
			r.lastOrder = t.UTC().Format(time.RFC3339)
		}
		r.spent = fmt.Sprintf("%d.%02d", spent[id]/100, spent[id]%100)
		out[id] = r
	}
	return out
}

// readModel reads customer_orders.
func readModel(t *testing.T, pool *pgxpool.Pool, schema string) map[int64]modelRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT customer_id, name, country, orders, pending_orders,
		coalesce(to_char(last_order_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), 'null'), spent_eur::text
		FROM `+pgx.Identifier{schema, "customer_orders"}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]modelRow{}
	for rows.Next() {
		var r modelRow
		if err := rows.Scan(&r.id, &r.name, &r.country, &r.orders, &r.pending, &r.lastOrder, &r.spent); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[r.id]; dup {
			t.Fatalf("customer_orders has customer %d twice", r.id)
		}
		out[r.id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkModel compares customer_orders with what the source generated.
func checkModel(t *testing.T, pool *pgxpool.Pool, o options, w want) {
	t.Helper()
	got, exp := readModel(t, pool, o.Analytics), w.model()
	var withOrders int
	for _, r := range exp {
		if r.orders > 0 {
			withOrders++
		}
	}
	// A check that can fail: the data must hold customers with and
	// without orders, and deleted ones.
	if len(exp) == 0 || withOrders == 0 || withOrders == len(exp) || len(exp) == len(w.customers) {
		t.Fatalf("the fake data is too small to check the model: %d customers, %d current, %d with orders",
			len(w.customers), len(exp), withOrders)
	}
	if len(got) != len(exp) {
		t.Errorf("customer_orders has %d rows, want %d (current customers)", len(got), len(exp))
	}
	var bad []string
	for id, e := range exp {
		if g := got[id]; g != e {
			bad = append(bad, fmt.Sprintf("customer %d: got %+v, want %+v", id, g, e))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("%d of %d rows differ, e.g.:\n%s", len(bad), len(exp), strings.Join(bad[:min(5, len(bad))], "\n"))
	}
	t.Logf("customer_orders: %d rows (%d customers with orders), as the source's %d customers and %d orders say",
		len(got), withOrders, len(w.customers), len(w.orders))
}

// checkLoaded compares the loaded tables' row counts with the source's
// keys.
func checkLoaded(t *testing.T, pool *pgxpool.Pool, o options, w want) {
	t.Helper()
	var deleted int
	for _, c := range w.customers {
		if c.deleted {
			deleted++
		}
	}
	for _, c := range []struct {
		table, where string
		want         int
	}{
		{"customers", "true", len(w.customers)},
		{"customers", "_openetl_deleted", deleted},
		{"orders", "true", len(w.orders)},
	} {
		var n int
		q := "SELECT count(*) FROM " + pgx.Identifier{o.Raw, c.table}.Sanitize() + " WHERE " + c.where
		if err := pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("%s.%s where %s: %d rows, want %d", o.Raw, c.table, c.where, n, c.want)
		}
	}
}

// checkCopied compares a Sync's counts with the records the source
// added since the last one.
func checkCopied(t *testing.T, res etl.Result, w, before want) {
	t.Helper()
	for _, s := range []string{faker.Customers, faker.Orders} {
		if got, want := res.Streams[s].Written, w.written[s]-before.written[s]; got != want {
			t.Errorf("%s: the sync wrote %d rows, want %d", s, got, want)
		}
	}
}

// The example's sync and dbt build give the model the source's rows;
// with more source rows, a rerun copies only those and the model follows.
// (A rerun with nothing new is TestFailingModelFailsTheSync's.)
func TestSyncThenDBTBuild(t *testing.T) {
	t.Parallel()
	o, pool := setUp(t, 3000)
	w := expect(t, o.Rows)
	res, err := run(t, o)
	if err != nil {
		t.Fatal(err)
	}
	checkCopied(t, res, w, want{})
	checkLoaded(t, pool, o, w)
	checkModel(t, pool, o, w)

	o.Rows = 5000
	w2 := expect(t, o.Rows)
	res3, err := run(t, o)
	if err != nil {
		t.Fatal(err)
	}
	checkCopied(t, res3, w2, w)
	checkLoaded(t, pool, o, w2)
	checkModel(t, pool, o, w2)
}

// A model that fails fails the Sync with an *etl.StepError carrying
// dbt's output; the loaded tables hold every row, a rerun copies nothing
// and fails again, and once the model is fixed a rerun builds it.
func TestFailingModelFailsTheSync(t *testing.T) {
	t.Parallel()
	o, pool := setUp(t, 2000)
	w := expect(t, o.Rows)
	broken := filepath.Join(o.Project, "models", "broken.sql")
	if err := os.WriteFile(broken, []byte("select 1 / (count(*) - count(*)) as boom from {{ ref('customer_orders') }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := run(t, o)
	var step *etl.StepError
	if !errors.As(err, &step) {
		t.Fatalf("Sync = %v (%T), want an *etl.StepError", err, err)
	}
	if step.Step != "dbt build" || !strings.Contains(step.Output, "division by zero") || !strings.Contains(err.Error(), "broken") {
		t.Errorf("StepError: step %q, output:\n%s\nmessage: %v", step.Step, step.Output, err)
	}
	if !etl.IsRetryable(err) || etl.IsPermanent(err) {
		t.Errorf("IsRetryable %v, IsPermanent %v; want retryable", etl.IsRetryable(err), etl.IsPermanent(err))
	}
	checkCopied(t, res, w, want{})
	checkLoaded(t, pool, o, w)

	res2, err := run(t, o)
	if !errors.As(err, &step) || res2.Epochs != 0 || len(res2.Streams) != 0 {
		t.Fatalf("rerun = %+v, %v; want nothing copied and the step failing again", res2, err)
	}
	checkLoaded(t, pool, o, w)

	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	res3, err := run(t, o)
	if err != nil || res3.Epochs != 0 {
		t.Fatalf("after the fix: %+v, %v; want success with nothing copied", res3, err)
	}
	checkModel(t, pool, o, w)
}
