package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/openetl/etl/source"
)

// Errors returned by this package, wrapped with the details.
var (
	// ErrConfig is returned by New when a Config field is invalid; the
	// message names the field.
	ErrConfig = errors.New("kafka: invalid config")
	// ErrUnknownTopic is returned by Discover and Open when a listed
	// topic does not exist, and by Open for a stream not in the catalog.
	ErrUnknownTopic = errors.New("kafka: unknown topic")
	// ErrState is returned by Open when a saved resume state cannot be
	// decoded; the message names the split.
	ErrState = errors.New("kafka: invalid resume state")
	// ErrPositionLost is returned by Read when the partition no longer
	// holds the offset the split must resume from (retention or
	// compaction deleted it, or the topic was recreated): replaying from
	// elsewhere would silently lose or repeat records.
	ErrPositionLost error = positionLost("kafka: resume offset no longer in the partition")
)

// Decoder says how a message becomes a record.
type Decoder uint8

const (
	// DecodeJSON (the default): the message value is the payload, a JSON
	// document; the message key is the record's key. Every record is an
	// insert. A value that is not a JSON object is still emitted, and the
	// engine quarantines it. Tombstones (null values) are skipped.
	DecodeJSON Decoder = iota
	// DecodeDebezium: the value is a Debezium change event, with or
	// without the schema wrapper ({"schema":…,"payload":{…}}). Op "c" and
	// "r" become inserts of "after", "u" an update to "after", "d" a
	// delete whose payload is "before" (or, when null, the key's fields).
	// The key is the message key's JSON with the schema wrapper removed,
	// compacted. Tombstones are skipped. A value that is not such an
	// envelope is emitted as a JSON array (never an object, so the engine
	// quarantines it with reason parse_error): ["kafka: bad debezium
	// envelope: <why>", <the value as a string, or {"base64": …} when it
	// is not UTF-8>]. The stream is CDC.
	DecodeDebezium
	// DecodeRaw: any bytes. The payload is {"value": "<base64 of the
	// value>"} ({"value": null} for a tombstone), so binary data survives
	// unchanged; the key is the message key.
	DecodeRaw
	// DecodeRegistry: the value is in a schema registry's wire format
	// (Confluent's: a zero byte, the schema ID in 4 bytes big-endian,
	// for Protobuf the message index, then the value encoded with that
	// schema), and its schema is in Config.Registry: Avro, Protobuf or
	// JSON Schema. The stream is a source.FormatRow stream with declared
	// columns: the top-level fields of the topic's writer schemas (the
	// versions of the subject "<topic>-value", joined with the schemas
	// its messages were seen with), typed exactly as the schema's types
	// say (see "Schema registry" in the package doc). Every record is an
	// insert; a framed key becomes its compact JSON text (a record key
	// {"id":42}), any other key stays as it is. Tombstones are skipped.
	DecodeRegistry
	// DecodeDebeziumRegistry: the value is a Debezium change event in the
	// registry's wire format (what Debezium writes with an Avro
	// converter; Avro only), decoded as DecodeRegistry does; the columns are those
	// of the envelope's before/after row record. Op "c" and "r" become
	// inserts of "after", "u" an update to "after", "d" a delete of
	// "before" (or, without a before image, of the key's fields). The key
	// is decoded as DecodeRegistry does. Tombstones are skipped. The
	// stream is CDC.
	DecodeDebeziumRegistry
)

// registry reports whether d decodes through a schema registry.
func (d Decoder) registry() bool { return d == DecodeRegistry || d == DecodeDebeziumRegistry }

// Columns selects message metadata merged into each payload as fields
// named _kafka_*; with DecodeRegistry and DecodeDebeziumRegistry they are
// declared columns after the schema's, typed _kafka_key bytea (the key's
// bytes as sent), _kafka_headers jsonb, _kafka_partition int4,
// _kafka_offset int8, _kafka_timestamp int8 (milliseconds) and
// _kafka_topic text. Values that are not JSON objects are emitted unchanged
// (and quarantined by the engine); a broken value that looks like one
// (it starts with '{' and ends with '}') is quarantined with the fields
// merged in. A document that already has a field of
// one of these names ends up with it twice; the engine keeps the last.
type Columns uint8

