// Command mysqlcanal consumes a stretch of a MySQL/MariaDB binlog with
// go-mysql's canal and a no-op event handler, and prints how fast it went
// as one JSON object: changes (row changes seen: an update's before and
// after images count once), seconds (wall), cpu_seconds (this process,
// user and system, while it consumed) and changes_per_s.
//
// It is the canal leg of source/mysql's BenchmarkCatchUp, which builds
// and runs it against the same binlog as the source and the bare
// BinlogSyncer loop. It lives in a module of its own because canal pulls
// in the TiDB SQL parser, which the library's module does not need.
//
//	mysqlcanal -addr 127.0.0.1:3306 -user etl -password secret -table app.bench \
//	    -from bin.000003:4 -to bin.000003:123456 -want 2000000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/canal"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// handler counts row changes and does nothing else.
type handler struct {
	canal.DummyEventHandler
	changes int64
}

func (h *handler) OnRow(e *canal.RowsEvent) error {
	n := int64(len(e.Rows))
	if e.Action == canal.UpdateAction {
		n /= 2
	}
	h.changes += n
	return nil
}

func (h *handler) String() string { return "count" }

func parsePos(s string) (mysql.Position, error) {
	name, pos, ok := strings.Cut(s, ":")
	p, err := strconv.ParseUint(pos, 10, 32)
	if !ok || err != nil {
		return mysql.Position{}, fmt.Errorf("position %q: want FILE:OFFSET", s)
	}
	return mysql.Position{Name: name, Pos: uint32(p)}, nil
}

func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mysqlcanal:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:3306", "server host:port")
	user := flag.String("user", "root", "user")
	password := flag.String("password", "", "password")
	flavor := flag.String("flavor", "mariadb", "mysql or mariadb")
	table := flag.String("table", "", "the table to include, as database.table")
	from := flag.String("from", "", "binlog position to start at, FILE:OFFSET")
	to := flag.String("to", "", "binlog position to stop at, FILE:OFFSET")
	want := flag.Int64("want", 0, "row changes expected (0: don't check)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after")
	flag.Parse()
	start, err := parsePos(*from)
	if err != nil {
		return err
	}
	end, err := parsePos(*to)
	if err != nil {
		return err
	}
	if *table == "" {
		return errors.New("-table is required")
	}
	cfg := canal.NewDefaultConfig()
	cfg.Addr, cfg.User, cfg.Password, cfg.Flavor = *addr, *user, *password, *flavor
	cfg.ServerID = 4000000002
	cfg.Dump.ExecutionPath = "" // no mysqldump: the binlog only
	cfg.IncludeTableRegex = []string{"^" + regexp.QuoteMeta(*table) + "$"}
	cfg.DisableRetrySync = true
	cfg.TimestampStringLocation = time.UTC
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err := canal.NewCanal(cfg)
	if err != nil {
		return fmt.Errorf("new canal: %w", err)
	}
	h := &handler{}
	c.SetEventHandler(h)

	c0, t0 := cpu(), time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- c.RunFrom(start) }()
	// Wait until canal's synced position reaches the end (it has then
	// handed every event before it to the handler).
	deadline := time.After(*timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-runErr:
			return fmt.Errorf("canal stopped before the end: %v", err)
		case <-deadline:
			c.Close()
			return fmt.Errorf("timeout: at %v, want %v", c.SyncedPosition(), end)
		case <-tick.C:
			if p := c.SyncedPosition(); p.Compare(end) >= 0 {
				break wait
			}
		}
	}
	wall, used := time.Since(t0), cpu()-c0
	c.Close()
	if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("canal: %w", err)
	}
	if *want > 0 && h.changes != *want {
		return fmt.Errorf("saw %d row changes, want %d", h.changes, *want)
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"changes": h.changes, "seconds": wall.Seconds(), "cpu_seconds": used.Seconds(),
		"changes_per_s": float64(h.changes) / wall.Seconds(),
	})
}
