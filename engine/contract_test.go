package engine_test

import (
	"go/build"
	"strings"
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

// The engine is a leaf of this module: the contracts depend on nothing
// it defines, and it on no contract (a source.Column converts to an
// engine.Column, a source.Op is a RawBatch op's value), with cgo or
// without.
func TestImportsNoPackageOfTheModule(t *testing.T) {
	for _, cgo := range []bool{true, false} {
		ctx := build.Default
		ctx.CgoEnabled = cgo
		pkg, err := ctx.ImportDir(".", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, "github.com/openetl/etl/") || imp == "github.com/openetl/etl" {
				t.Errorf("cgo=%v: package engine imports %s", cgo, imp)
			}
		}
	}
}
