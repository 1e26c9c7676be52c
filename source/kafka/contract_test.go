package kafka_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
)

func TestPositionLostMatchesTheContract(t *testing.T) {
	err := fmt.Errorf("%w: orders/3: offset 10 is before 42", kafka.ErrPositionLost)
	if !errors.Is(err, source.ErrPositionLost) || !errors.Is(err, kafka.ErrPositionLost) {
		t.Fatalf("%v matches kafka.ErrPositionLost %v, source.ErrPositionLost %v", err,
			errors.Is(err, kafka.ErrPositionLost), errors.Is(err, source.ErrPositionLost))
	}
	if errors.Is(kafka.ErrUnknownTopic, source.ErrPositionLost) {
		t.Fatal("an unknown topic matches source.ErrPositionLost")
	}
}
