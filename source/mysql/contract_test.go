package mysql_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

func TestPurgedErrorMatchesTheContract(t *testing.T) {
	err := fmt.Errorf("open: %w", &mysql.PurgedError{File: "bin.000001", Pos: 4})
	if !errors.Is(err, source.ErrPositionLost) || !errors.Is(err, mysql.ErrBinlogPurged) {
		t.Fatalf("%v: matches source.ErrPositionLost %v, mysql.ErrBinlogPurged %v", err,
			errors.Is(err, source.ErrPositionLost), errors.Is(err, mysql.ErrBinlogPurged))
	}
}
