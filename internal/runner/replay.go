package runner

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/source"
)

// Quarantine replay: an attempt whose only split reads the published
// quarantine files of one stream (QuarantineName) back and emits their
// records, with their original op, seq, key and payload, through the
// pump, the engine and the lanes like any split's. Which lines were
// replayed is the split's resume state, which the epoch's record keeps
// (checkpoint.Record.Replay) with the data it wrote: so a crash repeats
// nothing committed, and a line once replayed, written or quarantined
// again in the replay's epoch (with its new reason), is never selected
// again. A replay attempt opens no source split, acknowledges nothing,
// leaves every split's resume state as it was, and never ends a full
// refresh (its records are never Final).

// ReplaySelection selects the quarantined records of a stream that
// Replay puts through the engine again (etl.Replay documents it for
// hosts).
type ReplaySelection struct {
	Stream string
	// Reasons selects records set aside for one of these reasons; empty:
	// any reason.
	Reasons []string
	// FromEpoch and ToEpoch bound the epochs whose quarantine files are
	// read, inclusive; 0: unbounded.
	FromEpoch, ToEpoch uint64

	// upTo is HEAD's epoch when the Replay's first attempt began, fixed
	// for its retries: the files of the Replay's own epochs hold lines
	// it quarantined again, which are a later Replay's to select.
	upTo  uint64
	fixed bool
}

// ReplaySplitID is the ID of a replay attempt's split, in its status and
// events.
const ReplaySplitID source.SplitID = "_openetl.replay"

// Replay runs one bounded attempt that replays the records sel selects
// (see ReplaySelection) instead of reading the source, and returns its
// Result: Streams[sel.Stream].Replayed records went through the engine,
// Written of them (after the stream's transform, if any) were written
// and Quarantined set aside again. It needs a store that lists files
// (checkpoint.FileLister) and an append stream: a replayed version is
// older than what a merge or overwrite table may hold since. No
// Steps run.
func Replay(ctx context.Context, cfg Config, sel ReplaySelection) (Result, error) {
	if sel.Stream == "" {
		return Result{}, fmt.Errorf("replay: no stream: %w", delivery.ErrInvalid)
	}
	if sel.ToEpoch != 0 && sel.FromEpoch > sel.ToEpoch {
		return Result{}, fmt.Errorf("replay: epochs %d to %d: an empty range: %w", sel.FromEpoch, sel.ToEpoch, delivery.ErrInvalid)
	}
	if m := cfg.Modes[sel.Stream]; m != delivery.Append {
		return Result{}, fmt.Errorf("replay: stream %q: write mode %v: only append streams can replay (a replayed version may be older than the row a merge or overwrite table holds since): %w", sel.Stream, m, delivery.ErrInvalid)
	}
	if _, ok := cfg.Store.(checkpoint.FileLister); !ok {
		return Result{}, fmt.Errorf("replay: the checkpoint store can't list files (checkpoint.FileLister): %w", errors.ErrUnsupported)
	}
	sel.Reasons = slices.Clone(sel.Reasons)
	cfg.replay = &sel
	cfg.Steps = nil
	return attempts(ctx, cfg, true)
}

// replayState is the replay split's resume state: by quarantine file,
// the lines (0-based, half-open ranges, sorted and apart) replayed in
// committed epochs.
type replayState struct {
	V    int                 `json:"v"`
	Done map[string][][2]int `json:"done,omitempty"`
}

func parseReplayState(b []byte) (replayState, error) {
	st := replayState{V: 1, Done: map[string][][2]int{}}
	if len(b) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("replay: the checkpoint's replay state: %w", err)
	}
	if st.V != 1 {
		return st, fmt.Errorf("replay: the checkpoint's replay state has version %d; this library knows 1", st.V)
	}
	if st.Done == nil {
		st.Done = map[string][][2]int{}
	}
	return st, nil
}

// has reports whether line i of file is in rs.
func has(rs [][2]int, i int) bool {
	k, _ := slices.BinarySearchFunc(rs, i, func(r [2]int, i int) int {
		if r[1] <= i {
			return -1
		}
		if r[0] > i {
			return 1
		}
		return 0
	})
	return k < len(rs) && rs[k][0] <= i && i < rs[k][1]
}

// add returns rs with line i in it, merging neighbouring ranges.
func add(rs [][2]int, i int) [][2]int {
	k, _ := slices.BinarySearchFunc(rs, i, func(r [2]int, i int) int {
		if r[1] < i {
			return -1
		}
		if r[0] > i {
			return 1
		}
		return 0
	})
	switch {
	case k < len(rs) && rs[k][0] <= i && i < rs[k][1]:
		return rs // in already
	case k < len(rs) && rs[k][1] == i: // extends rs[k] at its end
		rs[k][1]++
		if k+1 < len(rs) && rs[k+1][0] == rs[k][1] {
			rs[k][1] = rs[k+1][1]
			rs = slices.Delete(rs, k+1, k+2)
		}
		return rs
	case k < len(rs) && rs[k][0] == i+1: // extends rs[k] at its start
		rs[k][0] = i
		return rs
	}
	return slices.Insert(rs, k, [2]int{i, i + 1})
}

