package postgres_test

import (
	"testing"

	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/source"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/postgres"
)

// Merge keeps the newest version of each key: within an epoch, across
// epochs, and against a replayed older version in a later epoch; a
// delete leaves a tombstone (soft) or removes the row (hard). psql reads
// the table.
func TestMerge(t *testing.T) {
	for _, tc := range []struct {
		deletes sink.Deletes
		merge   bool // MERGE, or ON CONFLICT (servers before 15)
		want    string
	}{
		{sink.SoftDeletes, true, "1|one v3|3|f\n2||4|t\n3|three|5|f"},
		{sink.HardDeletes, true, "1|one v3|3\n3|three|5"},
		{sink.SoftDeletes, false, "1|one v3|3|f\n2||4|t\n3|three|5|f"},
		{sink.HardDeletes, false, "1|one v3|3\n3|three|5"},
	} {
		name := tc.deletes.String() + "/merge"
		if !tc.merge {
			name = tc.deletes.String() + "/on-conflict"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			dst := e.open(t)
			postgres.SetMerge(dst, tc.merge)
			cfg := sink.WriterConfig{Pipeline: "merge", Streams: []sink.StreamSpec{{Stream: "m", Table: "m",
				Mode: sink.Merge, Key: []string{"id"}, Deletes: tc.deletes}}}
			// Epoch 1: two versions of key 1 in one epoch, key 2 inserted.
			commit(t, dst, cfg, 1, 1, nil, batch(t, row{id: 1, value: "one v2", seq: 2}, row{id: 1, value: "one v1", seq: 1},
				row{id: 2, value: "two", seq: 1}))
			// Epoch 2: key 1 updated, key 2 deleted, key 3 inserted.
			head := &checkpoint.Record{Pipeline: "merge", Epoch: 1, Generation: 1}
			commit(t, dst, cfg, 2, 2, head, batch(t, row{id: 1, value: "one v3", seq: 3, op: sink.OpUpdate},
				row{id: 2, null: true, seq: 4, op: sink.OpDelete}, row{id: 3, value: "three", seq: 5}))
			// Epoch 3: a superset source replays older versions of every
			// key: none overwrites a newer one.
			head = &checkpoint.Record{Pipeline: "merge", Epoch: 2, Generation: 2}
			commit(t, dst, cfg, 3, 3, head, batch(t, row{id: 1, value: "one v1", seq: 1}, row{id: 3, value: "three v0", seq: 4}))
			cols := `id, coalesce(value, ''), _openetl_seq`
			if tc.deletes == sink.SoftDeletes {
				cols += `, _openetl_deleted`
			}
			if got := psql(t, `SELECT `+cols+` FROM `+e.schema+`.m ORDER BY id`); got != tc.want {
				t.Errorf("m =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// Build-time refusal: merge without a key.
func TestCheckStream(t *testing.T) {
	dst := newEnv(t).open(t)
	if err := dst.CheckStream(sink.StreamSpec{Stream: "o", Table: "o", Mode: sink.Merge}); err == nil {
		t.Error("merge without a key accepted")
	}
	if err := dst.CheckStream(sink.StreamSpec{Stream: "o", Table: "o", Mode: sink.Merge, Key: []string{"id"}}); err != nil {
		t.Error(err)
	}
}

// What package delivery reports for this destination: exactly once from
// exact sources, effectively once for merge from superset ones.
func TestDelivery(t *testing.T) {
	dst := newEnv(t).open(t)
	for _, tc := range []struct {
		replay source.Replay
		mode   delivery.Mode
		want   delivery.Level
	}{
		{source.ReplayExact, delivery.Append, delivery.ExactlyOnce},
		{source.ReplayExact, delivery.Merge, delivery.ExactlyOnce},
		{source.ReplaySuperset, delivery.Merge, delivery.EffectivelyOnce},
	} {
		got, err := delivery.Decide(delivery.Stream{Name: "s", Class: dst.Class(), Capabilities: dst.Capabilities(),
			Replay: tc.replay, Mode: tc.mode, HasKey: true}, delivery.ExactlyOnce)
		if err != nil || got.Level != tc.want {
			t.Errorf("%v source, %v: %v (%v), want %v", tc.replay, tc.mode, got.Level, err, tc.want)
		}
	}
}