const (
	// ColumnKey adds "_kafka_key": the message key as a string when it is
	// UTF-8, else base64 under "_kafka_key_base64"; null when absent.
	ColumnKey Columns = 1 << iota
	// ColumnHeaders adds "_kafka_headers": an object of header name to
	// value (as a string; base64 when not UTF-8; the last wins for a
	// repeated name).
	ColumnHeaders
	// ColumnPartition adds "_kafka_partition": the partition number.
	ColumnPartition
	// ColumnOffset adds "_kafka_offset": the message offset.
	ColumnOffset
	// ColumnTimestamp adds "_kafka_timestamp": the message timestamp in
	// milliseconds since the Unix epoch.
	ColumnTimestamp
	// ColumnTopic adds "_kafka_topic": the topic name.
	ColumnTopic

	// AllColumns selects every column.
	AllColumns = ColumnKey | ColumnHeaders | ColumnPartition | ColumnOffset | ColumnTimestamp | ColumnTopic
)

// DefaultBudget is Config.Budget's default: 64 MiB.
const DefaultBudget = 64 << 20

// minBudget is the smallest Budget accepted.
const minBudget = 1 << 20

// Config configures a Source. Opts and one of Topics or TopicRegex are
// required.
type Config struct {
	// Opts are the franz-go client options the host owns: seed brokers,
	// TLS (kgo.DialTLSConfig), SASL (kgo.SASL), dialer, client ID, hooks.
	// The source adds its own consumer options after them (isolation
	// level, fetch sizes from Budget, control records, no offset reset),
	// which win. Consumer subscriptions (kgo.ConsumerGroup,
	// kgo.ConsumeTopics) are rejected: the source assigns partitions
	// itself. Required: at least kgo.SeedBrokers.
	Opts []kgo.Opt

	// Topics lists the topics to read; each becomes a stream of the same
	// name. A missing topic fails Discover.
	Topics []string
	// TopicRegex, when set, reads every topic whose name it matches
	// (internal topics, named "__…", excluded), in addition to Topics.
	// Topics whose names are not valid stream names (see source.Stream:
	// leading '.' or '_') are skipped, with a warning. A topic created
	// later becomes a stream at the next Discover, that is the next sync.
	TopicRegex *regexp.Regexp

	// Decoder decodes every topic's messages. Default DecodeJSON.
	Decoder Decoder
	// Registry is the schema registry DecodeRegistry and
	// DecodeDebeziumRegistry read writer schemas from: a *sr.Client
	// (github.com/twmb/franz-go/pkg/sr) the host builds with its URLs,
	// TLS and credentials. Each schema ID is asked for once (then kept,
	// up to 1024 schemas), a failed request retried with backoff for
	// about 6 s before Read fails with a *RegistryError. Required by
	// those decoders; ignored by the others.
	Registry Registry
	// Columns selects message metadata merged into payloads. Default none.
	Columns Columns
	// PrimaryKey names, per topic, the fields the message key holds
	// (Stream.PrimaryKey): declare it to merge a stream by key. Default
	// none: the stream is unkeyed, though records still carry the message
	// key (the engine then hashes it into _openetl_id).
	PrimaryKey map[string][]string

	// ReadUncommitted reads records of open and aborted transactions too.
	// Default false: read_committed, so aborted records never land and a
	// bounded read stops at the last stable offset.
	ReadUncommitted bool

	// Group is the consumer group Ack commits offsets to, one checkpoint
	// behind, so that lag shows in Kafka's tooling. The group is never
	// joined and its offsets are never read: positions live in the
	// pipeline's checkpoints. Default "": no commits.
	Group string

	// Budget bounds the bytes of messages the source holds in memory:
	// fetched, decompressed and queued for splits, over all partitions.
	// A quarter goes to fetches in flight (two concurrent fetches of
	// Budget/8 each, at most Budget/8 and 1 MiB per partition), the rest
	// to the per-partition queues, split evenly among the partitions of the
	// Open, read or not yet (at least 64 KiB each: a host reading a few
	// splits of many at a time gives each less); a partition whose queue
	// is full pauses its
	// fetching until its split has drained it to half. Kafka returns at
	// least one record batch per fetch however large, and a compressed
	// batch expands when decoded, so each partition can go over its share
	// by one decoded batch (about the producer's batch.size, 1 MB by
	// default, times the compression ratio): keep Budget well above
	// partitions × that. The process's memory for the source is about
	// twice Budget (Go's GC lets the heap grow to twice the live data;
	// GOMEMLIMIT tightens it) plus the client's fixed cost: measured peak
	// RSS of a reader process stays under 2×Budget + 48 MiB, and under
	// Budget + 80 MiB with GOMEMLIMIT set to Budget + 32 MiB
	// (TestMemoryBound). Default 64 MiB; at least 1 MiB.
	Budget int64

	// Logger receives lifecycle messages at Info and per-partition
	// pausing at Debug. Default: discard.
	Logger *slog.Logger
}

