package kafka

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka/internal/avrorow"
)

// Registry is what the source asks a Confluent-compatible schema registry
// (the Confluent Schema Registry, Apicurio's ccompat API, Redpanda,
// Karapace): franz-go's *sr.Client implements it, built by the host with
// its URLs, TLS (sr.DialTLSConfig, sr.HTTPClient) and auth (sr.BasicAuth,
// sr.BearerToken). The source calls it from several goroutines at once.
type Registry interface {
	// SchemaByID returns the schema registered under id (GET
	// /schemas/ids/{id}).
	SchemaByID(ctx context.Context, id int) (sr.Schema, error)
	// SchemaByVersion returns a subject's version of a schema (GET
	// /subjects/{subject}/versions/{version}), for schema references.
	SchemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error)
	// Schemas returns every version of a subject, oldest first (for
	// Discover: the columns of the subject "<topic>-value").
	Schemas(ctx context.Context, subject string) ([]sr.SubjectSchema, error)
}

var _ Registry = (*sr.Client)(nil)

// firstMessage is the message index of a Protobuf file's first message
// type.
var firstMessage = []int{0}

// RegistryError is returned by Discover and Read when the registry could
// not be asked for a schema (it is down, slow, or refuses the client's
// credentials) after the retries: the sync fails, nothing is read past
// the last checkpoint, and a later sync tries again. A schema the
// registry answers it does not have is no RegistryError: the messages
// framed with its ID are quarantined.
type RegistryError struct {
	Topic string // the topic whose message or catalog needed the schema
	ID    int    // the schema ID asked for; 0 for a subject's versions
	// Subject is the subject asked for, when it was a subject's versions.
	Subject string
	Err     error // the last attempt's error
}

func (e *RegistryError) Error() string {
	if e.Subject != "" {
		return fmt.Sprintf("kafka: topic %q: schema registry: versions of subject %q: %v", e.Topic, e.Subject, e.Err)
	}
	return fmt.Sprintf("kafka: topic %q: schema registry: schema id %d: %v", e.Topic, e.ID, e.Err)
}

func (e *RegistryError) Unwrap() error { return e.Err }

// SchemaChangeError is returned by Read when a message's writer schema
// has columns (or wider types) the stream's declared columns, fixed when
// the attempt discovered the catalog, lack. It matches source.ErrReopen:
// the runner starts a new attempt at once, whose Discover joins the
// schema into the stream's columns, and which reads on from the last
// checkpoint.
type SchemaChangeError struct {
	Topic string
	ID    int // the new schema's ID
}

func (e *SchemaChangeError) Error() string {
	return fmt.Sprintf("kafka: topic %q: schema id %d has columns or types the stream's declared columns lack: reopening with them joined", e.Topic, e.ID)
}

// Is makes errors.Is(err, source.ErrReopen) true.
func (e *SchemaChangeError) Is(target error) bool { return target == source.ErrReopen }

// Registry retries: an attempt times out after registryTimeout; failed
// attempts are retried after registryBackoff, doubling, registryTries
// times in all (about 6 s of waiting before the error).
var (
	registryTries   = 6
	registryBackoff = 200 * time.Millisecond
)

const (
	registryTimeout = 10 * time.Second
	// maxSchemas bounds the schemas the source keeps compiled; past it
	// the oldest is dropped (and asked for again when seen again).
	maxSchemas = 1024
)

// schemaEntry is one schema ID's compiled schema, or why its messages
// can't be decoded (the registry doesn't have it, or it does not parse):
// a permanent answer, so the ID is asked for once. A schema is compiled
// as a plain value's (for keys, and values of DecodeRegistry) and, for
// DecodeDebeziumRegistry, as an envelope's (Avro only). A Protobuf
// schema is a file of message types; a message's header names its.
type schemaEntry struct {
	plain            avrorow.RowSchema // Avro or JSON Schema
	proto            *avrorow.ProtoFile
	env              *avrorow.Schema
	plainBad, envBad string
}

// value returns the schema for decoding values (of message type idx, for
// Protobuf), or why there is none.
func (e *schemaEntry) value(debezium bool, idx []int) (avrorow.RowSchema, string) {
	if debezium {
		if e.env == nil {
			return nil, e.envBad
		}
		return e.env, ""
	}
	return e.plainValue(idx)
}

// plainValue is value for a plain value (or key).
func (e *schemaEntry) plainValue(idx []int) (avrorow.RowSchema, string) {
	if e.proto != nil {
		m, err := e.proto.Message(idx)
		if err != nil {
			return nil, err.Error()
		}
		return m, ""
	}
	if e.plain == nil {
		return nil, e.plainBad
	}
	return e.plain, ""
}

// schemas caches compiled writer schemas by ID for a Source, and the
// schema IDs each topic's messages were seen with.
type schemas struct {
	reg      Registry
	debezium bool

	mu    sync.Mutex
	ids   map[int]*schemaEntry
	order []int // insertion order, for eviction
	// flight holds a channel per ID being fetched: one fetch per ID at a
	// time, however many splits ask.
	flight map[int]chan struct{}
	seen   map[string][]seenSchema  // topic → value schemas, first-seen order
	cols   map[string][]avrorow.Col // topic → declared columns as of the last Discover
	fetchN int                      // registry calls made, for tests
}

