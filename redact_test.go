package etl_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
	"github.com/openetl/etl/source/mysql"
	"github.com/openetl/etl/source/postgres"
)

// TestConnectorSecretsRedacted goes through the ways a built-in
// connector's secret can reach text: its config printed with %+v, its
// constructor's error, and the Build error when the source can't be
// reached (nothing listens on port 1). None shows the password once
// through RedactSecrets (the runner's logs, events and status, and the
// errors Build, Sync and Run return, pass everything through it).
func TestConnectorSecretsRedacted(t *testing.T) {
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	build := func(src source.Source) string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := etl.NewPipeline("p").From(src).To(dst).Checkpoints(checkpoint.NewMem()).BuildContext(ctx)
		if err == nil {
			t.Fatal("Build over an unreachable source succeeded")
		}
		return err.Error()
	}
	clean := func(what, text string) {
		t.Helper()
		if strings.Contains(text, secret) {
			t.Errorf("%s shows the password: %s", what, text)
		}
	}

	pgDSN := "postgres://app:" + secret + "@127.0.0.1:1/shop?sslmode=disable&connect_timeout=2"
	cc, err := pgconn.ParseConfig(pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	for i, cfg := range []postgres.Config{
		{DSN: pgDSN, Publication: "pub", Slot: "slot"},
		{DSN: "host=127.0.0.1 port=1 user=app password=" + secret + " dbname=shop sslmode=disable connect_timeout=2", Publication: "pub", Slot: "slot"},
		{ConnConfig: cc, Publication: "pub", Slot: "slot"},
	} {
		clean(fmt.Sprintf("postgres config %d (%%+v)", i), etl.RedactSecrets(fmt.Sprintf("%+v", cfg)))
		src, err := postgres.New(cfg)
		if err != nil {
			t.Fatalf("postgres config %d: %v", i, err)
		}
		clean(fmt.Sprintf("postgres config %d: Build error", i), build(src))
	}
	clean("pgconn config (%+v)", etl.RedactSecrets(fmt.Sprintf("%+v", *cc)))
	_, err = postgres.New(postgres.Config{DSN: "postgres://app:" + secret + "@127.0.0.1:notaport/shop", Publication: "pub", Slot: "slot"})
	if err == nil {
		t.Fatal("postgres.New took a DSN with a bad port")
	}
	clean("postgres.New error", etl.RedactSecrets(err.Error()))

	auth := plain.Auth{User: "app", Pass: secret}
	kcfg := kafka.Config{Topics: []string{"orders"}, Opts: []kgo.Opt{
		kgo.SeedBrokers("127.0.0.1:1"),
		kgo.SASL(auth.AsMechanism()),
		kgo.RetryTimeout(2 * time.Second),
	}}
	clean("kafka config (%+v)", etl.RedactSecrets(fmt.Sprintf("%+v", kcfg)))
	if !strings.Contains(fmt.Sprintf("%+v %+v", auth, pgDSN), secret) {
		t.Fatal("the raw texts hold no password: the test checks nothing")
	}
	clean("kafka SASL auth (%+v)", etl.RedactSecrets(fmt.Sprintf("%+v", auth)))
	clean("kafka SASL auth (%#v)", etl.RedactSecrets(fmt.Sprintf("%#v", auth)))
	ksrc, err := kafka.New(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ksrc.Close(context.Background())
	clean("kafka Build error", build(ksrc))

	// MySQL: a password field, and a go-sql-driver style DSN.
	for i, cfg := range []mysql.Config{
		{Addr: "127.0.0.1:1", User: "app", Password: secret, Database: "shop"},
		{DSN: "app:" + secret + "@tcp(127.0.0.1:1)/shop"},
	} {
		clean(fmt.Sprintf("mysql config %d (%%+v)", i), etl.RedactSecrets(fmt.Sprintf("%+v", cfg)))
		msrc, err := mysql.New(cfg)
		if err != nil {
			clean(fmt.Sprintf("mysql.New error %d", i), etl.RedactSecrets(err.Error()))
			continue
		}
		clean(fmt.Sprintf("mysql config %d: Build error", i), build(msrc))
		if c, ok := any(msrc).(interface{ Close(context.Context) error }); ok {
			c.Close(context.Background())
		}
	}
	// sink/clickhouse and sink/iceberg take a connection or a catalog the
	// host made: no credentials pass through their configs.
}
