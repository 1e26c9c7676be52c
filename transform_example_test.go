package etl_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// A Go transform on the customers stream: it masks each email's local
// part and writes VIP customers only (and every delete). The fake
// destination of package sinktest shows what a destination gets; the
// same pipeline is how to unit-test a transform.
func ExampleBuilder_Transform() {
	vipsMasked := func(_ context.Context, b etl.TransformBatch) error {
		in := b.Record()
		var email *array.String
		var vip *array.Boolean
		var op *array.String
		for i, f := range in.Schema().Fields() {
			switch f.Name {
			case "email":
				email, _ = in.Column(i).(*array.String)
			case "vip":
				vip, _ = in.Column(i).(*array.Boolean)
			case sink.ColumnOp:
				op, _ = in.Column(i).(*array.String)
			}
		}
		if email == nil || vip == nil {
			return fmt.Errorf("customers without email or vip: %v", in.Schema())
		}
		// The rows to keep, as runs of consecutive rows.
		keep := func(i int) bool { return op.Value(i) == sink.OpDelete || vip.IsValid(i) && vip.Value(i) }
		for lo := 0; lo < int(in.NumRows()); {
			if !keep(lo) {
				lo++
				continue
			}
			hi := lo
			for hi < int(in.NumRows()) && keep(hi) {
				hi++
			}
			part := in.NewSlice(int64(lo), int64(hi))
			masked := array.NewStringBuilder(memory.DefaultAllocator)
			emails := part.Column(in.Schema().FieldIndices("email")[0]).(*array.String)
			for i := range emails.Len() {
				if emails.IsNull(i) {
					masked.AppendNull()
					continue
				}
				_, domain, _ := strings.Cut(emails.Value(i), "@")
				masked.Append("***@" + domain)
			}
			cols := append([]arrow.Array{}, part.Columns()...)
			m := masked.NewArray()
			cols[in.Schema().FieldIndices("email")[0]] = m
			out := array.NewRecordBatch(part.Schema(), cols, part.NumRows())
			b.Emit(out)
			out.Release()
			m.Release()
			masked.Release()
			part.Release()
			lo = hi
		}
		return nil
	}

	src, err := faker.New(faker.Config{Rows: 1000, Streams: []string{faker.Customers}})
	if err != nil {
		panic(err)
	}
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	p, err := etl.NewPipeline("crm").
		From(src).
		To(dst).
		Checkpoints(checkpoint.NewMem()).
		Transform(vipsMasked, faker.Customers).
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
	masked := 0
	for _, r := range dst.Rows(faker.Customers) {
		if e, ok := r.Values["email"].(string); ok && strings.HasPrefix(e, "***@") {
			masked++
		}
	}
	fmt.Println("masked emails at the destination:", masked)
	fmt.Println(p.Guarantees()[0].Reason)
	// Output:
	// read 1000, written 137, filtered 863, quarantined 0
	// masked emails at the destination: 107
	// exact replay into a stage-and-apply destination; its rows pass through a Go transform (Builder.Transform), so it delivers what the transform returns, at this level only if the transform is deterministic
}
