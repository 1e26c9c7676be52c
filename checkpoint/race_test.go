package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/openetl/etl/checkpoint"
)

const racers = 16

// race runs f(i) for i in 0..racers-1 at once and returns the results.
func race[T any](f func(i int) T) []T {
	out := make([]T, racers)
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	ready.Add(racers)
	for i := range racers {
		wg.Go(func() {
			ready.Done()
			<-start
			out[i] = f(i)
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	return out
}

func TestRaceClaim(t *testing.T) {
	cases := append(backends(), backend{
		// Several stores on one directory: the flock must exclude them
		// from each other as it does processes.
		name: "file, store per goroutine",
	})
	for _, b := range cases {
		t.Run(b.name, func(t *testing.T) {
			var stores [racers]checkpoint.Store
			if b.open != nil {
				s := b.open(t)
				for i := range stores {
					stores[i] = s
				}
			} else {
				dir := t.TempDir()
				for i := range stores {
					stores[i] = openDir(t, dir)
				}
			}
			type result struct {
				gen checkpoint.Generation
				err error
			}
			res := race(func(i int) result {
				gen, _, err := stores[i].Claim(context.Background(), "p")
				return result{gen, err}
			})
			seen := make(map[checkpoint.Generation]bool)
			for _, r := range res {
				if r.err != nil {
					t.Fatal(r.err)
				}
				if seen[r.gen] || r.gen < 1 || r.gen > racers {
					t.Fatalf("generations %v: %d repeated or out of 1..%d", res, r.gen, racers)
				}
				seen[r.gen] = true
			}
			if gen, _ := claim(t, stores[0], "p"); gen != racers+1 {
				t.Fatalf("Claim after the race = %d, want %d", gen, racers+1)
			}
		})
	}
}

func TestRaceCommit(t *testing.T) {
	tests := []struct {
		name string
		// rec returns racer i's record following prev.
		rec func(i int, gen checkpoint.Generation, prev *checkpoint.Record) *checkpoint.Record
	}{
		{"distinct epochs", func(i int, gen checkpoint.Generation, prev *checkpoint.Record) *checkpoint.Record {
			r := next("p", gen, prev)
			r.Epoch += uint64(i)
			return r
		}},
		{"same epoch, distinct content", func(i int, gen checkpoint.Generation, prev *checkpoint.Record) *checkpoint.Record {
			r := next("p", gen, prev)
			r.Engine = fmt.Appendf(nil, "racer %d", i)
			return r
		}},
	}
	for _, b := range backends() {
		for _, tc := range tests {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				s := b.open(t)
				gen, _ := claim(t, s, "p")
				first := commit(t, s, gen, nil)
				recs := make([]*checkpoint.Record, racers)
				for i := range recs {
					recs[i] = tc.rec(i, gen, first)
				}
				errs := race(func(i int) error { return s.Commit(context.Background(), gen, recs[i]) })
				winner := -1
				for i, err := range errs {
					switch {
					case err == nil && winner >= 0:
						t.Fatalf("racers %d and %d both committed", winner, i)
					case err == nil:
						winner = i
					case !errors.Is(err, checkpoint.ErrConflict):
						t.Fatalf("racer %d: %v, want nil or ErrConflict", i, err)
					}
				}
				if winner < 0 {
					t.Fatal("no racer committed")
				}
				head := headOf(t, s, "p")
				equalRef(t, "HEAD", head, recs[winner])
				if string(head.Engine) != string(recs[winner].Engine) {
					t.Fatalf("HEAD record Engine = %q, want the winner's %q", head.Engine, recs[winner].Engine)
				}
			})
		}
	}
}
