package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	srcpg "github.com/openetl/etl/source/postgres"
)

// Two Postgres shards routed into one merged Postgres table: the
// destination's key is (_openetl_stream, id), so the shards' equal keys
// are two rows; updates and deletes land on their own shard's row; the
// table's columns have the joined declared types. psql reads both sides.
func TestRouteShardsToPostgres(t *testing.T) {
	e := newEnv(t)
	base := fmt.Sprintf("pgroute_%d_%d", time.Now().UnixNano()%1e9, unique.Add(1))
	a, b := base+"_a", base+"_b"
	psql(t, `CREATE TABLE `+a+` (id int4 PRIMARY KEY, amount numeric(10,2), note varchar(10));
		CREATE TABLE `+b+` (id int8 PRIMARY KEY, amount numeric(8,4), note text, extra int2);
		INSERT INTO `+a+` VALUES (1, 1.5, 'a1'), (2, 2.5, 'a2'), (3, NULL, 'a3');
		INSERT INTO `+b+` VALUES (1, 1.0625, 'b1', 7), (2, 2, 'b2', NULL)`)
	t.Cleanup(func() {
		psql(t, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '`+base+`';
			DROP PUBLICATION IF EXISTS `+base+`; DROP TABLE `+a+`, `+b)
	})
	dir := t.TempDir()
	sync := func() etl.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		src, err := srcpg.New(srcpg.Config{DSN: dsn(t), Publication: base, CreatePublication: true, Tables: []string{a, b}, Slot: base})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close(context.Background())
		store, err := checkpoint.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		p, err := etl.NewPipeline("pgroute").From(src).To(e.open(t)).Checkpoints(store).
			Route(base+"_?", base).Mode(delivery.Merge, a, b).Require(delivery.ExactlyOnce).Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		res, err := p.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	same := func(when string) {
		t.Helper()
		want := psql(t, `SELECT s, id, amount, note FROM (SELECT '`+a+`' s, id, amount::numeric(12,4), note FROM `+a+`
			UNION ALL SELECT '`+b+`', id, amount, note FROM `+b+`) u ORDER BY s, id`)
		got := psql(t, `SELECT _openetl_stream, id, amount, note FROM `+e.schema+`.`+base+` WHERE NOT _openetl_deleted ORDER BY 1, 2`)
		if got != want {
			t.Errorf("%s: destination\n%s\nsource\n%s", when, got, want)
		}
	}
	if res := sync(); res.Streams[a].Written != 3 || res.Streams[b].Written != 2 {
		t.Fatalf("counts %+v", res.Streams)
	}
	same("after the first Sync")
	types := psql(t, `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = '`+e.schema+`.`+base+`'::regclass AND attname IN ('id', 'amount', 'note', 'extra', '_openetl_stream')`)
	if want := "id bigint, amount numeric(12,4), note text, extra smallint, _openetl_stream text"; types != want {
		t.Errorf("destination types: %s, want %s", types, want)
	}
	pk := psql(t, `SELECT string_agg(a.attname, ',' ORDER BY array_position(i.indkey::int2[], a.attnum)) FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = '`+e.schema+`.`+base+`'::regclass AND i.indisprimary`)
	if pk != "_openetl_stream,id" {
		t.Errorf("primary key (%s), want (_openetl_stream,id)", pk)
	}
	psql(t, `UPDATE `+a+` SET note = 'a1 again' WHERE id = 1; DELETE FROM `+b+` WHERE id = 2; INSERT INTO `+b+` VALUES (3, 3, 'b3', 3)`)
	if res := sync(); res.Streams[a].Written != 1 || res.Streams[b].Written != 2 {
		t.Fatalf("counts %+v", res.Streams)
	}
	same("after the second Sync")
	if got := psql(t, `SELECT _openetl_stream || ' ' || id FROM `+e.schema+`.`+base+` WHERE _openetl_deleted`); got != b+" 2" {
		t.Errorf("tombstones: %q, want %s's key 2", got, b)
	}
}
