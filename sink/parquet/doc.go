// Package parquet is a stage-and-apply destination that writes each stream
// as zstd-compressed Parquet files on a gocloud.dev bucket (s3, gs, azblob,
// file, mem) and makes them visible, exactly once, through a versioned
// manifest per stream.
//
// # How an epoch travels
//
// Each writer lane keeps one open Parquet file per stream and appends the
// Arrow batches it is given (pqarrow WriteBuffered, row groups of
// Config.RowGroupRows rows, the Arrow schema stored in the file). A file is
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
// version lists are never removed, so a reader holding an older
// version can still read its files.
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
// Files are zstd-compressed. Config.Dictionary decides which columns get
// dictionary encoding: by default (DictionaryAuto) only text or binary
// columns whose values, sampled from a file's first batch, repeat enough
// to gain from one, and Arrow dictionary columns. That writes faster and
// smaller files than a dictionary on every column (DictionaryAll, arrow-go's
// default), since zstd packs plain pages of unique values better than
// abandoned dictionaries.
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
//     engine holds them back (Capabilities.Unsupported). Files are never
//     rewritten, so the destination applies no patches
//     (Capabilities.Patches is false): held values stay under the
//     pipeline's _held/, even once a later version takes their type.
package parquet
