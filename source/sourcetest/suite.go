package sourcetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openetl/etl/source"
)

// Names of the suite's checks: each is a subtest of Run, and a key of
// Options.Skip. doc.go says what each one checks.
const (
	CheckDiscover     = "Discover"
	CheckReplay       = "Replay"
	CheckOpen         = "Open"
	CheckOpenSubset   = "OpenSubset"
	CheckRead         = "Read"
	CheckResume       = "Resume"
	CheckCancel       = "Cancel"
	CheckEmitterError = "EmitterError"
	CheckCorruptState = "CorruptState"
	CheckAck          = "Ack"
)

// Defaults of Options.
const (
	DefaultMaxRecords    = 1000
	DefaultResumeSamples = 6
	DefaultTimeout       = 30 * time.Second
	DefaultCancelTimeout = 5 * time.Second
)

// Options tune Run. The zero value checks every stream of the catalog.
type Options struct {
	// Streams are the streams the suite opens, a subset of the catalog.
	// Default: every stream Discover reports.
	Streams []string

	// MaxRecords bounds each Read the suite makes, per split, so that a
	// large or unbounded source stays testable: once a split has emitted
	// MaxRecords records the suite stops it at its next resume point (the
	// Emitter returns an error there, which Read must return). A split
	// that emits 10×MaxRecords more records without a resume point fails
	// the check. Default 1000.
	MaxRecords int

	// ResumeSamples is how many of each split's resume points the Resume
	// check reopens from: always the first and the last, the rest evenly
	// spaced. Default 6.
	ResumeSamples int

	// Timeout bounds each Read and each Open, Discover and Ack call.
	// Default 30s.
	Timeout time.Duration

	// CancelTimeout is how soon Read must return once its context is
	// cancelled or an Emitter method has failed. Default 5s.
	CancelTimeout time.Duration

	// IgnoresResumeState says the source ignores resume states (it always
	// reads from its current position, as a ReplayNone source may): the
	// CorruptState check is skipped. Default false.
	IgnoresResumeState bool

	// CorruptStates are the states the CorruptState check gives Open in
	// place of a real one, each of which Open (or Read) must reject.
	// Default: the byte 0xff, a line of garbage, and a real state with
	// garbage appended.
	CorruptStates [][]byte

	// Live says the source's data may grow while the suite runs: a
	// reopened bounded Read may then emit records past the end of the
	// first one. Default false: the suite expects a bounded read from a
	// resume state to end exactly where the first one did (ReplayExact).
	Live bool

	// Skip maps check names (the Check constants) to the reason they are
	// skipped; the reason is printed by t.Skip. Use it for a known bug
	// while it is being fixed, and say so in the reason.
	Skip map[string]string
}

func (o Options) withDefaults() Options {
	if o.MaxRecords <= 0 {
		o.MaxRecords = DefaultMaxRecords
	}
	if o.ResumeSamples <= 0 {
		o.ResumeSamples = DefaultResumeSamples
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.CancelTimeout <= 0 {
		o.CancelTimeout = DefaultCancelTimeout
	}
	return o
}

type check struct {
	name string
	run  func(s *suite)
}

var checks = []check{
	{CheckDiscover, (*suite).checkDiscover},
	{CheckReplay, (*suite).checkReplay},
	{CheckOpen, (*suite).checkOpen},
	{CheckOpenSubset, (*suite).checkOpenSubset},
	{CheckRead, (*suite).checkRead},
	{CheckResume, (*suite).checkResume},
	{CheckCancel, (*suite).checkCancel},
	{CheckEmitterError, (*suite).checkEmitterError},
	{CheckCorruptState, (*suite).checkCorruptState},
	{CheckAck, (*suite).checkAck},
}

// Run runs the conformance checks against the sources newSource returns,
// each check in a subtest of t named after it (see the Check constants and
// doc.go). newSource is called at least once per check, and again for
// every reopen that stands for a restart; every call must return a source
// over the same data, configured the same way. Clean up with t.Cleanup.
func Run(t *testing.T, newSource func(t *testing.T) source.Source, opts Options) {
	t.Helper()
	opts = opts.withDefaults()
	known := make(map[string]bool)
	for _, c := range checks {
		known[c.name] = true
	}
	for name := range opts.Skip {
		if !known[name] {
			t.Errorf("sourcetest: Options.Skip names unknown check %q", name)
		}
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if reason, ok := opts.Skip[c.name]; ok {
				t.Skipf("skipped by Options.Skip: %s", reason)
			}
			c.run(&suite{t: t, newSource: newSource, opts: opts})
		})
	}
}

