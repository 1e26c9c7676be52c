package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/sink"
)

var (
	_ sink.SchemaChecker = (*Destination)(nil)
	_ sink.Classifier    = (*Destination)(nil)
)

// CheckSchema names the columns of sc that table can't take: a column
// whose type differs from the type it has in the table, unless the
// change is a widening applied in place (see widens).
// The runner holds such a column's values back under the pipeline's
// _held/, and the table's column keeps its type (null for those rows).
// New columns are taken.
func (d *Destination) CheckSchema(ctx context.Context, table string, sc *arrow.Schema) ([]sink.RejectedColumn, error) {
	have, err := columnTypes(ctx, d.db, d.target(table))
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", table, err)
	}
	var out []sink.RejectedColumn
	for _, f := range sc.Fields() {
		_, target, err := mapType(f.Type)
		if err != nil {
			out = append(out, sink.RejectedColumn{Column: f.Name, Reason: err.Error()})
			continue
		}
		if h, ok := have[f.Name]; ok && !takes(h, target, f.Type) && !widens(h, target) {
			out = append(out, sink.RejectedColumn{Column: f.Name, Reason: fmt.Sprintf("%s to %s: type changes are not applied in place yet", h, target)})
		}
	}
	return out, nil
}

// takes reports whether a table column of type have takes the values of
// an Arrow column of type dt, whose own table type is target.
func takes(have, target string, dt arrow.DataType) bool {
	if have == target {
		return true
	}
	switch dt.ID() {
	case arrow.STRING, arrow.LARGE_STRING:
		return declaredText.MatchString(have) || declaredNumeric.MatchString(have)
	case arrow.DECIMAL128:
		return declaredNumeric.MatchString(have)
	case arrow.FIXED_SIZE_BINARY:
		return have == "uuid" && dt.(*arrow.FixedSizeBinaryType).ByteWidth == 16
	case arrow.LIST:
		h, ok1 := strings.CutSuffix(have, "[]")
		t, ok2 := strings.CutSuffix(target, "[]")
		return ok1 && ok2 && takes(h, t, dt.(*arrow.ListType).Elem())
	}
	return false
}

// widens reports whether a column of type have is changed in place to
// want, the widenings the engine makes: an integer or real to double
// precision, anything to text (ALTER COLUMN ... TYPE, in the transaction
// that applies the first rows of the new type).
func widens(have, want string) bool {
	switch want {
	case "double precision":
		return have == "smallint" || have == "integer" || have == "bigint" || have == "real"
	case "text":
		return have != "" && have != "text"
	}
	return false
}