// Source reads Kafka topics. It implements source.Source, source.Acker,
// source.Closer and source.Sharder (Shard). Its methods are safe for concurrent use; close it
// with Close when done.
type Source struct {
	cfg   Config
	log   *slog.Logger
	admin *kgo.Client // metadata, list offsets, offset commits

	mu     sync.Mutex
	closed bool
	// closing holds a channel per consumer client still closing after its
	// last split's Read returned, closed when it has; Close waits for
	// those it finds.
	closing map[chan struct{}]struct{}
	ids     map[string][16]byte // topic IDs from the last metadata, for OffsetCommit v10+

	sch *schemas // the registry's schemas, for the registry decoders

	// shard and shards: the shard this Source reads (Shard); shards is 0
	// for a Source that reads every partition.
	shard, shards int
}

var (
	_ source.Source = (*Source)(nil)
	_ source.Acker  = (*Source)(nil)
	_ source.Closer = (*Source)(nil)
)

// New validates cfg and returns a Source. It does not connect: the first
// call that needs the cluster does. Every error wraps ErrConfig.
func New(cfg Config) (*Source, error) {
	if len(cfg.Opts) == 0 {
		return nil, fmt.Errorf("%w: Opts: no client options (at least kgo.SeedBrokers)", ErrConfig)
	}
	if len(cfg.Topics) == 0 && cfg.TopicRegex == nil {
		return nil, fmt.Errorf("%w: Topics and TopicRegex are both empty", ErrConfig)
	}
	seen := map[string]bool{}
	for _, t := range cfg.Topics {
		if err := validStream(t); err != nil {
			return nil, fmt.Errorf("%w: Topics: %q: %v", ErrConfig, t, err)
		}
		if seen[t] {
			return nil, fmt.Errorf("%w: Topics: %q listed twice", ErrConfig, t)
		}
		seen[t] = true
	}
	if cfg.Decoder > DecodeDebeziumRegistry {
		return nil, fmt.Errorf("%w: Decoder: unknown decoder %d", ErrConfig, cfg.Decoder)
	}
	if cfg.Decoder.registry() && cfg.Registry == nil {
		return nil, fmt.Errorf("%w: Registry: DecodeRegistry and DecodeDebeziumRegistry need a schema registry client", ErrConfig)
	}
	if cfg.Columns&^AllColumns != 0 {
		return nil, fmt.Errorf("%w: Columns: unknown bits %#x", ErrConfig, cfg.Columns&^AllColumns)
	}
	switch {
	case cfg.Budget == 0:
		cfg.Budget = DefaultBudget
	case cfg.Budget < minBudget:
		return nil, fmt.Errorf("%w: Budget must be at least %d bytes, got %d", ErrConfig, minBudget, cfg.Budget)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Opts = slices.Clone(cfg.Opts)
	cfg.Topics = slices.Clone(cfg.Topics)
	admin, err := kgo.NewClient(cfg.Opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: Opts: %w", ErrConfig, err)
	}
	// The source assigns partitions itself: a group or topic subscription
	// in Opts would take the client over.
	if g, _ := admin.OptValue(kgo.ConsumerGroup).(string); g != "" {
		admin.Close()
		return nil, fmt.Errorf("%w: Opts: kgo.ConsumerGroup(%q): positions live in checkpoints; set Config.Group to commit offsets for tooling", ErrConfig, g)
	}
	if ts, _ := admin.OptValue(kgo.ConsumeTopics).([]string); len(ts) > 0 {
		admin.Close()
		return nil, fmt.Errorf("%w: Opts: kgo.ConsumeTopics: use Config.Topics", ErrConfig)
	}
	s := &Source{cfg: cfg, log: cfg.Logger, admin: admin}
	if cfg.Decoder.registry() {
		s.sch = newSchemas(cfg.Registry, cfg.Decoder == DecodeDebeziumRegistry)
	}
	return s, nil
}

// validStream applies source.Stream's naming rules to a topic name.
func validStream(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > 200:
		return errors.New("longer than 200 bytes")
	case strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_"):
		return errors.New("a stream name may not start with '.' or '_'")
	case strings.HasSuffix(name, ".lock"):
		return errors.New(`a stream name may not end in ".lock"`)
	case strings.ContainsAny(name, "/\\"):
		return errors.New("contains '/' or '\\'")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return errors.New("contains a control character")
		}
	}
	return nil
}

