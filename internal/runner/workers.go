package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/openetl/etl/engine"
)

// Engine workers: the engine stage runs on up to EngineWorkers goroutines,
// each with an engine of its own, so that a pipeline of several streams
// normalizes them on several cores. A stream belongs to one worker for
// the whole attempt (streams routed into one table share one), so a
// stream's schema evolves in one engine, its rows keep their order, and
// each worker's engine state is exact for its own streams.
//
// Every split's barrier goes to every worker (a split may emit rows of
// any stream); each worker aligns it on its own and passes it to every
// lane. A lane pre-commits once it has the barrier from every worker.
// The splits wait for the barrier's alignment (pump.Record) until the
// last worker aligned it, so no row of the next epoch enters a lane's
// queue before every worker's barrier: the lane's queue alone keeps the
// epochs apart.

// engineWorker is one goroutine of the engine stage and what it owns.
type engineWorker struct {
	idx      int
	eng      engine.Engine
	in       chan pumpMsg
	checked  map[string]*checkedSchema // by table: what a sink.SchemaChecker said
	heldSeen map[heldKey]bool          // holds reported in this attempt
}

// workerStreams assigns the selected streams to engine workers: one group
// per stream, or per routed table for routed streams, in selection order,
// dealt round-robin to min(EngineWorkers, groups) workers. EngineWorkers
// defaults to the number of lanes, up to GOMAXPROCS: a worker's engine
// and a lane's encoding cost about the same per row (faker → Parquet: 0.8
// and 0.9 µs), so one worker per lane keeps the stages even, and a
// second worker feeding one lane only added CPU (5–8% fewer records a
// second on 2 cores). It returns the number of workers and each
// stream's worker.
func (r *runner) workerStreams(streams []string) (int, map[string]int) {
	want := r.cfg.EngineWorkers
	if want <= 0 {
		want = min(r.cfg.Lanes, runtime.GOMAXPROCS(0))
	}
	group := map[string]int{}
	of := make(map[string]int, len(streams))
	var groups int
	for _, s := range streams {
		key := "stream\x00" + s
		if rt := r.router.table(s); rt != nil {
			key = "table\x00" + rt.table
		}
		g, ok := group[key]
		if !ok {
			g = groups
			group[key] = g
			groups++
		}
		of[s] = g
	}
	n := max(1, min(want, groups))
	for s, g := range of {
		of[s] = g % n
	}
	return n, of
}

// startWorkers makes the attempt's engine workers: the first uses the
// engine setUp made, the others engines of their own from the same state
// and configuration.
func (r *runner) startWorkers() error {
	n, of := r.workerStreams(r.streams)
	r.workerOf = of
	r.workers = make([]*engineWorker, n)
	r.toEngine = make([]chan pumpMsg, n)
	for i := range r.workers {
		eng := r.eng
		if i > 0 {
			var err error
			if eng, err = r.newEngine(r.catalog, r.streams, r.cfg.Destination.Capabilities()); err != nil {
				r.closeWorkers()
				return err
			}
		}
		r.toEngine[i] = make(chan pumpMsg, 4)
		r.workers[i] = &engineWorker{idx: i, eng: eng, in: r.toEngine[i], checked: map[string]*checkedSchema{}, heldSeen: map[heldKey]bool{}}
	}
	r.align.parts = make([]*epochInfo, n)
	return nil
}

// closeWorkers closes the engines startWorkers made (not setUp's).
func (r *runner) closeWorkers() {
	for i, w := range r.workers {
		if i > 0 && w != nil {
			w.eng.Close()
		}
	}
}

// workerFor returns the index of stream's engine worker.
func (r *runner) workerFor(stream string) int {
	return r.workerOf[stream] // 0 for a stream not selected: the engine refuses it
}

// aligner joins the workers' halves of an epoch's alignment.
type aligner struct {
	mu    sync.Mutex
	parts []*epochInfo // by worker; nil: not aligned yet
	got   int
}

// add records worker w's info for its epoch and returns the whole
// epoch's info once every worker has added its own; nil before.
func (r *runner) alignPart(w int, info *epochInfo) (*epochInfo, error) {
	a := &r.align
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.parts[w] != nil {
		return nil, fmt.Errorf("pipeline: internal error: engine worker %d aligned epoch %d twice", w, info.epoch)
	}
	a.parts[w] = info
	a.got++
	if a.got < len(a.parts) {
		return nil, nil
	}
	parts := a.parts
	a.parts, a.got = make([]*epochInfo, len(parts)), 0
	return r.mergeParts(parts)
}

// mergeParts makes one epoch's info of the workers' parts: the split
// states (every worker saw every split's barrier), the sum of counts and
// side files, and the engine state with each stream's schema from the
// worker it belongs to.
func (r *runner) mergeParts(parts []*epochInfo) (*epochInfo, error) {
	if len(parts) == 1 {
		return parts[0], nil
	}
	out := &epochInfo{epoch: parts[0].epoch, states: parts[0].states, side: map[sideKey][]byte{}}
	states := make([][]byte, len(parts))
	for i, p := range parts {
		if p.epoch != out.epoch {
			return nil, fmt.Errorf("pipeline: internal error: engine workers aligned epochs %d and %d together", out.epoch, p.epoch)
		}
		states[i] = p.engine
		out.counts = addCounts(out.counts, p.counts)
		for k, b := range p.side {
			out.side[k] = append(out.side[k], b...)
		}
	}
	st, err := mergeEngineStates(states, r.workerFor)
	if err != nil {
		return nil, fmt.Errorf("engine state at epoch %d: %w", out.epoch, err)
	}
	out.engine = st
	return out, nil
}

// mergeEngineStates joins the engine states of the workers: the state's
// streams list ({"version":1,"streams":[{"name":...},...]}, sorted by
// name) takes each stream from the worker owner names, and a stream no
// worker pushed (one not selected) from the first worker, whose copy is
// the one every worker started from. States that are all equal are
// returned as they are, whatever their form.
func mergeEngineStates(states [][]byte, owner func(stream string) int) ([]byte, error) {
	same := true
	for _, s := range states[1:] {
		same = same && bytes.Equal(s, states[0])
	}
	if same {
		return states[0], nil
	}
	type named struct {
		Name string `json:"name"`
	}
	var top map[string]json.RawMessage
	byName := map[string]json.RawMessage{}
	for w, s := range states {
		var t map[string]json.RawMessage
		var list []json.RawMessage
		if err := json.Unmarshal(s, &t); err != nil {
			return nil, fmt.Errorf("merge the engine workers' states: %w", err)
		}
		if err := json.Unmarshal(t["streams"], &list); err != nil || t["streams"] == nil {
			return nil, fmt.Errorf("merge the engine workers' states: worker %d's state has no streams list", w)
		}
		if w == 0 {
			top = t
		}
		for _, raw := range list {
			var n named
			if err := json.Unmarshal(raw, &n); err != nil || n.Name == "" {
				return nil, fmt.Errorf("merge the engine workers' states: worker %d's state has a stream without a name", w)
			}
			if _, ok := byName[n.Name]; !ok && w == 0 || owner(n.Name) == w {
				byName[n.Name] = raw
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	list := make([]json.RawMessage, len(names))
	for i, n := range names {
		list[i] = byName[n]
	}
	// As the engine writes them: no HTML escapes (a stream named "a<b"
	// keeps its bytes).
	b, err := marshalPlain(list)
	if err != nil {
		return nil, err
	}
	top["streams"] = b
	return marshalPlain(top)
}

// marshalPlain is json.Marshal without HTML escaping and without the
// trailing newline of an Encoder.
func marshalPlain(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
