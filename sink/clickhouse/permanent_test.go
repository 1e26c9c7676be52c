package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/openetl/etl/sink/clickhouse"
)

// The server's exceptions that no retry fixes are permanent
// (sink.Classifier): here an unknown user, as a real server answers it;
// a refused connection and a timeout exception are not.
func TestPermanentErrors(t *testing.T) {
	a := addr(t)
	conn := open(t, a)
	d := newDest(t, clickhouse.Config{Conn: conn, Database: freshDB(t, conn)})
	bad, err := ch.Open(&ch.Options{Addr: []string{a}, DialTimeout: 10 * time.Second,
		Auth: ch.Auth{Username: "openetl_no_such_user", Password: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	err = bad.Ping(context.Background())
	var exc *proto.Exception
	if !errors.As(err, &exc) {
		t.Fatalf("Ping as an unknown user: %v, want a server exception", err)
	}
	if !d.Permanent(fmt.Errorf("destination: lane 0: %w", err)) {
		t.Errorf("Permanent(%v) (code %d) = false, want true", err, exc.Code)
	}
	for _, transient := range []error{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"),
		&proto.Exception{Code: 159, Message: "timeout exceeded"}} {
		if d.Permanent(transient) {
			t.Errorf("Permanent(%v) = true, want false", transient)
		}
	}
}
