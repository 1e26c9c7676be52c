// Package faker is a source of deterministic generated data for demos,
// tests and benchmarks. It uses nothing but the source contract, like any
// connector a user writes.
//
// It generates two JSON streams keyed by "id":
//
//   - customers: change data capture of customer rows (id, name, email,
//     country, score, vip, signup, tags): mostly inserts of new customers,
//     with updates (about 1 record in 8) and deletes (about 1 in 40) of
//     earlier ones. Updates only touch customers that are never deleted.
//   - orders: order rows (id, customer_id, amount, currency, status, items,
//     placed_at): inserts, with status updates of earlier orders (about 1
//     in 5).
//
// Record i of a stream is a pure function of (seed, stream, i), with seq
// i+1, so a split reopened from a resume state (the next index) replays
// exactly the records after it: Replay is source.ReplayExact. Tests and
// the simulation compute what a read must produce with Source.Generate and
// Source.Expected instead of storing it.
//
// A stream holds Config.Rows records, striped over Config.SplitsPerStream
// splits named "<stream>/<k>". A bounded Read stops at the end; an
// unbounded one waits there until its context ends. Its splits report
// neither lag nor snapshot progress.
//
//	src, err := faker.New(faker.Config{Seed: 7, Rows: 1_000_000, MalformedShare: 0.01})
//	if err != nil { ... }
//	op, seq, key, payload := src.Generate(faker.Orders, 41, nil)
package faker
