package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/openetl/etl/checkpoint"
)

// An attempt claims the pipeline, commits epochs on top of HEAD, and is
// fenced once a newer attempt claims it.
func Example() {
	ctx := context.Background()
	store := checkpoint.NewMem() // or checkpoint.Open(ctx, "file:///var/lib/etl")
	defer store.Close(ctx)

	gen, head, _ := store.Claim(ctx, "orders")
	fmt.Println("generation", gen, "resumes from", head)

	rec := &checkpoint.Record{
		Pipeline:     "orders",
		Epoch:        1,
		Generation:   gen,
		Time:         time.Now(),
		Resume:       map[string][]byte{"orders/0": []byte("lsn 0/16B3748")},
		Committables: [][]byte{[]byte("staged files")},
	}
	if err := store.Commit(ctx, gen, rec); err != nil {
		fmt.Println(err)
	}

	newer, head, _ := store.Claim(ctx, "orders") // another copy starts
	fmt.Println("generation", newer, "resumes from", head.Ref())

	next := *rec
	prev := rec.Ref()
	next.Epoch, next.Prev = 2, &prev
	err := store.Commit(ctx, gen, &next)
	fmt.Println("old attempt fenced:", errors.Is(err, checkpoint.ErrFenced))
	// Output:
	// generation 1 resumes from <nil>
	// generation 2 resumes from epoch 1 (generation 1)
	// old attempt fenced: true
}
