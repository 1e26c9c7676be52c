package kafka_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl/source/kafka"
)

// The broker's errors that no retry fixes are permanent
// (source.Classifier); a leader moving and a refused connection are
// not. (kfake closes a connection whose SASL login fails instead of
// answering the error code, and the test broker has no SASL, so the
// errors are franz-go's values, wrapped as an attempt wraps them.)
func TestPermanentErrors(t *testing.T) {
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, Topics: []string{"perm"}})
	for _, e := range []error{kerr.SaslAuthenticationFailed, kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed} {
		if err := fmt.Errorf("split perm/0: %w", e); !src.Permanent(err) {
			t.Errorf("Permanent(%v) = false, want true", err)
		}
	}
	for _, e := range []error{kerr.NotLeaderForPartition, kerr.RequestTimedOut, errors.New("dial tcp 127.0.0.1:1: connect: connection refused")} {
		if src.Permanent(e) {
			t.Errorf("Permanent(%v) = true, want false", e)
		}
	}
}
