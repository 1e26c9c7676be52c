// Command dbt loads the quickstart's fake customers and orders into
// PostgreSQL with sink/postgres (merged by id: one row per record, its
// latest version) and, after each sync commits, runs `dbt build` on the
// dbt project in this directory, which builds the models
// analytics.customers_current and analytics.customer_orders over the
// loaded tables and tests them.
//
//	go run ./examples/dbt -dsn postgres://postgres@localhost:5432/postgres
//
// dbt must be on PATH (pip install dbt-postgres), or named by -dbt. When
// dbt fails, the program fails with an *etl.StepError, but the rows it
// copied stay committed: run it again and it copies nothing new and runs
// dbt again. -rows N with a larger N copies only the records added.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink/postgres"
	"github.com/openetl/etl/source/faker"
)

// options are the program's flags.
type options struct {
	DSN       string // the database; "" means libpq's PG* variables and defaults
	Raw       string // schema of the loaded tables
	Analytics string // schema of dbt's models
	Project   string // the dbt project directory (with profiles.yml)
	DBT       string // the dbt executable
	Dir       string // the checkpoint directory
	Rows      int64  // records per stream the fake source holds
	Out       io.Writer
}

func main() {
	var o options
	flag.StringVar(&o.DSN, "dsn", "", "PostgreSQL URL or key=value DSN (default: the PG* environment variables)")
	flag.StringVar(&o.Raw, "raw", "raw", "schema for the loaded tables")
	flag.StringVar(&o.Analytics, "analytics", "analytics", "schema for dbt's models")
	flag.StringVar(&o.Project, "project", "examples/dbt", "the dbt project directory")
	flag.StringVar(&o.DBT, "dbt", "dbt", "the dbt executable")
	flag.StringVar(&o.Dir, "dir", "dbt-data", "directory for the checkpoints")
	flag.Int64Var(&o.Rows, "rows", 10_000, "records per stream the fake source holds; raise it to add more")
	flag.Parse()
	o.Out = os.Stdout

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := syncAndBuild(ctx, o); err != nil {
		var step *etl.StepError
		if errors.As(err, &step) {
			// dbt printed its errors above; the copied rows are committed.
			fmt.Fprintf(os.Stderr, "dbt: step %q failed: %v\nthe loaded tables are committed; fix the project and run again (nothing new is copied)\n",
				step.Step, step.Err)
		} else {
			fmt.Fprintln(os.Stderr, "dbt:", err)
		}
		os.Exit(1)
	}
}

// syncAndBuild syncs the fake source into o.Raw and runs dbt after the
// commit; its error is the Sync's (an *etl.StepError when dbt failed).
func syncAndBuild(ctx context.Context, o options) (etl.Result, error) {
	pool, err := pgxpool.New(ctx, o.DSN)
	if err != nil {
		return etl.Result{}, err
	}
	defer pool.Close()
	dst, err := postgres.New(ctx, postgres.Config{Pool: pool, Schema: o.Raw})
	if err != nil {
		return etl.Result{}, err
	}
	defer dst.Close()
	src, err := faker.New(faker.Config{Seed: 42, Rows: o.Rows, MalformedShare: 0.001})
	if err != nil {
		return etl.Result{}, err
	}
	store, err := checkpoint.OpenDir(o.Dir)
	if err != nil {
		return etl.Result{}, err
	}
	defer store.Close(ctx)
	project, err := filepath.Abs(o.Project)
	if err != nil {
		return etl.Result{}, err
	}
	env := dbtEnv(pool.Config().ConnConfig, o)
	var start time.Time

	p, err := etl.NewPipeline("dbt-example").
		From(src).
		To(dst).
		Checkpoints(store).
		Mode(delivery.Merge, faker.Customers, faker.Orders).
		// Items and tags as JSON text, timestamps as timestamptz.
		JSON(etl.JSONOptions{NestedAsText: true, Timestamps: true}, faker.Customers, faker.Orders).
		AfterSync("dbt build", etl.Command(func(ctx context.Context, res etl.Result) *exec.Cmd {
			fmt.Fprintf(o.Out, "committed up to epoch %d in %.1fs; running dbt build\n", res.Epoch, time.Since(start).Seconds())
			cmd := exec.CommandContext(ctx, o.DBT, "build", "--no-use-colors",
				"--project-dir", project, "--profiles-dir", project)
			cmd.Env = append(os.Environ(), env...)
			cmd.Stdout, cmd.Stderr = o.Out, o.Out
			return cmd
		})).
		Build()
	if err != nil {
		return etl.Result{}, err
	}
	defer p.Close(ctx)

	fmt.Fprintf(o.Out, "syncing fake customers and orders into schema %s\n", o.Raw)
	start = time.Now()
	res, err := p.Sync(ctx)
	for _, s := range []string{faker.Customers, faker.Orders} {
		c := res.Streams[s]
		fmt.Fprintf(o.Out, "  %-10s copied %7d, quarantined %d\n", s, c.Written, c.Quarantined)
	}
	fmt.Fprintf(o.Out, "sync and dbt took %.1fs\n", time.Since(start).Seconds())
	if err != nil {
		return res, err
	}
	var n int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{o.Analytics, "customer_orders"}.Sanitize()).Scan(&n); err != nil {
		return res, err
	}
	fmt.Fprintf(o.Out, "%s.customer_orders: %d rows\n", o.Analytics, n)
	return res, nil
}

// dbtEnv passes the connection to dbt's profile (profiles.yml) as libpq's
// variables, and the schemas.
func dbtEnv(c *pgx.ConnConfig, o options) []string {
	env := []string{"PGHOST=" + c.Host, "PGPORT=" + strconv.Itoa(int(c.Port)), "PGUSER=" + c.User,
		"PGPASSWORD=" + c.Password, "PGDATABASE=" + c.Database,
		"DBT_RAW_SCHEMA=" + o.Raw, "DBT_SCHEMA=" + o.Analytics}
	if c.TLSConfig == nil {
		env = append(env, "PGSSLMODE=disable")
	}
	return env
}
