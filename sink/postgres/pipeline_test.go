package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	srcpg "github.com/openetl/etl/source/postgres"
)

// A Postgres → Postgres pipeline: two Syncs of a table with declared
// types (numeric, uuid, jsonb, timestamptz, arrays) merged by its key, with an
// update, a delete and an insert between them. psql reads both sides:
// the destination's live rows equal the source's, and the declared
// types are the table's.
func TestPostgresToPostgres(t *testing.T) {
	e := newEnv(t)
	tbl := fmt.Sprintf("pgsrc_%d_%d", time.Now().UnixNano()%1e9, unique.Add(1))
	psql(t, `CREATE TABLE `+tbl+` (id int PRIMARY KEY, amount numeric(10,2), u uuid, doc jsonb, at timestamptz, note text,
		big numeric, tags text[], nums int[]);
		INSERT INTO `+tbl+` VALUES (1, 10.50, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": 1}', '2026-12-01 10:00:00.123456+00', 'one',
				123456789012345678901234567890.123456789, ARRAY['a', 'b "c"', NULL, 'd,e', 'back\slash'], ARRAY[1, NULL, -3]),
			(2, NULL, NULL, '[1, "x"]', '1999-01-08 04:05:06+00', 'two', NULL, '{}', NULL), (3, -0.01, NULL, NULL, NULL, NULL, 0, NULL, '{}')`)
	t.Cleanup(func() {
		psql(t, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '`+tbl+`';
			DROP PUBLICATION IF EXISTS `+tbl+`; DROP TABLE `+tbl)
	})
	dir := t.TempDir()
	sync := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		src, err := srcpg.New(srcpg.Config{DSN: dsn(t), Publication: tbl, CreatePublication: true, Tables: []string{tbl}, Slot: tbl})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close(context.Background())
		store, err := checkpoint.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		p, err := etl.NewPipeline("pg2pg").From(src).To(e.open(t)).Checkpoints(store).Mode(delivery.Merge, tbl).Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		if _, err := p.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cols := `id, amount, u, doc, at, note, big, tags, nums`
	same := func(when string) {
		t.Helper()
		want := psql(t, `SELECT `+cols+` FROM `+tbl+` ORDER BY id`)
		got := psql(t, `SELECT `+cols+` FROM `+e.schema+`.`+tbl+` WHERE NOT _openetl_deleted ORDER BY id`)
		if got != want {
			t.Errorf("%s: destination\n%s\nsource\n%s", when, got, want)
		}
	}
	sync()
	same("after the first Sync")
	types := psql(t, `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = '`+e.schema+`.`+tbl+`'::regclass AND attname IN ('id', 'amount', 'u', 'doc', 'at', 'note', 'big', 'tags', 'nums')`)
	if want := "id integer, amount numeric(10,2), u uuid, doc jsonb, at timestamp with time zone, note text, big numeric, tags text[], nums integer[]"; types != want {
		t.Errorf("destination types: %s, want %s", types, want)
	}
	psql(t, `UPDATE `+tbl+` SET note = 'two, again', amount = 2 WHERE id = 2; DELETE FROM `+tbl+` WHERE id = 3;
		INSERT INTO `+tbl+` VALUES (4, 4.44, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', '{}', now(), 'four', -1, ARRAY['x'], ARRAY[4])`)
	sync()
	same("after the second Sync")
	if got := psql(t, `SELECT id || ' ' || _openetl_op FROM `+e.schema+`.`+tbl+` WHERE _openetl_deleted`); got != "3 delete" {
		t.Errorf("tombstones: %q, want key 3's delete", got)
	}
}

// A Postgres → Postgres pipeline of the declared types beyond the
// scalar ones: arrays of dates, timestamps, times, numerics, uuids,
// jsonb, bytea, inet, timetz, varchar, floats with NaN and infinities,
// and timetz, at the edges of Postgres's ranges. psql reads the same
// text on both sides after a snapshot and after changes, and the
// destination's columns have the source's types.
func TestPostgresToPostgresArrays(t *testing.T) {
	e := newEnv(t)
	tbl := fmt.Sprintf("pgarr_%d_%d", time.Now().UnixNano()%1e9, unique.Add(1))
	cols := `id, tz, dates, stamps, stamps_tz, times, nums, uuids, docs, bins, ips, tzs, names, floats`
	psql(t, `CREATE TABLE `+tbl+` (id int PRIMARY KEY, tz timetz, dates date[], stamps timestamp[], stamps_tz timestamptz[], times time[],
		nums numeric[], uuids uuid[], docs jsonb[], bins bytea[], ips inet[], tzs timetz[], names varchar(8)[], floats float8[]);
		SET TIME ZONE 'UTC';
		INSERT INTO `+tbl+` VALUES
		(1, '10:00:00.5+02:30', ARRAY['2026-12-01', '4714-11-24 BC', '5874897-12-31', '0001-01-01 BC', NULL]::date[],
			ARRAY['2026-12-01 10:00:00.123456', '294246-12-31 23:59:59.999999', '4714-11-24 00:00:00 BC']::timestamp[],
			ARRAY['2026-12-01 10:00:00.000001+05', '1999-12-31 23:59:59+00']::timestamptz[], ARRAY['00:00', '23:59:59.999999', '12:34:56.789']::time[],
			ARRAY[1.5, -0.000001, 123456789012345678901234567890.123, 'NaN']::numeric[],
			ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', NULL]::uuid[], ARRAY['{"a": [1, "x"]}', 'null', '"s\"q"']::jsonb[],
			ARRAY['\x00ff'::bytea, '\x'::bytea, NULL], ARRAY['10.0.0.1/8', '::1']::inet[], ARRAY['23:59:59-11', '00:00+14']::timetz[],
			ARRAY['a b', 'é,"', '']::varchar(8)[], ARRAY['NaN', 'Infinity', '-Infinity', '1e-300', '0.1']::float8[]),
		(2, NULL, '{}', NULL, NULL, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')`)
	t.Cleanup(func() {
		psql(t, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '`+tbl+`';
			DROP PUBLICATION IF EXISTS `+tbl+`; DROP TABLE `+tbl)
	})
	dir := t.TempDir()
	sync := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		src, err := srcpg.New(srcpg.Config{DSN: dsn(t), Publication: tbl, CreatePublication: true, Tables: []string{tbl}, Slot: tbl})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close(context.Background())
		store, err := checkpoint.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		p, err := etl.NewPipeline("pgarr").From(src).To(e.open(t)).Checkpoints(store).Mode(delivery.Merge, tbl).Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		res, err := p.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for s, c := range res.Streams {
			if c.Quarantined != 0 || c.Held != 0 {
				t.Errorf("stream %s: %d quarantined, %d held, want none", s, c.Quarantined, c.Held)
			}
		}
	}
	same := func(when string) {
		t.Helper()
		q := `SET TIME ZONE 'UTC'; SELECT ` + cols + ` FROM %s ORDER BY id`
		want := psql(t, fmt.Sprintf(q, tbl))
		got := psql(t, fmt.Sprintf(q, e.schema+`.`+tbl+` WHERE NOT _openetl_deleted`))
		if got != want {
			t.Errorf("%s: destination\n%s\nsource\n%s", when, got, want)
		}
	}
	sync()
	same("after the first Sync")
	types := `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = '%s'::regclass AND attnum > 0 AND attname NOT LIKE '\_openetl%%'`
	want := strings.ReplaceAll(psql(t, fmt.Sprintf(types, tbl)), "character varying(8)[]", "character varying[]")
	if got := psql(t, fmt.Sprintf(types, e.schema+`.`+tbl)); got != want {
		t.Errorf("destination types:\n%s\nwant\n%s", got, want)
	}
	psql(t, `UPDATE `+tbl+` SET dates = ARRAY['1970-01-01'::date], tz = '00:00:00-00:30' WHERE id = 2;
		INSERT INTO `+tbl+` VALUES (3, '24:00:00+00', ARRAY[NULL]::date[], NULL, ARRAY['2000-01-01 00:00:00+00']::timestamptz[], NULL, ARRAY[0]::numeric[],
			NULL, ARRAY['[]']::jsonb[], NULL, NULL, NULL, NULL, ARRAY[-0.0]::float8[])`)
	sync()
	same("after the second Sync")
}