// Close closes the source's client and waits for the consumer clients of
// splits whose Read has returned to finish closing. Splits being read keep
// their own clients until their Read returns. ctx is not used: closing
// does not block on the network.
func (s *Source) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.admin.Close()
	}
	pending := make([]chan struct{}, 0, len(s.closing))
	for c := range s.closing {
		pending = append(pending, c)
	}
	s.mu.Unlock()
	for _, c := range pending {
		<-c
	}
	return nil
}

// closeClient closes cl, a reader's consumer client whose dispatcher ends
// by closing done, in the background; Close waits for it.
func (s *Source) closeClient(cl *kgo.Client, done <-chan struct{}) {
	c := make(chan struct{})
	s.mu.Lock()
	if s.closing == nil {
		s.closing = map[chan struct{}]struct{}{}
	}
	s.closing[c] = struct{}{}
	s.mu.Unlock()
	go func() {
		cl.Close() // also ends a PollFetches in progress
		<-done
		s.mu.Lock()
		delete(s.closing, c)
		s.mu.Unlock()
		close(c)
	}()
}

// Replay returns source.ReplayExact: a partition read again from an
// offset yields the same messages in the same order, while retention
// keeps them (else Read fails with ErrPositionLost).
func (s *Source) Replay() source.Replay { return source.ReplayExact }

// topicMeta is a topic's partition count.
type topicMeta struct {
	name       string
	partitions int32
}