func newSchemas(reg Registry, debezium bool) *schemas {
	return &schemas{reg: reg, debezium: debezium, ids: map[int]*schemaEntry{},
		flight: map[int]chan struct{}{}, seen: map[string][]seenSchema{}, cols: map[string][]avrorow.Col{}}
}

// seenSchema is a schema a topic's messages were seen with: its ID and,
// for Protobuf, the message index's bytes.
type seenSchema struct {
	id  int
	idx string
}

// retry calls f until it succeeds, fails permanently, or the tries are
// spent.
func retry[T any](ctx context.Context, f func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	wait := registryBackoff
	var err error
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, registryTimeout)
		var v T
		v, err = f(actx)
		cancel()
		if err == nil {
			return v, nil
		}
		if notFound(err) || !retryable(err) || ctx.Err() != nil || try == registryTries {
			return zero, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return zero, err
		}
		wait *= 2
	}
}

// notFound reports a registry's answer that it has no such schema or
// subject (HTTP 404: error codes 40401, 40402, 40403).
func notFound(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// retryable reports whether asking again may help: not for a request the
// registry refused (4xx: bad credentials, forbidden) other than 408 and
// 429.
func retryable(err error) bool {
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		return true // the network, a timeout
	}
	c := re.StatusCode
	return c >= 500 || c == http.StatusRequestTimeout || c == http.StatusTooManyRequests
}

