package engine_test

import (
	"testing"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
)

// The names the engine writes are the ones package sink gives
// destinations: the metadata columns, the op values and the enum mark.
func TestOutputMatchesTheSinkContract(t *testing.T) {
	if engine.LogicalTypeKey != sink.LogicalTypeKey || engine.LogicalTypeEnum != sink.LogicalTypeEnum {
		t.Errorf("engine marks enums %s=%s, package sink says %s=%s",
			engine.LogicalTypeKey, engine.LogicalTypeEnum, sink.LogicalTypeKey, sink.LogicalTypeEnum)
	}
	e := newEngine(t, engine.Config{})
	out := push(t, e, docs("s", `{"id":1}`))
	names := colNames(out.Record)
	equal(t, "metadata columns", names[len(names)-4:],
		[]string{sink.ColumnID, sink.ColumnOp, sink.ColumnSeq, sink.ColumnSyncedAt})
	equal(t, "op", cells(t, out.Record, sink.ColumnOp), []string{sink.OpInsert})
}