// topics asks the cluster for the selected topics (names nil: all
// selected topics) and their partitions, sorted by name.
func (s *Source) topics(ctx context.Context, names []string) ([]topicMeta, error) {
	req := kmsg.NewPtrMetadataRequest()
	all := names == nil && s.cfg.TopicRegex != nil
	if !all {
		if names == nil {
			names = s.cfg.Topics
		}
		for _, t := range names {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
	} else {
		req.Topics = nil // all topics
	}
	resp, err := req.RequestWith(ctx, s.admin)
	if err != nil {
		return nil, fmt.Errorf("kafka: metadata: %w", err)
	}
	listed := map[string]bool{}
	for _, t := range s.cfg.Topics {
		listed[t] = true
	}
	var out []topicMeta
	found := map[string]bool{}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		name := *t.Topic
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("kafka: metadata of topic %q: %w", name, err)
		}
		if all && !listed[name] {
			if t.IsInternal || strings.HasPrefix(name, "__") || !s.cfg.TopicRegex.MatchString(name) {
				continue
			}
			if err := validStream(name); err != nil {
				s.log.Warn("kafka: topic skipped: its name is not a valid stream name", "topic", name, "err", err)
				continue
			}
		}
		s.mu.Lock()
		if s.ids == nil {
			s.ids = map[string][16]byte{}
		}
		s.ids[name] = t.TopicID
		s.mu.Unlock()
		found[name] = true
		out = append(out, topicMeta{name: name, partitions: int32(len(t.Partitions))})
	}
	want := names
	if all {
		want = s.cfg.Topics
	}
	for _, t := range want {
		if !found[t] {
			return nil, fmt.Errorf("%w: %q: does it exist, and may this client describe it?", ErrUnknownTopic, t)
		}
	}
	slices.SortFunc(out, func(a, b topicMeta) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// Discover returns one stream per selected topic, named after it, in
// name order: FormatJSON, keyed by Config.PrimaryKey, CDC for
// DecodeDebezium and DecodeDebeziumRegistry. It asks the cluster for
// metadata (one request). With the registry decoders each stream is
// FormatRow, its columns the join of its writer schemas' (see
// DecodeRegistry): Discover asks the registry for the versions of each
// topic's subject "<topic>-value" and for schemas it has not seen yet,
// and fails with a *RegistryError when it can't. A topic with no schema
// known yet (no such subject, no message seen) is FormatJSON with no
// columns until its first message reopens the attempt.
func (s *Source) Discover(ctx context.Context) (source.Catalog, error) {
	ts, err := s.topics(ctx, nil)
	if err != nil {
		return source.Catalog{}, err
	}
	var c source.Catalog
	for _, t := range ts {
		st := source.Stream{
			Name:       t.name,
			Format:     source.FormatJSON,
			PrimaryKey: slices.Clone(s.cfg.PrimaryKey[t.name]),
			CDC:        s.cfg.Decoder == DecodeDebezium || s.cfg.Decoder == DecodeDebeziumRegistry,
		}
		if s.sch != nil {
			cols, err := s.sch.discover(ctx, t.name)
			if err != nil {
				return source.Catalog{}, err
			}
			if len(cols) == 0 {
				// No schema known yet (no subject of the topic's name, no
				// message seen): nothing to declare, and a row stream
				// needs columns. Its first message reopens the attempt.
				c.Streams = append(c.Streams, st)
				continue
			}
			st.Format, st.Types = source.FormatRow, source.TypesPostgres
			st.Columns = make([]source.Column, len(cols))
			for i, col := range cols {
				st.Columns[i] = source.Column{Name: col.Name, Type: col.Type(), Nullable: true}
			}
			st.Columns = append(st.Columns, s.cfg.Columns.declared()...)
		}
		c.Streams = append(c.Streams, st)
	}
	return c, nil
}

// A record's seq (its _openetl_seq) is Seq(partition, offset): the
// partition in the bits above the offset's 48. The engine derives
// _openetl_id from the stream, the key (or, without one, the payload) and
// the seq, so the seq must differ between partitions: with the offset
// alone, two messages with the same key (or, keyless, the same value) at
// the same offset of two partitions of a topic had the same ID, and a
// destination that skips rows by ID would drop one of them.
const (
	offsetBits = 48
	// MaxPartitions is the most partitions a topic read by this source
	// may have (partitions 0 to MaxPartitions-1): Open fails for a topic
	// with more.
	MaxPartitions = 1 << (63 - offsetBits)
	// MaxOffset is the highest message offset the source reads; Read
	// fails at a larger one (2^48 - 1: a partition taking a million
	// messages a second reaches it after about nine years).
	MaxOffset = 1<<offsetBits - 1
)

// Seq returns the seq of the message at offset of partition, the
// records' _openetl_seq: partition × 2^48 + offset. Within a partition a
// later message has a higher seq; across partitions the order is by
// partition, then offset (Kafka orders nothing across partitions: keep
// each key in one partition, as the default partitioner does, for merges
// by key). partition must be in [0, MaxPartitions) and offset in [0,
// MaxOffset].
func Seq(partition int32, offset int64) int64 {
	return int64(partition)<<offsetBits | offset
}

// Position returns the partition and offset a seq from Seq encodes: with
// the split ID of a quarantine line (topic/partition), its seq gives the
// offset of the message.
func Position(seq int64) (partition int32, offset int64) {
	return int32(seq >> offsetBits), seq & MaxOffset
}

// stateLen is the length of a resume state: the next offset, big-endian.
const stateLen = 8

func encodeState(buf *[stateLen]byte, next int64) []byte {
	binary.BigEndian.PutUint64(buf[:], uint64(next))
	return buf[:]
}

func decodeState(st []byte) (int64, error) {
	if len(st) != stateLen {
		return 0, fmt.Errorf("want %d bytes, got %d", stateLen, len(st))
	}
	v := int64(binary.BigEndian.Uint64(st))
	if v < 0 {
		return 0, fmt.Errorf("negative offset %d", v)
	}
	return v, nil
}

// Open returns one split per partition of each stream's topic (per
// partition the shard owns, for a Source Shard made), with ID
// "topic/partition", in topic then partition order; partitions added
// since the last Open are included (from their start). A split without
// a resume state starts at the partition's earliest offset. A state is
// the next offset to read, 8 bytes big-endian; Open fails with ErrState
// for one of another length. States of unknown splits are ignored.
//
// The splits of one Open share a franz-go client, made on the first Read
// and closed when the last Read returns.
func (s *Source) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(streams) == 0 {
		return nil, nil
	}
	seen := map[string]bool{}
	for _, st := range streams {
		if seen[st] {
			return nil, fmt.Errorf("kafka: stream %q requested twice", st)
		}
		seen[st] = true
	}
	ts, err := s.topics(ctx, streams)
	if err != nil {
		return nil, err
	}
	r := newReader(s)
	var splits []source.Split
	for _, t := range ts {
		if t.partitions > MaxPartitions {
			return nil, fmt.Errorf("kafka: topic %q has %d partitions, more than the %d whose seqs this source can tell apart", t.name, t.partitions, MaxPartitions)
		}
		for p := range t.partitions {
			if !s.owns(p) {
				continue
			}
			id := source.SplitID(t.name + "/" + strconv.Itoa(int(p)))
			next := int64(-1) // from the start
			if st, ok := resume[id]; ok {
				if next, err = decodeState(st); err != nil {
					return nil, fmt.Errorf("%w: split %q: %w", ErrState, id, err)
				}
			}
			sp := &split{id: id, topic: t.name, partition: p, r: r, next: next}
			if s.sch != nil {
				cols, err := s.sch.declared(ctx, t.name)
				if err != nil {
					return nil, err
				}
				sp.cols = cols
			}
			sp.lagEnd.Store(-1)
			sp.lagNext.Store(next)
			splits = append(splits, sp)
			r.all = append(r.all, tp{t.name, p})
		}
	}
	if len(splits) == 0 && s.shards > 1 {
		return nil, s.noPartitions(ts)
	}
	return splits, nil
}