// byID returns the compiled schema of id, asking the registry (with
// retries) the first time; a *RegistryError when it can't be asked.
func (s *schemas) byID(ctx context.Context, topic string, id int) (*schemaEntry, error) {
	for {
		s.mu.Lock()
		if e, ok := s.ids[id]; ok {
			s.mu.Unlock()
			return e, nil
		}
		if c, ok := s.flight[id]; ok {
			s.mu.Unlock()
			select {
			case <-c:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		c := make(chan struct{})
		s.flight[id] = c
		s.fetchN++
		s.mu.Unlock()
		e, err := s.fetch(ctx, id)
		s.mu.Lock()
		delete(s.flight, id)
		close(c)
		if err == nil {
			s.putLocked(id, e)
		}
		s.mu.Unlock()
		if err != nil {
			return nil, &RegistryError{Topic: topic, ID: id, Err: err}
		}
		return e, nil
	}
}

func (s *schemas) putLocked(id int, e *schemaEntry) {
	if len(s.order) >= maxSchemas {
		delete(s.ids, s.order[0])
		s.order = s.order[1:]
	}
	s.ids[id] = e
	s.order = append(s.order, id)
}

// fetch asks for id and compiles it; an error only when the registry
// could not answer.
func (s *schemas) fetch(ctx context.Context, id int) (*schemaEntry, error) {
	sch, err := retry(ctx, func(ctx context.Context) (sr.Schema, error) { return s.reg.SchemaByID(ctx, id) })
	if notFound(err) {
		bad := fmt.Sprintf("schema id %d is not in the registry", id)
		return &schemaEntry{plainBad: bad, envBad: bad}, nil
	}
	if err != nil {
		return nil, err
	}
	return s.compile(ctx, sch)
}

func (s *schemas) compile(ctx context.Context, sch sr.Schema) (*schemaEntry, error) {
	refs, bad, err := s.references(ctx, sch.References, 0, nil)
	if err != nil {
		return nil, err
	}
	if bad != "" {
		return &schemaEntry{plainBad: bad, envBad: bad}, nil
	}
	e := &schemaEntry{}
	var perr error
	switch sch.Type {
	case sr.TypeAvro:
		texts := make([]string, len(refs))
		for i, r := range refs {
			texts[i] = r.Text
		}
		var plain *avrorow.Schema
		if plain, perr = avrorow.Parse(sch.Schema, texts, false); perr != nil {
			e.plainBad = perr.Error()
		} else {
			e.plain = plain
		}
		if s.debezium {
			if e.env, perr = avrorow.Parse(sch.Schema, texts, true); perr != nil {
				e.envBad = perr.Error()
			}
		}
		return e, nil
	case sr.TypeProtobuf:
		if e.proto, perr = avrorow.ParseProto(sch.Schema, refs); perr != nil {
			e.plainBad = perr.Error()
		}
	case sr.TypeJSON:
		var js *avrorow.JSONSchema
		if js, perr = avrorow.ParseJSONSchema(sch.Schema, refs); perr != nil {
			e.plainBad = perr.Error()
		} else {
			e.plain = js
		}
	default:
		e.plainBad = fmt.Sprintf("schema type %s is not supported", sch.Type)
	}
	e.envBad = fmt.Sprintf("schema type %s: DecodeDebeziumRegistry reads Avro change events only", sch.Type)
	return e, nil
}

// references returns the names and texts of refs and of what they
// reference, in dependency order (depth first).
func (s *schemas) references(ctx context.Context, refs []sr.SchemaReference, depth int, out []avrorow.Ref) ([]avrorow.Ref, string, error) {
	if depth > 16 {
		return nil, "schema references nested more than 16 deep", nil
	}
	for _, r := range refs {
		ss, err := retry(ctx, func(ctx context.Context) (sr.SubjectSchema, error) {
			return s.reg.SchemaByVersion(ctx, r.Subject, r.Version)
		})
		if notFound(err) {
			return nil, fmt.Sprintf("referenced schema %s version %d is not in the registry", r.Subject, r.Version), nil
		}
		if err != nil {
			return nil, "", err
		}
		var bad string
		if out, bad, err = s.references(ctx, ss.References, depth+1, out); err != nil || bad != "" {
			return nil, bad, err
		}
		if !slices.ContainsFunc(out, func(o avrorow.Ref) bool { return o.Name == r.Name && o.Text == ss.Schema.Schema }) {
			out = append(out, avrorow.Ref{Name: r.Name, Text: ss.Schema.Schema})
		}
	}
	return out, "", nil
}

// saw records that topic's messages carry value schema id (with
// Protobuf message index idx, in its shortest encoding: one entry per
// message type, however the producers encode it); it reports whether
// that is new for the topic.
func (s *schemas) saw(topic string, id int, idx string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := seenSchema{id, idx}
	if slices.Contains(s.seen[topic], k) {
		return false
	}
	s.seen[topic] = append(s.seen[topic], k)
	return true
}

// discover works out topic's declared columns: the join of the columns of
// every version of the subject "<topic>-value" (oldest first; for
// Protobuf, of the message types the values use) and of the schemas its
// messages were seen with, and records them for Open.
func (s *schemas) discover(ctx context.Context, topic string) ([]avrorow.Col, error) {
	subject := topic + "-value"
	versions, err := retry(ctx, func(ctx context.Context) ([]sr.SubjectSchema, error) { return s.reg.Schemas(ctx, subject) })
	if err != nil && !notFound(err) {
		return nil, &RegistryError{Topic: topic, Subject: subject, Err: err}
	}
	// The Protobuf message types the topic's values were seen with (by
	// full name, first seen first).
	s.mu.Lock()
	seen := slices.Clone(s.seen[topic])
	s.mu.Unlock()
	var names []string
	for _, k := range seen {
		e, err := s.byID(ctx, topic, k.id)
		if err != nil {
			return nil, err
		}
		if e.proto == nil {
			continue
		}
		idx, _ := avrorow.MessageIndex([]byte(k.idx), nil)
		if n := e.proto.MessageName(idx); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	var cols []avrorow.Col
	var protos []*schemaEntry // the subject's Protobuf versions
	for _, v := range versions {
		s.mu.Lock()
		e, ok := s.ids[v.ID]
		s.mu.Unlock()
		if !ok {
			// The version carries its schema: compile it without asking
			// for the ID again.
			if e, err = s.compile(ctx, v.Schema); err != nil {
				return nil, &RegistryError{Topic: topic, ID: v.ID, Err: err}
			}
			s.mu.Lock()
			if _, ok := s.ids[v.ID]; !ok {
				s.putLocked(v.ID, e)
			}
			s.mu.Unlock()
		}
		if e.proto != nil {
			protos = append(protos, e)
			continue
		}
		if v, _ := e.value(s.debezium, nil); v != nil {
			cols = avrorow.Join(cols, v.Cols())
		}
	}
	// A Protobuf file does not say which of its message types the
	// subject's values are (each value's message index does): a version
	// declares the types of that name the values were seen with; before
	// any is seen, a file of one message type declares it, and a file of
	// several none (the first message reopens the attempt), never the
	// columns of a type the values may not be.
	for _, name := range names {
		for _, e := range protos {
			if idx, ok := e.proto.FindMessage(name); ok {
				if v, _ := e.value(s.debezium, idx); v != nil {
					cols = avrorow.Join(cols, v.Cols())
				}
			}
		}
	}
	if len(names) == 0 {
		for _, e := range protos {
			if e.proto.Messages() == 1 {
				if v, _ := e.value(s.debezium, firstMessage); v != nil {
					cols = avrorow.Join(cols, v.Cols())
				}
			}
		}
	}
	for _, k := range seen {
		e, err := s.byID(ctx, topic, k.id)
		if err != nil {
			return nil, err
		}
		idx, _ := avrorow.MessageIndex([]byte(k.idx), nil)
		if v, _ := e.value(s.debezium, idx); v != nil {
			cols = avrorow.Join(cols, v.Cols())
		}
	}
	s.mu.Lock()
	s.cols[topic] = cols
	s.mu.Unlock()
	return cols, nil
}

// declared returns topic's columns as of the last Discover, working them
// out when there was none.
func (s *schemas) declared(ctx context.Context, topic string) ([]avrorow.Col, error) {
	s.mu.Lock()
	cols, ok := s.cols[topic]
	s.mu.Unlock()
	if ok {
		return cols, nil
	}
	return s.discover(ctx, topic)
}