// suite is one check's context.
type suite struct {
	t         *testing.T
	newSource func(t *testing.T) source.Source
	opts      Options
}

// fresh returns a new source, its catalog and the streams to open.
func (s *suite) fresh() (source.Source, source.Catalog, []string) {
	s.t.Helper()
	src := s.newSource(s.t)
	if src == nil {
		s.t.Fatal("newSource returned nil")
	}
	cat := s.discover(src)
	streams := s.opts.Streams
	if len(streams) == 0 {
		for _, st := range cat.Streams {
			streams = append(streams, st.Name)
		}
	}
	for _, name := range streams {
		if _, ok := cat.Stream(name); !ok {
			s.t.Fatalf("Options.Streams names %q, which Discover does not report", name)
		}
	}
	if len(streams) == 0 {
		s.t.Fatal("Discover reported no streams: nothing to read")
	}
	return src, cat, streams
}

func (s *suite) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	s.t.Cleanup(cancel)
	return ctx
}

func (s *suite) discover(src source.Source) source.Catalog {
	s.t.Helper()
	cat, err := src.Discover(s.ctx())
	if err != nil {
		s.t.Fatalf("Discover: %v", err)
	}
	return cat
}

func (s *suite) open(src source.Source, streams []string, resume map[source.SplitID][]byte) []source.Split {
	s.t.Helper()
	splits, err := src.Open(s.ctx(), streams, resume)
	if err != nil {
		s.t.Fatalf("Open(%q, %d resume states): %v", streams, len(resume), err)
	}
	if len(splits) == 0 {
		s.t.Fatalf("Open(%q) returned no splits: nothing to read", streams)
	}
	return splits
}

// validStreamName applies the rules of source.Stream's Name doc; the
// runner rejects a catalog that breaks them.
func validStreamName(n string) string {
	switch {
	case n == "":
		return "is empty"
	case len(n) > 200:
		return "is longer than 200 bytes"
	case n[0] == '.' || n[0] == '_':
		return "starts with '.' or '_'"
	case strings.HasSuffix(n, ".lock"):
		return `ends in ".lock"`
	}
	for _, c := range n {
		if c == '/' || c == '\\' {
			return "contains '/' or '\\'"
		}
		if c < 0x20 || c == 0x7f {
			return "contains a control character"
		}
	}
	return ""
}

func (s *suite) checkDiscover() {
	t := s.t
	src := s.newSource(t)
	c1 := s.discover(src)
	if len(c1.Streams) == 0 {
		t.Error("Discover reported no streams")
	}
	seen := make(map[string]bool)
	for _, st := range c1.Streams {
		if why := validStreamName(st.Name); why != "" {
			t.Errorf("stream name %q %s", st.Name, why)
		}
		if seen[st.Name] {
			t.Errorf("stream name %q is reported twice", st.Name)
		}
		seen[st.Name] = true
		for i, k := range st.PrimaryKey {
			if k == "" {
				t.Errorf("stream %q: primary key field %d is empty", st.Name, i)
			}
		}
	}
	c2 := s.discover(src)
	if !reflect.DeepEqual(c1, c2) {
		t.Errorf("Discover is not stable across calls:\nfirst:  %+v\nsecond: %+v", c1, c2)
	}
	c3 := s.discover(s.newSource(t))
	if !reflect.DeepEqual(c1, c3) {
		t.Errorf("Discover differs between two sources from newSource:\nfirst:  %+v\nsecond: %+v", c1, c3)
	}
}

