package runner_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/openetl/etl/internal/runner"
)

func TestRedactSecrets(t *testing.T) {
	for _, tc := range []struct{ in, keep string }{
		{"dial postgres://app:hunter2@db:5432/orders?sslmode=disable: refused", "postgres://app:xxxxx@db:5432/orders"},
		{"clickhouse://default:hunter2@127.0.0.1:9000/db", "clickhouse://default:xxxxx@127.0.0.1:9000/db"},
		{"s3://AKIA:hunter2@bucket/x", "s3://AKIA:xxxxx@bucket/x"},
		{"app:hunter2@tcp(127.0.0.1:3306)/shop?parseTime=true", "app:xxxxx@tcp(127.0.0.1:3306)/shop"},
		{"dsn=app:hunter2@unix(/run/mysqld.sock)/shop", "app:xxxxx@unix("},
		{"host=db user=app password=hunter2 dbname=x", "host=db user=app password=xxxxx dbname=x"},
		{"host=db password='hunter 2' dbname=x", "password=xxxxx dbname=x"},
		{"PGPASSWORD=hunter2 psql", "PGPASSWORD=xxxxx psql"},
		{"sasl_password=hunter2;token=hunter2", "sasl_password=xxxxx;token=xxxxx"},
		{"{Host:db User:app Password:hunter2 Database:x}", "Password:xxxxx Database:x"},
		{"{User:app Pass:hunter2}", "Pass:xxxxx}"},
		{`{"user":"app","password":"hunter2"}`, `"password":xxxxx}`},
		{"aws_secret_access_key = hunter2", "aws_secret_access_key = xxxxx"},
		{"api_key: hunter2", "api_key: xxxxx"},
		{"(password: hunter2)", "(password: xxxxx)"},
		{"password: YESh", "password: xxxxx"},
	} {
		got := runner.RedactSecrets(tc.in)
		if strings.Contains(got, "hunter") || !strings.Contains(got, tc.keep) {
			t.Errorf("RedactSecrets(%q) = %q; want it to contain %q and no secret", tc.in, got, tc.keep)
		}
	}
	// What is no secret stays as it is.
	for _, s := range []string{
		"password authentication failed for user \"app\"",
		"stream \"orders\": 10 rows, epoch 3",
		"http://db:5432/x",
		"Error 1045 (28000): Access denied for user 'app'@'localhost' (using password: YES)",
		"Access denied for user 'app'@'localhost' (using password: NO)",
	} {
		if got := runner.RedactSecrets(s); got != s {
			t.Errorf("RedactSecrets(%q) = %q, want it unchanged", s, got)
		}
	}
}

type dsnConfig struct {
	DSN      string
	Password string
	Port     int
}

// TestLoggerRedacts passes secrets through the runner's logger in every
// attribute form: string, error, struct (%+v), group, and logger.With.
func TestLoggerRedacts(t *testing.T) {
	for _, name := range []string{"text", "json"} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			h := slog.Handler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			if name == "json" {
				h = slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
			}
			log := runner.RedactingLogger(slog.New(h))
			log = log.With("dsn", "postgres://app:hunter2@db/x")
			err := fmt.Errorf("source: open: %w", errors.New("connect mysql app:hunter2@tcp(db:3306)/x: refused"))
			log.Debug("connecting to postgres://app:hunter2@db/x", "err", err,
				"cfg", dsnConfig{DSN: "host=db password=hunter2", Password: "hunter2", Port: 5432},
				slog.Group("conn", "url", "clickhouse://u:hunter2@h/db"))
			out := buf.String()
			if strings.Contains(out, "hunter2") || !strings.Contains(out, "xxxxx") || !strings.Contains(out, "5432") {
				t.Fatalf("log output:\n%s", out)
			}
		})
	}
}
