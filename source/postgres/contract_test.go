package postgres_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

func TestSlotErrorsMatchTheContract(t *testing.T) {
	for _, cause := range []error{postgres.ErrSlotMissing, postgres.ErrWALRemoved, postgres.ErrSlotAdvanced} {
		err := fmt.Errorf("open: %w", &postgres.SlotError{Slot: "s", Err: cause})
		if !errors.Is(err, source.ErrPositionLost) || !errors.Is(err, cause) {
			t.Errorf("%v: matches source.ErrPositionLost %v, its cause %v", err,
				errors.Is(err, source.ErrPositionLost), errors.Is(err, cause))
		}
	}
}