func (s *suite) checkReplay() {
	t := s.t
	src, _, streams := s.fresh()
	r := src.Replay()
	switch r {
	case source.ReplayNone, source.ReplaySuperset, source.ReplayExact:
	default:
		t.Errorf("Replay() = %v, not a defined class", r)
	}
	_ = s.readAll(src, streams, nil, s.opts.MaxRecords)
	if r2 := src.Replay(); r2 != r {
		t.Errorf("Replay() changed from %v to %v after a read", r, r2)
	}
	if r3 := s.newSource(t).Replay(); r3 != r {
		t.Errorf("Replay() is %v on one source and %v on another from newSource", r, r3)
	}
}

func splitIDs(splits []source.Split) []source.SplitID {
	ids := make([]source.SplitID, len(splits))
	for i, sp := range splits {
		ids[i] = sp.ID()
	}
	return ids
}

func (s *suite) checkOpen() {
	t := s.t
	src, _, streams := s.fresh()
	ids := splitIDs(s.open(src, streams, nil))
	seen := make(map[source.SplitID]bool)
	for _, id := range ids {
		if id == "" {
			t.Error("Open returned a split with an empty ID")
		}
		if seen[id] {
			t.Errorf("Open returned split ID %q twice", id)
		}
		seen[id] = true
	}
	sorted := func(x []source.SplitID) []source.SplitID { x = slices.Clone(x); slices.Sort(x); return x }
	again := splitIDs(s.open(src, streams, nil))
	if !slices.Equal(sorted(ids), sorted(again)) {
		t.Errorf("split IDs are not stable across Opens: %q then %q", ids, again)
	}
	other, _, _ := s.fresh()
	if third := splitIDs(s.open(other, streams, nil)); !slices.Equal(sorted(ids), sorted(third)) {
		t.Errorf("split IDs differ between two sources from newSource: %q and %q", ids, third)
	}
}

func (s *suite) checkOpenSubset() {
	t := s.t
	src, _, streams := s.fresh()
	if len(streams) < 2 {
		t.Skip("needs at least two streams")
	}
	for _, name := range streams {
		t.Run(name, func(t *testing.T) {
			sub := &suite{t: t, newSource: s.newSource, opts: s.opts}
			for id, tr := range sub.readAll(src, []string{name}, nil, s.opts.MaxRecords) {
				for _, r := range tr.records() {
					if r.stream != name {
						t.Errorf("split %q, opened for stream %q only, emitted a record of %q", id, name, r.stream)
						break
					}
				}
			}
		})
	}
}

func (s *suite) checkAck() {
	t := s.t
	src, _, streams := s.fresh()
	acker, ok := src.(source.Acker)
	if !ok {
		t.Skip("the source does not implement source.Acker")
	}
	traces := s.readAll(src, streams, nil, s.opts.MaxRecords)
	first := make(map[source.SplitID][]byte)
	last := make(map[source.SplitID][]byte)
	for id, tr := range traces {
		rps := tr.resumePoints()
		if len(rps) == 0 {
			continue
		}
		first[id] = tr.events[rps[0]].state
		last[id] = tr.events[rps[len(rps)-1]].state
	}
	if len(last) == 0 {
		t.Fatal("no split emitted a resume point: nothing to acknowledge")
	}
	if err := acker.Ack(s.ctx(), first); err != nil {
		t.Errorf("Ack of each split's first resume state: %v", err)
	}
	if err := acker.Ack(s.ctx(), last); err != nil {
		t.Errorf("Ack of each split's last resume state: %v", err)
	}
}

// describe prints a record for failure messages, keeping payloads short.
func (e event) String() string {
	if e.rp {
		return fmt.Sprintf("resume point %q", short(e.state))
	}
	return fmt.Sprintf("%s %v seq=%d key=%q payload=%q", e.stream, e.op, e.seq, short(e.key), short(e.payload))
}

func short(b []byte) []byte {
	if len(b) > 80 {
		return append(slices.Clone(b[:77]), "..."...)
	}
	return b
}
