// Package kafka is a source that reads Kafka topics with franz-go.
//
// Each selected topic (Config.Topics, or Config.TopicRegex) is a stream of
// the same name; each of its partitions is a split with ID
// "topic/partition" whose resume state is the next offset to read. The
// positions live in the pipeline's checkpoints, not in a consumer group,
// so a restarted pipeline replays exactly the messages after its last
// checkpoint (source.ReplayExact); Ack commits the same offsets to
// Config.Group one checkpoint behind, only so that lag shows in Kafka's
// tooling. Partitions added to a topic are picked up by the next Open,
// that is the next sync; topics matching TopicRegex by the next Discover.
//
// Every record's seq (its _openetl_seq) is Seq(partition, offset): the
// partition times 2^48 plus the message offset. It is fixed by the
// message's place in the topic, so a replay after a restart emits the
// same seqs and the engine gives the records the same _openetl_id (a hash
// of stream, key or payload, and seq); and it differs between partitions,
// so messages with the same key or value at the same offset of two
// partitions get different IDs. Within a partition a later message has a
// higher seq. A quarantine line names the split (topic/partition) and the
// seq; Position(seq) gives back the partition and offset. Topics of more
// than MaxPartitions partitions and offsets past MaxOffset are refused.
//
// A scheduled sync (a bounded Read) reads each partition up to its last
// stable offset (read_committed, the default) or high watermark as of
// the start of the read, then returns; aborted transactions never land.
//
// Decoders: DecodeJSON (the value is the document), DecodeDebezium
// (change events become inserts, updates and deletes), DecodeRaw
// (base64 of the bytes), and DecodeRegistry (Avro, Protobuf or JSON
// Schema in a schema registry's wire format, below) and
// DecodeDebeziumRegistry (Debezium's Avro change events so framed). Columns merges
// message metadata into documents as _kafka_* fields (declared columns
// after the schema's, with the registry decoders). Messages a decoder
// cannot read are still emitted, in a form the engine quarantines, so a
// poison message never stops a stream.
//
// # Schema registry
//
// DecodeRegistry reads values framed in the Confluent wire format (a zero
// byte, the schema ID, for Protobuf the message index, then the value)
// with their writer schema from Config.Registry, asked once per schema
// ID: Avro binary, Protobuf binary or JSON text, as the schema's type
// says. The stream is source.FormatRow: its declared columns are the
// writer schema's top-level fields, so the engine coerces each value to
// its exact type with no inference (and, but for JSON, no field names to
// parse):
//
//	Avro                                  column (Arrow)
//	boolean, int, long, float, double     bool, int4, int8, float4, float8
//	string, bytes, fixed                  text (utf8), bytea (binary)
//	enum                                  utf8 marked enum
//	decimal(p,s)                          decimal128(p,s); p > 38: utf8, exact
//	uuid                                  fixed_size_binary(16)
//	date, time-millis, time-micros        date32, time64[us]
//	timestamp-millis/-micros/-nanos       timestamp[us, UTC]
//	local-timestamp-millis/-micros/-nanos timestamp[us]
//	duration                              interval[month_day_nano]
//	array of one of the above             list
//	union of null and T                   T's, nullable
//	union of several scalars              their join (below)
//	record, map, other arrays and unions  utf8 JSON text
//
// Kafka Connect's and Debezium's semantic types (io.debezium.time.Date,
// MicroTimestamp, ZonedTimestamp, ..., io.debezium.data.Json, Uuid, Enum,
// VariableScaleDecimal, org.apache.kafka.connect.data.Decimal) map to the
// same types. Nothing is rounded: a value its column's type can't hold (a
// nanosecond with a sub-microsecond part, a decimal wider than its
// precision) is held by the engine, cell by cell. Fields whose names
// start with "_openetl_" are left out.
//
// Protobuf: the schema is the .proto file (as text, or as base64 of its
// FileDescriptorProto, as confluent-kafka's Python serializer registers
// it) with its imports as schema references; the well-known types need
// none. The message index names the value's message type, whose fields
// are the columns:
//
//	Protobuf                              column (Arrow)
//	bool, int32/sint32/sfixed32           bool, int4
//	int64/sint64/sfixed64, uint32/fixed32 int8
//	uint64, fixed64                       decimal128(20,0)
//	float, double, string, bytes          float4, float8, utf8, binary
//	enum                                  utf8 marked enum (its name; an
//	                                      unnamed number as its digits)
//	google.protobuf.Timestamp, Duration   timestamp[us, UTC], interval
//	google.protobuf.*Value wrappers       the wrapped type's, nullable
//	repeated of one of the above          list
//	oneof                                 a column for each member
//	other messages, maps, repeated        utf8 JSON text (proto3 JSON but
//	messages, Struct, Value, ListValue,   for field names kept as they are
//	Any, Empty, FieldMask                 and 64-bit integers as numbers)
//
// Presence decides nulls: a field with presence (message fields,
// wrappers, oneof members, proto3 optional, proto2 optional) is null
// when absent; a proto3 field without presence is its default (0, "",
// false, the enum's zero value), as any Protobuf reader sees it; an
// absent repeated field is an empty list. A field given twice is read as
// Protobuf reads it (the last scalar, messages merged), and so is a
// oneof: only its member last on the wire has a value, the others are
// null (left out of JSON text). Unknown fields are skipped, and so is a
// known field that comes with another wire type than its own (as
// protobuf-go reads it); groups are not columns. A Timestamp or Duration
// outside its type's range (years 1 to 9999; ±315,576,000,000 s; nanos
// within a second, of the seconds' sign) makes the message undecodable;
// a Duration within it that an interval can't hold (past about 292
// years) is held by the engine (out_of_range).
//
// A .proto file does not say which of its message types the subject's
// values are; each value's message index does. A subject's columns
// (Discover) are those of the message types the topic's values were
// seen with, in every version of the subject that has a type of that
// name; before any value is seen, a file of one message type declares
// it, and a file of several declares no columns (the first message
// reopens the attempt, as a new schema version does), never the columns
// of a type the values may not be.
//
// JSON Schema: the value is JSON text; an object schema's properties are
// the columns, in the order the schema lists them ("$ref"s to its
// definitions and to its references followed): "boolean", "integer",
// "number" → bool, int8, float8; "string" → utf8, or timestamp[us, UTC],
// date32, fixed_size_binary(16) for formats date-time, date and uuid, a
// marked enum with "enum"; an "array" of one of those → list; objects,
// other arrays and untyped properties → utf8 JSON text as written; a
// type array or oneOf/anyOf with "null" → nullable, of several types →
// their join. Every column is nullable (absent is null, whatever
// "required" says). A value of a JSON type its property's schema does not
// allow (a string or a fraction for "integer") is a payload that does
// not match its schema. "integer" takes an integral number written with
// a fraction or an exponent (1.0, 1e3), written exactly as its digits;
// one beyond int64 so written is undecodable (in plain digits the engine
// holds it, out_of_range). A string with a \u escape of a lone UTF-16
// surrogate is undecodable (no text holds it; it is not made U+FFFD).
// "$ref" chains are followed to any length short of a cycle, which the
// schema's compile refuses. Properties the schema does not list are not
// kept (DecodeJSON keeps every field, inferring the columns).
//
// Keys framed in the wire format are decoded, with the schema their ID
// names (registered under "<topic>-key", usually), as compact JSON text:
// {"id":42}.
//
// A topic's columns are the join of its writer schemas' columns: every
// version of the subject "<topic>-value" and every schema a message was
// seen with. Joining adds new fields as nullable columns and widens types
// as Avro's promotions do (int → long → double, float → double, a
// decimal to hold both; Protobuf's int32 → int64 and JSON Schema's
// integer → number likewise); any other change of a field's type makes
// it text. A message whose schema has columns the attempt's declared columns
// lack fails Read with a *SchemaChangeError (source.ErrReopen): the
// runner starts a new attempt, whose Discover joins the new schema in,
// from the last checkpoint, so nothing is lost or repeated; the
// destination sees the table widen (sink/parquet starts a file of the new
// schema).
//
// A message the source can't decode — not in the wire format (a wrong
// magic byte), a schema ID the registry doesn't have, a schema that
// doesn't compile, a Protobuf message index the file has no message for,
// bytes that don't match the schema, a value outside its type's range
// (above) —
// is emitted as a record the engine quarantines (reason parse_error):
// its payload says why, as text after one 0x7f byte, and the quarantine
// line's split and seq name its topic, partition and offset (Position).
// A registry that can't be asked (down, slow, refusing the credentials)
// is no reason to set messages aside: after retries with backoff (about
// 6 s) Discover or Read fails with a *RegistryError naming the topic and
// schema ID, and a later sync goes on from the last checkpoint.
//
// Decoding runs in Go, one message at a time into the same declared-row
// buffers the SQL sources use, with no allocation per message once a
// split's decoders exist; the engine takes each batch in one call. Avro
// values of a flat writer schema — a record (or a union of null and
// one) of null, boolean, int, long, float, double, string, bytes, fixed,
// enum, date, time-millis/-micros, timestamp-millis/-micros,
// local-timestamp-millis/-micros and uuid fields, each possibly in a
// union with null — are not decoded here: a keyed message's record
// carries its Avro body (engine.AppendAvroRow), which the engine decodes
// straight into Arrow, giving the same rows as the Go decoder (a batch
// holding a message it can't give exactly, such as an undecodable one,
// takes the Go decoder's rows, quarantined as above). Such records'
// payloads are for the engine only: they are not source.AppendRow rows.
// BENCHMARKS.md has the cost of both against the JSON path.
//
// Memory: Config.Budget bounds the message bytes fetched and queued; a
// split whose Emitter blocks (backpressure) pauses the fetching of its
// partition only. Config.Budget's doc says what a process holds in all.
//
// # Shards
//
// Shard(i, n) (source.Sharder; etl.Builder.Shard calls it) makes a
// Source that reads only the partitions p with p mod n = i of every
// topic, so n pipelines, one per shard, on as many hosts, read each
// partition once between them. Each shard has its own checkpoint log,
// so moving a shard to another host needs nothing but starting it
// there; the offsets stay in the shard's checkpoints. A shard that owns
// no partition fails Open (source.ErrUnshardable, permanent).
//
// Splits report Lag (messages behind the partition's end) and Paused
// (fetching paused under backpressure, and since when), which the
// pipeline's status, metrics and stream.paused / stream.resumed events
// show.
//
//	src, err := kafka.New(kafka.Config{
//		Opts:   []kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092")},
//		Topics: []string{"orders"},
//		Group:  "openetl-orders",
//	})
//	if err != nil { ... }
//	defer src.Close(ctx)
//	p, err := etl.NewPipeline("orders").From(src).To(dst).Checkpoints(store).Build()
package kafka
