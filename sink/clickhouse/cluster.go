package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/openetl/etl/sink"
)

// Cluster is a sharded, replicated ClickHouse cluster (Config.Cluster):
// each shard a set of replicas of the same ReplicatedMergeTree tables,
// coordinated by ZooKeeper or Keeper. Each server needs the macros
// {shard} (the same on a shard's replicas, different between shards)
// and {replica} (different on every server): the destination's tables
// keep their replicas' state in ZooKeeper under
// /clickhouse/tables/{shard}/openetl/DATABASE/TABLE (ZooKeeperPath).
//
// Rows are routed to shards by a hash of their key, or by a column of
// the user's choice (ShardBy; package doc, Clusters); each shard is
// staged, fenced, committed and verified on its own, exactly as one
// server is, through one replica at a time.
type Cluster struct {
	// Shards holds each shard's replicas' native addresses
	// ("host:port"), in the order they are tried: a shard's queries go
	// to its first replica that answers, and move on to the next when it
	// stops answering. Shards' order is the routing's: changing it, or
	// their number, moves keys to other shards (a merge table's older
	// versions of a key then stay on the shard that had it). Required.
	Shards [][]string

	// Options are the connection options of every replica: auth, TLS,
	// timeouts, settings. Addr and ConnOpenStrategy are the
	// destination's to set. Default: clickhouse-go's defaults with a 10s
	// DialTimeout.
	Options *clickhouse.Options

	// Name is the cluster's name in the servers' remote_servers. When
	// set, every table gets a Distributed table over it on every
	// replica, named after the table with the suffix "_all", for reads
	// of the whole cluster (the writer never inserts through it; without
	// ShardBy it has no sharding key, so on several shards nobody else
	// can either).
	// Default: none.
	Name string

	// ShardBy names, by table, a column whose value picks each row's
	// shard instead of the destination's hash: shard = value mod
	// len(Shards), a signed value taken as the unsigned integer of its
	// width (Int32 -1 as 4294967295). That is how ClickHouse's
	// Distributed table picks a shard by an integer sharding key over
	// shards of weight 1 in Shards' order, and the Distributed table
	// Name asks for is created with the column as its sharding key, so
	// rows inserted through it by others land where the writer puts
	// them. The column must be an integer column of every batch
	// (Int8..Int64, UInt8..UInt64): for an appended stream a
	// non-nullable one (Write fails otherwise), for a merged stream one
	// of its key columns (Build fails otherwise; the table holds them
	// non-Nullable), so that every version of a key lands on one shard.
	// Changing a table's ShardBy, like the shards, moves rows of later
	// epochs to other shards: re-sync into a new table; so does widening
	// an appended stream's column with negative values (Int32 -1 and
	// Int64 -1 differ as unsigned integers), for the Distributed table
	// as for the writer. For another sharding expression (a hash, a
	// range), compute it into such a column before the destination, e.g.
	// in a transform. Default: none (the hash).
	ShardBy map[string]string

	// ZooKeeperPath is the prefix of every table's path in ZooKeeper (or
	// Keeper), DATABASE/TABLE appended, in the servers' macros: it must
	// be the same on a shard's replicas and differ between shards, as
	// the default's {shard} does. Another one suits servers whose macros
	// are named otherwise ("/clickhouse/{layer}-{shard}/tables/"), or
	// servers that each are a shard of their own (a macro unique to
	// each, such as {replica}). Must end in "/". Default
	// DefaultZooKeeperPath.
	ZooKeeperPath string
}

// newCluster opens, for each shard, one pool over its replicas in order
// (the shard's connection) and one per replica (statements each replica
// runs), and makes each shard's destination.
func newCluster(ctx context.Context, cfg Config) (d *Destination, err error) {
	cl := cfg.Cluster
	if len(cl.Shards) == 0 {
		return nil, errors.New("clickhouse: Config.Cluster.Shards is empty")
	}
	for i, s := range cl.Shards {
		if len(s) == 0 {
			return nil, fmt.Errorf("clickhouse: Config.Cluster.Shards[%d] has no replicas", i)
		}
		for _, a := range s {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("clickhouse: Config.Cluster.Shards[%d]: replica address %q: %w", i, a, err)
			}
		}
	}
	for t, c := range cl.ShardBy {
		if err := checkTable(t); err != nil {
			return nil, fmt.Errorf("clickhouse: Config.Cluster.ShardBy: %w", err)
		}
		if c == "" {
			return nil, fmt.Errorf("clickhouse: Config.Cluster.ShardBy[%q] names no column", t)
		}
	}
	if p := cl.ZooKeeperPath; p != "" && (!strings.HasPrefix(p, "/") || !strings.HasSuffix(p, "/") || strings.ContainsRune(p, 0)) {
		return nil, fmt.Errorf("clickhouse: Config.Cluster.ZooKeeperPath %q must start and end with \"/\"", p)
	}
	if strings.ContainsAny(cl.Name, "'\\`\x00") {
		return nil, fmt.Errorf("clickhouse: Config.Cluster.Name %q is not a cluster name", cl.Name)
	}
	d = &Destination{
		db:        cfg.Database,
		tables:    cfg.Tables,
		blockRows: cfg.BlockRows,
		applyWait: cfg.ApplyWait,
		retries:   cfg.Retries,
		log:       cfg.Logger,
		cluster:   cl.Name,
		shardBy:   cl.ShardBy,
	}
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	open := func(addrs []string) (driver.Conn, error) {
		o := clickhouse.Options{DialTimeout: defaultDialTimeout}
		if cl.Options != nil {
			o = *cl.Options
		}
		o.Addr = addrs
		o.ConnOpenStrategy = clickhouse.ConnOpenInOrder
		c, err := clickhouse.Open(&o)
		if err != nil {
			return nil, fmt.Errorf("clickhouse: open %v: %w", addrs, err)
		}
		d.closers = append(d.closers, c)
		return c, nil
	}
	for i, addrs := range cl.Shards {
		pool, err := open(addrs)
		if err != nil {
			return nil, err
		}
		replicas := make([]driver.Conn, len(addrs))
		for j, a := range addrs {
			if replicas[j], err = open([]string{a}); err != nil {
				return nil, err
			}
		}
		s, err := newOne(ctx, cfg, pool, replicas, i)
		if err != nil {
			return nil, fmt.Errorf("clickhouse: shard %d: %w", i, err)
		}
		d.shards = append(d.shards, s)
	}
	// One version everywhere: a table's columns must have one type on
	// every shard, for the Distributed table and for readers.
	d.features = d.shards[0].features
	for i, s := range d.shards[1:] {
		if s.features.Version != d.features.Version {
			return nil, fmt.Errorf("clickhouse: shard %d runs ClickHouse %s and shard 0 %s: a cluster's shards must run one version", i+1, s.features.Version, d.features.Version)
		}
	}
	d.log.Info("clickhouse: connected to a cluster", "shards", len(d.shards), "database", d.db, "distributed", d.cluster)
	return d, nil
}