// replaySplit is the split of a replay attempt.
type replaySplit struct {
	store    checkpoint.Store
	pipeline string
	sel      ReplaySelection
	upTo     uint64 // HEAD's epoch: later files belong to epochs a rewind undid
	state    replayState
}

func (s *replaySplit) ID() source.SplitID { return ReplaySplitID }

// replayEvery is how many records the split emits between resume
// points: a resume point's state is the whole replayState.
const replayEvery = 512

func (s *replaySplit) Read(ctx context.Context, e source.Emitter, _ bool) error {
	prefix := "_quarantine/" + s.sel.Stream + "/"
	names, err := s.store.(checkpoint.FileLister).ListFiles(ctx, s.pipeline, prefix)
	if err != nil {
		return fmt.Errorf("replay: list %s: %w", prefix, err)
	}
	pending := 0 // records emitted since the last resume point
	for _, name := range names {
		epoch, ok := quarantineEpoch(name, prefix)
		if !ok || epoch > s.upTo || epoch < s.sel.FromEpoch || s.sel.ToEpoch != 0 && epoch > s.sel.ToEpoch {
			continue
		}
		data, err := s.store.ReadFile(ctx, s.pipeline, name)
		if err != nil {
			return fmt.Errorf("replay: read %s: %w", name, err)
		}
		done := s.state.Done[name]
		for i := 0; len(data) > 0; i++ {
			var line []byte
			line, data, _ = bytes.Cut(data, []byte("\n"))
			if len(line) == 0 || has(done, i) {
				continue
			}
			rec, ok, err := s.parse(line)
			if err != nil {
				return fmt.Errorf("replay: %s line %d: %w", name, i+1, err)
			}
			if !ok {
				continue
			}
			if err := e.Record(s.sel.Stream, rec.op, rec.seq, rec.key, rec.payload); err != nil {
				return err
			}
			done = add(done, i)
			s.state.Done[name] = done
			if pending++; pending >= replayEvery {
				if err := e.ResumePoint(s.encode()); err != nil {
					return err
				}
				pending = 0
			}
		}
		if pending > 0 {
			if err := e.ResumePoint(s.encode()); err != nil {
				return err
			}
			pending = 0
		}
	}
	return nil
}

func (s *replaySplit) encode() []byte {
	b, _ := json.Marshal(s.state) // ints and strings: cannot fail
	return b
}

type replayRecord struct {
	op           source.Op
	seq          int64
	key, payload []byte
}

// parse reads one quarantine line; ok is false for a line the selection
// leaves out (another reason, a row a transform rejected).
func (s *replaySplit) parse(line []byte) (rec replayRecord, ok bool, err error) {
	var l quarantineLine
	if err := json.Unmarshal(line, &l); err != nil {
		return rec, false, err
	}
	if l.RejectedBy != "" {
		// The line holds the row as the transform got it, not the
		// source's record: it can't go through the engine again.
		return rec, false, nil
	}
	if len(s.sel.Reasons) > 0 && !slices.Contains(s.sel.Reasons, l.Reason) {
		return rec, false, nil
	}
	switch l.Op {
	case "insert":
		rec.op = source.OpInsert
	case "update":
		rec.op = source.OpUpdate
	case "delete":
		rec.op = source.OpDelete
	default:
		return rec, false, fmt.Errorf("op %q", l.Op)
	}
	rec.seq = l.Seq
	if rec.key, err = fromTextOrBase64(l.Key, l.KeyBase64); err != nil {
		return rec, false, fmt.Errorf("key_base64: %w", err)
	}
	if rec.payload, err = fromTextOrBase64(l.Payload, l.PayloadBase64); err != nil {
		return rec, false, fmt.Errorf("payload_base64: %w", err)
	}
	return rec, true, nil
}

func fromTextOrBase64(text, b64 string) ([]byte, error) {
	switch {
	case b64 != "":
		return base64.StdEncoding.DecodeString(b64)
	case text != "":
		return []byte(text), nil
	}
	return nil, nil
}

// quarantineEpoch returns the epoch of a published quarantine file's
// name (QuarantineName) under prefix.
func quarantineEpoch(name, prefix string) (uint64, bool) {
	base, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(base, ".jsonl")
	if !ok || len(digits) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}
