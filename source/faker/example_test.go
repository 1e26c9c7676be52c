package faker_test

import (
	"context"
	"fmt"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

func ExampleSource_Generate() {
	src, err := faker.New(faker.Config{Seed: 7})
	if err != nil {
		panic(err)
	}
	var buf []byte
	for i := range int64(3) {
		op, seq, key, payload := src.Generate(faker.Orders, i, buf[:0])
		buf = key[:0] // reuse the memory on the next call
		fmt.Println(op, seq, string(key), string(payload))
	}
	// Output:
	// insert 1 1 {"id":1,"customer_id":1,"amount":618.60,"currency":"CHF","status":"pending","items":[{"sku":"SKU-00899","qty":2,"price":162.28},{"sku":"SKU-02102","qty":4,"price":73.51}],"placed_at":"2024-01-01T00:00:36Z"}
	// insert 2 2 {"id":2,"customer_id":1,"amount":212.56,"currency":"USD","status":"pending","items":[{"sku":"SKU-03575","qty":4,"price":53.14}],"placed_at":"2024-01-01T00:00:43Z"}
	// insert 3 3 {"id":3,"customer_id":3,"amount":2053.24,"currency":"JPY","status":"pending","items":[{"sku":"SKU-01780","qty":3,"price":72.70},{"sku":"SKU-01414","qty":3,"price":195.97},{"sku":"SKU-01934","qty":2,"price":175.04},{"sku":"SKU-02591","qty":5,"price":179.43}],"placed_at":"2024-01-01T00:01:24Z"}
}

// printer is an Emitter that prints what it is given.
type printer struct{}

func (printer) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	fmt.Printf("%s %v seq=%d key=%s\n", stream, op, seq, key)
	return nil
}

func (printer) ResumePoint(state []byte) error {
	fmt.Printf("resume point %x\n", state)
	return nil
}

func ExampleSource_Open() {
	src, err := faker.New(faker.Config{Rows: 5, SplitsPerStream: 2, Streams: []string{faker.Customers}})
	if err != nil {
		panic(err)
	}
	// Resume split customers/1 after index 1: its next index is 3.
	resume := map[source.SplitID][]byte{"customers/1": {0, 0, 0, 0, 0, 0, 0, 3}}
	splits, err := src.Open(context.Background(), []string{faker.Customers}, resume)
	if err != nil {
		panic(err)
	}
	for _, sp := range splits {
		fmt.Println("split", sp.ID())
		if err := sp.Read(context.Background(), printer{}, true); err != nil {
			panic(err)
		}
	}
	// Output:
	// split customers/0
	// customers insert seq=1 key=1
	// resume point 0000000000000002
	// customers update seq=3 key=1
	// resume point 0000000000000004
	// customers insert seq=5 key=5
	// resume point 0000000000000006
	// split customers/1
	// customers insert seq=4 key=4
	// resume point 0000000000000005
}