const defaultDialTimeout = 10 * time.Second

// Close closes the connection pools New opened for Config.Cluster; a
// destination of Config.Conn has none (the caller owns Conn). Call it
// after the last Writer is closed.
func (d *Destination) Close() error {
	var errs []error
	for _, c := range d.closers {
		errs = append(errs, c.Close())
	}
	d.closers = nil
	return errors.Join(errs...)
}

// execAll runs q on every replica of a shard at once (a CREATE of a
// replicated table, which each replica must run to join it; a
// Distributed table, each server's own), or through conn on one server.
// A replica that can't be reached is skipped (the others still run q)
// as long as one ran it; a server's exception fails it, except "already
// exists".
func (d *Destination) execAll(ctx context.Context, q string) error {
	if !d.replicated() {
		return d.conn.Exec(ctx, q)
	}
	errs := make([]error, len(d.replicas))
	var wg sync.WaitGroup
	for i, r := range d.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Exec(ctx, q)
		}()
	}
	wg.Wait()
	ran := 0
	var down []error
	for i, err := range errs {
		var exc *proto.Exception
		switch {
		case err == nil:
			ran++
		case errors.As(err, &exc):
			if !strings.Contains(err.Error(), "already exists") {
				return fmt.Errorf("replica %d of shard %d: %w", i, d.shard, err)
			}
			ran++
		case ctx.Err() != nil:
			return err
		default:
			d.log.Warn("clickhouse: a replica is unreachable; skipped", "shard", d.shard, "replica", i, "err", err)
			down = append(down, fmt.Errorf("replica %d of shard %d: %w", i, d.shard, err))
		}
	}
	if ran == 0 {
		return errors.Join(down...)
	}
	return nil
}

// acrossReplicas is Recover's word on an epoch that the replica in use
// has neither applied nor staged whole. That replica may lag: a replica
// that applied the epoch (or staged its blocks) may have died before the
// others fetched those parts, or they are still fetching them. Calling
// the epoch Lost then would replay it, and the rows would be in twice
// once the parts arrive. So every replica of the shard is asked: the
// epoch is Applied when one recorded it, Recoverable when one holds each
// of its blocks staged or applied (Commit waits for the replica in use
// to have them, see present), and Lost only when every replica answers
// and none does. A replica that doesn't answer, with no other holding
// the epoch, is an error: Recover fails until it is back.
func (w *writer) acrossReplicas(ctx context.Context, epoch uint64, byTable map[string][]stagedBlock) (sink.Outcome, error) {
	var down []error
	for i, r := range w.d.replicas {
		applied, whole, err := w.onReplica(ctx, r, epoch, byTable)
		switch {
		case err != nil:
			down = append(down, fmt.Errorf("replica %d: %w", i, err))
		case applied:
			return sink.Applied, nil
		case whole:
			return sink.Recoverable, nil
		}
	}
	if len(down) > 0 {
		return 0, fmt.Errorf("clickhouse: shard %d: epoch %d of %q is neither applied nor staged on the replicas that answer, and a replica that may hold it does not answer; retry once it is back: %w",
			w.d.shard, epoch, w.pipeline, errors.Join(down...))
	}
	return sink.Lost, nil
}

// onReplica reports whether replica r recorded epoch as applied, and
// whether it holds every block of it staged whole or in its table.
func (w *writer) onReplica(ctx context.Context, r driver.Conn, epoch uint64, byTable map[string][]stagedBlock) (applied, whole bool, err error) {
	count := func(q string) (int64, error) {
		var n uint64
		err := r.QueryRow(ctx, q).Scan(&n)
		return int64(n), err
	}
	n, err := count(fmt.Sprintf("SELECT count() FROM %s WHERE pipeline = %s AND epoch = %d", qualified(w.d.db, epochsTable), quoteString(w.pipeline), epoch))
	if err != nil || n > 0 {
		return n > 0, false, err
	}
	for t, bs := range byTable {
		for _, b := range bs {
			where := fmt.Sprintf(" WHERE %s = %d", quoteIdent(colBatch), b.Token)
			staged, err := count("SELECT count() FROM " + qualified(w.d.db, stageName(t)) + where)
			if err != nil {
				return false, false, err
			}
			if staged == b.Rows {
				continue
			}
			in, err := count("SELECT count() FROM " + qualified(w.d.db, t) + where)
			if err != nil {
				return false, false, err
			}
			if in == 0 || in != b.Rows && !w.isMerge(t) {
				return false, false, nil
			}
		}
	}
	return false, true, nil
}
