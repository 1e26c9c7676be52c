package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/openetl/etl/source/mysql"
)

// mysqlCDC runs one Sync of the MySQL/MariaDB pipeline whose state is
// under -out: the first (the table empty) reads the snapshot and notes
// the binlog position; a later one drains the binlog written since, up
// to the server's position at its start.
func mysqlCDC(args []string) (*result, error) {
	fs := flag.NewFlagSet("mysql-cdc", flag.ExitOnError)
	dsn := fs.String("dsn", os.Getenv("OPENETL_TEST_MARIADB_DSN"), "user:password@host:port/database")
	table := fs.String("table", "bench_cdc", "table to read")
	out := fs.String("out", "", "output directory, the same for the first Sync and the catch-up")
	lanes := fs.Int("lanes", 0, "writer lanes (0: the default)")
	_ = fs.Parse(args)
	if *dsn == "" || *out == "" {
		return nil, fmt.Errorf("-dsn and -out are required")
	}
	ctx := context.Background()
	src, err := mysql.New(mysql.Config{DSN: *dsn, Tables: []string{*table}})
	if err != nil {
		return nil, err
	}
	defer src.Close(ctx)
	return syncToParquet(ctx, "bench-mysql-cdc", src, *out, *lanes)
}

func parsePos(s string) (gomysql.Position, error) {
	name, pos, ok := strings.Cut(s, ":")
	p, err := strconv.ParseUint(pos, 10, 32)
	if !ok || err != nil {
		return gomysql.Position{}, fmt.Errorf("position %q: want FILE:OFFSET", s)
	}
	return gomysql.Position{Name: name, Pos: uint32(p)}, nil
}

// mysqlCeiling is the binlog catch-up's ceiling: a bare BinlogSyncer
// loop that decodes every event from -from to -to (rows included) and
// counts the row changes (an update's before and after images once).
func mysqlCeiling(args []string) (*result, error) {
	fs := flag.NewFlagSet("mysql-ceiling", flag.ExitOnError)
	dsn := fs.String("dsn", os.Getenv("OPENETL_TEST_MARIADB_DSN"), "user:password@host:port/database")
	from := fs.String("from", "", "start position FILE:OFFSET")
	to := fs.String("to", "", "end position FILE:OFFSET")
	flavor := fs.String("flavor", "mariadb", "mysql or mariadb")
	_ = fs.Parse(args)
	start, err := parsePos(*from)
	if err != nil {
		return nil, err
	}
	end, err := parsePos(*to)
	if err != nil {
		return nil, err
	}
	user, rest, _ := strings.Cut(*dsn, "@")
	u, p, _ := strings.Cut(user, ":")
	addr, _, _ := strings.Cut(rest, "/")
	host, port, _ := strings.Cut(addr, ":")
	pn, _ := strconv.Atoi(port)
	t := startTimer()
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: 4000000002, Flavor: *flavor,
		Host: host, Port: uint16(pn), User: u, Password: p, TimestampStringLocation: time.UTC,
		DisableRetrySync: true, DiscardGTIDSet: true, Logger: slog.New(slog.DiscardHandler)})
	defer syncer.Close()
	st, err := syncer.StartSync(start)
	if err != nil {
		return nil, err
	}
	var rows int64
	file := start.Name
	for {
		ev, err := st.GetEvent(context.Background())
		if err != nil {
			return nil, err
		}
		switch e := ev.Event.(type) {
		case *replication.RowsEvent:
			n := int64(len(e.Rows))
			if e.Type() == replication.EnumRowsEventTypeUpdate {
				n /= 2
			}
			rows += n
		case *replication.RotateEvent:
			file = string(e.NextLogName)
		}
		if file == end.Name && ev.Header.LogPos >= end.Pos {
			return t.stop(rows), nil
		}
	}
}
