package iceberg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/apache/iceberg-go/catalog/rest"
)

// TestMayRefuseProps pins which failed commits FenceAuto may take for a
// catalog's refusal of its table properties to iceberg-go's error values
// (an upgrade that renames them fails here): a request the catalog
// judged (400, or another catalog's own error) may be; an outage, a
// commit of unknown outcome and an authorization problem are not.
func TestMayRefuseProps(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("commit: %w: custom table properties are not allowed", rest.ErrBadRequest), true},
		{errors.New("glue: InvalidInputException: parameter key not allowed"), true},
		{fmt.Errorf("commit: %w", rest.ErrServiceUnavailable), false},
		{fmt.Errorf("commit: %w", rest.ErrServerError), false},
		{fmt.Errorf("commit: %w", rest.ErrCommitStateUnknown), false},
		{fmt.Errorf("commit: %w", rest.ErrAuthorizationExpired), false},
		{fmt.Errorf("commit: %w", rest.ErrForbidden), false},
		{errors.Join(errors.New("x"), fmt.Errorf("y: %w", rest.ErrServiceUnavailable)), false},
		{fmt.Errorf("commit: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), false},
		{fmt.Errorf("commit: %w", context.DeadlineExceeded), false},
		{fmt.Errorf("commit: %w", io.ErrUnexpectedEOF), false},
	} {
		if got := mayRefuseProps(tc.err); got != tc.want {
			t.Errorf("mayRefuseProps(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
