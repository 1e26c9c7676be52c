package etl_test

import (
	"context"
	"fmt"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// Column policies and a row filter on the customers stream, run inside
// the engine: emails hashed with a secret key (joinable, not
// reversible), names masked but for their last two characters, tags
// and signup dates left out, and only VIP customers written (deletes
// always pass).
func ExampleBuilder_Columns() {
	src, err := faker.New(faker.Config{Rows: 1000, Streams: []string{faker.Customers}})
	if err != nil {
		panic(err)
	}
	key := []byte("a secret from your key store")
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	p, err := etl.NewPipeline("crm").
		From(src).
		To(dst).
		Checkpoints(checkpoint.NewMem()).
		Columns(faker.Customers,
			etl.HashHMAC("email", key),
			etl.Mask("name", 2),
			etl.Exclude("tags", "signup")).
		Filter(faker.Customers, etl.Eq("vip", true)).
		Build()
	if err != nil {
		panic(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		panic(err)
	}
	c := res.Streams[faker.Customers]
	fmt.Printf("read %d, written %d, filtered %d, quarantined %d\n", c.Read, c.Written, c.Filtered, c.Quarantined)
	for _, r := range dst.Rows(faker.Customers) {
		if r.Values["email"] != nil {
			fmt.Printf("name %v, email %.16v…, tags %v\n", r.Values["name"], r.Values["email"], r.Values["tags"])
			break
		}
	}
	// Output:
	// read 1000, written 137, filtered 863, quarantined 0
	// name *********th, email cb780136881ea27a…, tags <nil>
}
