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
// (change events become inserts, updates and deletes) and DecodeRaw
// (base64 of the bytes). Columns merges message metadata into documents
// as _kafka_* fields. Messages a decoder cannot read are still emitted,
// in a form the engine quarantines, so a poison message never stops a
// stream. Avro and a schema registry are not supported yet.
//
// Memory: Config.Budget bounds the message bytes fetched and queued; a
// split whose Emitter blocks (backpressure) pauses the fetching of its
// partition only. Config.Budget's doc says what a process holds in all.
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
