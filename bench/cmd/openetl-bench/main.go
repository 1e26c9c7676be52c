// Command openetl-bench is OpenETL's side of the side-by-side benchmarks
// (issue #11, scripts/bench-compare.sh): one scenario per invocation,
// through the public API only, printing one JSON object on stdout with
// the rows moved, the timed section's wall seconds, its CPU seconds
// (getrusage of this process), the peak RSS (VmHWM) and what the output
// checks need (the Parquet files written, or a checksum over ids).
//
//	openetl-bench pg-snapshot -dsn D -table T -out DIR     # Postgres → Parquet
//	openetl-bench pg-copy -dsn D -table T                  # the ceiling: COPY binary → discard
//	openetl-bench pg-cdc -dsn D -table T -slot S -out DIR    # run twice: slot, then catch-up → Parquet
//	openetl-bench pg-cdc-ceiling -dsn D -slot S -pub P -to LSN # bare pglogrepl receive-and-parse loop
//	openetl-bench mysql-cdc -dsn D -table T -out DIR       # run twice: position, then binlog catch-up → Parquet
//	openetl-bench mysql-ceiling -dsn D -from F:P -to F:P   # bare BinlogSyncer decode loop
//	openetl-bench kafka-produce -brokers B -topic T -n N -ndjson F [-registry URL] # -registry: Avro
//	openetl-bench kafka -brokers B -topic T -out DIR [-registry URL] # Kafka → Parquet (-registry: Avro)
//	openetl-bench kafka -kfake -n N -out DIR               # same, in-process kfake
//	openetl-bench kafka-ceiling -brokers B -topic T -n N   # franz-go fetch-and-discard
//	openetl-bench arrow-parquet -n N -out DIR [-plain]     # Arrow batches → Parquet sink (or pqarrow alone)
//	openetl-bench arrow-clickhouse -n N [-plain] [-store]  # Arrow batches → ClickHouse sink (or clickhouse-go alone)
//	openetl-bench arrow-postgres -n N [-plain] [-mode merge] # Arrow batches → Postgres sink (or pgx CopyFrom alone)
//	openetl-bench kafka-clickhouse -brokers B -topic T -n N -out DIR [-plain] # Kafka JSON → ClickHouse MergeTree (or franz-go + clickhouse-go)
//	openetl-bench check-jsonl -file F [-wait N]            # count and id checksum of JSON lines
//
// OPENETL_BENCH_CPUPROFILE=FILE writes a CPU profile of the whole run
// (go tool pprof FILE). It is a benchmark harness, not part of the
// library.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: openetl-bench SCENARIO [flags]; scenarios: pg-snapshot pg-copy pg-cdc pg-cdc-ceiling mysql-cdc mysql-ceiling kafka-produce kafka kafka-ceiling kfake-serve arrow-parquet arrow-clickhouse arrow-postgres kafka-clickhouse check-jsonl")
		os.Exit(2)
	}
	cmds := map[string]func([]string) (*result, error){
		"pg-snapshot":      pgSnapshot,
		"pg-copy":          pgCopy,
		"pg-cdc":           pgCDC,
		"mysql-cdc":        mysqlCDC,
		"mysql-ceiling":    mysqlCeiling,
		"kafka-produce":    kafkaProduce,
		"kafka":            kafkaPipeline,
		"kafka-ceiling":    kafkaCeiling,
		"kfake-serve":      kfakeServe,
		"check-jsonl":      checkJSONL,
		"arrow-parquet":    arrowParquet,
		"arrow-clickhouse": arrowClickHouse,
		"arrow-postgres":   arrowPostgres,
		"kafka-clickhouse": kafkaClickHouse,
		"pg-cdc-ceiling":   pgCDCCeiling,
	}
	f, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "openetl-bench: unknown scenario %q\n", os.Args[1])
		os.Exit(2)
	}
	if path := os.Getenv("OPENETL_BENCH_CPUPROFILE"); path != "" {
		pf, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(pf)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "openetl-bench: OPENETL_BENCH_CPUPROFILE: %v\n", err)
			os.Exit(1)
		}
		defer pf.Close()
	}
	res, err := f(os.Args[2:])
	pprof.StopCPUProfile()
	if err != nil {
		fmt.Fprintf(os.Stderr, "openetl-bench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(1)
	}
}

// result is what every scenario prints.
type result struct {
	Rows    int64            `json:"rows"`
	Seconds float64          `json:"seconds"`
	CPU     float64          `json:"cpu_seconds"`
	RSSMB   float64          `json:"peak_rss_mb"`
	Files   []string         `json:"files,omitempty"`
	Check   *idSum           `json:"check,omitempty"`
	Note    string           `json:"note,omitempty"`
	Ops     map[string]int64 `json:"ops,omitempty"`
	Server  *chServer        `json:"server,omitempty"`
}

// timer measures one timed section: wall time and this process's CPU.
type timer struct {
	t0  time.Time
	cpu float64
}

func cpuNow() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func startTimer() timer { return timer{t0: time.Now(), cpu: cpuNow()} }

func (t timer) stop(rows int64) *result {
	return &result{Rows: rows, Seconds: time.Since(t.t0).Seconds(), CPU: cpuNow() - t.cpu, RSSMB: vmHWM()}
}

// vmHWM is this process's peak resident set in MB, 0 when unknown.
func vmHWM() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// idSum checks a set of ids against 1..N: equal when Count == Distinct ==
// N, Min == 1 and Max == N (then Sum is N(N+1)/2 as well).
type idSum struct {
	Count    int64 `json:"count"`
	Distinct int64 `json:"distinct"`
	Min      int64 `json:"min"`
	Max      int64 `json:"max"`
	Sum      int64 `json:"sum"`
	Bad      int64 `json:"bad_lines,omitempty"`
	seen     []uint64
}

func newIDSum(n int64) *idSum { return &idSum{Min: -1, seen: make([]uint64, n/64+1)} }

func (s *idSum) add(id int64) {
	s.Count++
	s.Sum += id
	if s.Min < 0 || id < s.Min {
		s.Min = id
	}
	if id > s.Max {
		s.Max = id
	}
	if id >= 0 && id/64 < int64(len(s.seen)) {
		w, bit := &s.seen[id/64], uint64(1)<<(id%64)
		if *w&bit == 0 {
			*w |= bit
			s.Distinct++
		}
	}
}
