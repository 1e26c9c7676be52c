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
//   - Every stream is appended to: there is no merge by key (Build
//     rejects delivery.Merge) and no overwrite (Build rejects
//     delivery.Overwrite too).
//   - A manifest lists every file ever committed to its stream, and old
//     manifest versions are kept; staged files of crashed attempts are not
//     removed yet.
//   - Interval and duration columns (MySQL TIME) can't be written: the
//     engine holds them back (Capabilities.Unsupported).
package parquet