// Ack commits the offsets in states to Config.Group (nothing when Group
// is empty), as a simple consumer group that no member joins. States it
// cannot decode are skipped.
func (s *Source) Ack(ctx context.Context, states map[source.SplitID][]byte) error {
	if s.cfg.Group == "" || len(states) == 0 {
		return nil
	}
	byTopic := map[string][]kmsg.OffsetCommitRequestTopicPartition{}
	var topics []string
	for _, id := range slices.Sorted(mapsKeys(states)) {
		topic, part, ok := parseSplitID(id)
		if !ok {
			continue
		}
		next, err := decodeState(states[id])
		if err != nil {
			continue
		}
		if _, ok := byTopic[topic]; !ok {
			topics = append(topics, topic)
		}
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition = part
		rp.Offset = next
		rp.LeaderEpoch = -1
		byTopic[topic] = append(byTopic[topic], rp)
	}
	if len(topics) == 0 {
		return nil
	}
	// OffsetCommit v10 names topics by ID: make sure we know them.
	s.mu.Lock()
	missing := false
	for _, t := range topics {
		if _, ok := s.ids[t]; !ok {
			missing = true
		}
	}
	s.mu.Unlock()
	if missing {
		if _, err := s.topics(ctx, topics); err != nil {
			return fmt.Errorf("kafka: commit offsets to group %q: %w", s.cfg.Group, err)
		}
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = s.cfg.Group
	req.Generation = -1
	s.mu.Lock()
	for _, topic := range topics {
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = topic
		t.TopicID = s.ids[topic]
		t.Partitions = byTopic[topic]
		req.Topics = append(req.Topics, t)
	}
	s.mu.Unlock()
	resp, err := req.RequestWith(ctx, s.admin)
	if err != nil {
		return fmt.Errorf("kafka: commit offsets to group %q: %w", s.cfg.Group, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("kafka: commit offset of %s/%d to group %q: %w", t.Topic, p.Partition, s.cfg.Group, err)
			}
		}
	}
	return nil
}

