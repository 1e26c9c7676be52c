// Package parquet is a stage-and-apply destination that writes each stream
// as zstd-compressed Parquet files on a gocloud.dev bucket (s3, gs, azblob,
// file, mem) and makes them visible, exactly once, through a versioned
// manifest per stream.
//
// # How an epoch travels
//
// Each writer lane keeps one open Parquet file per stream and appends the
// Arrow batches it is given (row groups of Config.RowGroupRows rows, the
// Arrow schema stored in the file; see Encoding for who encodes). A file is
// closed, and a new one started, when the stream's schema changes (the
// engine widened it) or the file passes Config.TargetFileBytes. At the
// barrier, PreCommit closes every open file, which makes it durable under
// _staging/, and returns a small JSON committable naming each staged file,
// the key it will have once applied, and its rows and bytes.
//
// After the checkpoint record holding the committables is the log's HEAD,
// lane 0's Commit applies the epoch stream by stream: it copies the staged
// files to their final keys under {stream}/data/, then creates the stream's
// next manifest version, listing every file of the previous version plus
// the new ones, and finally deletes the staged copies. A stream whose
// current manifest already records the epoch is skipped, which is what
// makes Commit idempotent, from this process or from another after a crash.
//
// # Layout
//
// Under Config.Prefix (a trailing "/" is added when missing):
//
//	{stream}/data/{epoch:020d}-l{lane}-{n}-{nonce}.parquet   applied files
//	{stream}/_manifest/{version:020d}.json                   manifests (immutable)
//	{stream}/_owner.json                                     the pipeline writing it
//	_staging/{pipeline}/{stream}/{nonce}-l{lane}-{n}.parquet  staged files
//	_openetl/{pipeline}/fence/{generation:020d}.json          fence markers
//
// A stream's current manifest is its highest version. Files under data/
// that no manifest lists (left by a Commit that crashed between copying and
// creating the manifest) are not part of the dataset: readers must follow
// the manifest (ReadManifest) and never list data/. A reader that follows
// the current manifest sees every record once.
//
// A manifest version is created with a create-if-absent write, so two
// committers racing for one version have one winner; the loser re-reads
// and finds the epoch applied. On S3, GCS, Azure and memblob that write is
// atomic. gocloud's fileblob driver is not atomic across racing processes
// (it checks for the file and then renames over it), so on file:// buckets
// it is the fence that keeps a zombie's Commit out, not the manifest write.
//
// gocloud's fileblob driver never fsyncs: on file:// buckets "durable"
// means handed to the operating system, which survives a process crash
// but not a power loss.
//
// Open a local directory with OpenDir, on any mount: fileblob's default
// options write each file to os.TempDir and rename it into place, which
// fails with "invalid cross-device link" when the directory is on another
// file system (a /data volume).
//
// # Pipelines sharing a prefix
//
// Several pipelines may write under one prefix, each its own streams: a
// stream belongs to the first pipeline that claims it, which the writer
// records in {stream}/_owner.json (a create-if-absent write): Recover
// claims every stream of the writer's spec, at the attempt's start, and
// a Write claims a stream the spec lacks. Build of another pipeline
// selecting a claimed stream fails (the destination is a
// sink.PipelineChecker), and a writer of another pipeline built before
// the claim fails at its Recover or Write, with an *OwnerError naming the stream and both pipelines
// (errors.Is(err, ErrOwned); etl.IsPermanent), before its pipeline reads
// or commits anything, and having claimed nothing. A stream written
// before owners were recorded belongs to the pipeline its manifest
// names. To hand a stream that has no manifest yet to another pipeline,
// delete its _owner.json.
//
// # Garbage collection
//
// An attempt that fails between PreCommit and its checkpoint record (a
// crash, a store outage at the record's write, a fence) leaves its
// staged files under _staging/{pipeline}/, which no record names.
// Collect (sink.Collector), which the runner calls once per attempt
// after Recover and before any Write, removes every staged file of the
// pipeline that the record the attempt resumes from doesn't name: it
// lists them, asks the runner whether the attempt's generation still
// holds the checkpoint log's HEAD, and only then deletes, so a newer
// attempt's staged files (staged after its claim, so after a listing
// that check follows) are never touched, nor anything when the
// attempt is a zombie. A crash midway leaves the rest to the next
// attempt.
//
// Manifest versions are immutable, but not all kept: a stream keeps its
// current version and the Config.ManifestHistory (default 16) before
// it. The Commit that writes a version removes the one that falls out
// of that window, and Collect removes what is older (left by a crash,
// or by versions of this package that kept every version). A reader
// that lists the manifests and reads the highest version (ReadManifest,
// or any reader that follows the same rule) is unaffected unless
// ManifestHistory commits land between its listing and its read; then
// the read finds nothing and ReadManifest lists again. The files a
// version lists are never removed while a kept version lists them (a
// file a release of held values replaced goes once none does), so a
// reader holding a kept version can still read its files.
//
// # Fencing
//
// Recover(gen, head) raises the pipeline's fence by creating the marker for
// gen; the fence is the highest marker present, so two attempts recovering
// at once can never lower it. Commit reads the fence first and fails with an
// error wrapping sink.ErrFenced when it is above the writer's generation.
//
// # Encoding
//
// By default (EncoderAuto) the engine encodes the files, with arrow-rs's
// Parquet writer: each batch crosses to Rust in one cgo call, without
// copying, and the bytes of each finished row group come back to be
// uploaded. At the defaults it took 0.41–0.50 of arrow-go's CPU a row,
// for files 1–2% larger (BENCHMARKS.md, "Parquet writer"). A build without
// cgo, or Config.Compression Gzip, encodes with arrow-go's pqarrow
// instead, as does Config.Encoder EncoderArrowGo. Both store the same
// Arrow schema (ARROW:schema, with its metadata, also as key-value
// metadata), the same logical types and list and map field names, and
// statistics on every column chunk: pyarrow reads the same table from
// either. What differs, for readers of the Parquet schema itself: the
// engine stores a decimal of up to 9 (18) digits as INT32 (INT64) rather
// than a fixed-length byte array, writes a page index (column and
// offset indexes), and truncates text min and max to 64 bytes.
//
// Files are zstd-compressed at level 1 (DefaultZstdLevel; the encoder's
// fastest speed). On the engine's output for Kafka events, a 16-column
// Postgres table and faker orders, that took 14–33% less writer CPU a
// row than level 3 for files between 6% smaller and 1% larger; level 6
// took 1.2–1.9 times level 3's CPU for at most 3% smaller files.
// Config.Compression and Config.CompressionLevel choose others; Snappy
// and Lz4Raw take within a quarter of zstd level 1's CPU and write
// files 1.7 to 2.3 times larger. Config.Dictionary decides which columns get
// dictionary encoding: by default (DictionaryAuto) only text or binary
// columns whose values, sampled from a file's first batch, repeat enough
// to gain from one, and Arrow dictionary columns. That writes faster and
// smaller files than a dictionary on every column (DictionaryAll, arrow-go's
// default), since zstd packs plain pages of unique values better than
// abandoned dictionaries. DictionaryNone takes a further 16–19% less CPU
// on the Postgres table and the orders, for files up to 2% larger and
// no dictionary pages for readers to filter on.
//
// # Held values
//
// The destination applies patches (sink.Capabilities.Patches), so the
// runner releases held values once it takes their column (a later
// version of this package takes a type it held back). The next attempt
// sends them in its first epoch as patch batches (sink.PatchMetadataKey);
// a lane keeps them until PreCommit, which stages them as a Parquet file
// of their own, marked in the committable. Files are immutable, so
// Commit releases by copy-on-write: it reads the staged patches, finds
// the files of the stream's current manifest that hold a patched row (by
// their _openetl_id column), writes a copy of each with the values set
// where the row has a null or lacks the column (the column is added,
// nullable, to a file without it) under a key of its own,
//
//	{stream}/data/{epoch:020d}-l{lane}-{n}-{nonce}-r{hash of the file's key}.parquet
//
// and lists the copies in the stream's next manifest version in place of
// the files they replace, beside the epoch's new files. The manifest
// write switches readers from the old files to the copies at once; a
// reader that follows the manifest sees each row once, with the row's
// _openetl_id and _openetl_seq. A crash before that write leaves the
// copies unlisted, and the Commit done again rewrites them (same keys,
// same contents); after it, the epoch is applied and is skipped. The
// copy's manifest entry has Patched (the epoch) and Replaced (the entry
// of the file it replaced): when Recover takes a lost epoch back (a
// Commit cut short between streams, then a staged file gone) the
// replaced file is listed again. A value set since, or a nested column written
// without the part that was held, is left as it is; no row is added.
// A replaced file stays while a kept manifest version lists it (a
// reader holding that version can still read it); the first Collect
// after the last such version was pruned (Config.ManifestHistory)
// removes it. With ManifestHistory -1 replaced files are kept.
//
// # Reading
//
// ReadManifest returns a stream's current manifest; each File.Key is a full
// key in the bucket, to be opened with the same bucket. Streams lists the
// streams under a prefix that have a manifest.
//
// # Limits
//
//   - Every stream is appended to: there is no merge by key and no
//     overwrite (Capabilities declares neither, so Build rejects
//     delivery.Merge and delivery.Overwrite, naming the stream).
//   - A manifest lists every file committed to its stream (the files are
//     never merged). Files copied to data/ by a Commit that crashed
//     before its manifest, or taken back from a lost epoch, stay there
//     unlisted: Collect removes only staged files.
//   - Interval and duration columns (MySQL TIME) can't be written: the
//     engine holds them back (Capabilities.Unsupported) until a later
//     version takes them (Held values).
//   - A release rewrites every file that holds a patched row, whole,
//     once per release: it reads the _openetl_id column of every file
//     of the stream and holds one rewritten file in memory at a time.
package parquet