func mapsKeys(m map[source.SplitID][]byte) func(func(source.SplitID) bool) {
	return func(yield func(source.SplitID) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// parseSplitID splits "topic/partition".
func parseSplitID(id source.SplitID) (string, int32, bool) {
	s := string(id)
	i := strings.LastIndexByte(s, '/')
	if i <= 0 {
		return "", 0, false
	}
	p, err := strconv.ParseInt(s[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", 0, false
	}
	return s[:i], int32(p), true
}

// listOffsets is listOffset for many partitions in one request (the
// client sends each leader its share). It returns the offsets of the
// partitions the response gave without an error; the caller lists the
// others one by one, for their errors.
func (s *Source) listOffsets(ctx context.Context, parts []tp, ts int64) map[tp]int64 {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if !s.cfg.ReadUncommitted {
		req.IsolationLevel = 1
	}
	byTopic := map[string]int{}
	for _, t := range parts {
		i, ok := byTopic[t.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[t.topic] = i
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = t.topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = t.partition
		rp.Timestamp = ts
		rp.CurrentLeaderEpoch = -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	out := make(map[tp]int64, len(parts))
	resp, err := req.RequestWith(ctx, s.admin)
	if err != nil {
		return out
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				out[tp{t.Topic, p.Partition}] = p.Offset
			}
		}
	}
	return out
}

// listOffset returns the offset a bounded read of topic/partition stops
// at (ts -1: the last stable offset under read_committed, else the high
// watermark), or its earliest offset (ts -2).
func (s *Source) listOffset(ctx context.Context, topic string, partition int32, ts int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	if !s.cfg.ReadUncommitted {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = partition
	rp.Timestamp = ts
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, s.admin)
	if err != nil {
		return 0, fmt.Errorf("kafka: list offsets of %s/%d: %w", topic, partition, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Topic == topic && p.Partition == partition {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return 0, fmt.Errorf("kafka: list offsets of %s/%d: %w", topic, partition, err)
				}
				return p.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("kafka: list offsets of %s/%d: partition missing from the response", topic, partition)
}

// positionLost is a sentinel that also matches source.ErrPositionLost.
type positionLost string

func (e positionLost) Error() string        { return string(e) }
func (e positionLost) Is(target error) bool { return target == source.ErrPositionLost }

// Permanent reports whether err is a broker error no retry fixes: SASL
// authentication failed or its mechanism is not enabled, or the client
// is not authorized for a topic, the group, the cluster or a
// transactional ID. Run returns such an error at once instead of
// retrying it for its budget (source.Classifier).
func (s *Source) Permanent(err error) bool {
	if errors.Is(err, source.ErrUnshardable) {
		return true
	}
	for _, e := range []error{kerr.SaslAuthenticationFailed, kerr.UnsupportedSaslMechanism, kerr.TopicAuthorizationFailed,
		kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
