package parquet

import (
	"fmt"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
)

// OpenDir opens the local directory dir, created if missing, as a bucket
// for Config.Bucket. It is fileblob with the options a destination needs
// on any mount: each file is written to a temporary file beside its
// final name and renamed into place (fileblob's default, a temporary file
// in os.TempDir, fails with "invalid cross-device link" when dir is on
// another file system, and a crash leaves the temporary file there), and
// no ".attrs" side files, which nothing here reads and which Parquet
// readers listing a directory would trip over. The caller closes the
// bucket after the Destination's last use.
//
// Opening a file:// URL with blob.OpenBucket does the same with
// "?no_tmp_dir=1&metadata=skip&create_dir=1".
func OpenDir(dir string) (*blob.Bucket, error) {
	b, err := fileblob.OpenBucket(dir, &fileblob.Options{
		CreateDir: true,
		NoTempDir: true,
		Metadata:  fileblob.MetadataDontWrite,
	})
	if err != nil {
		return nil, fmt.Errorf("parquet: open directory %s: %w", dir, err)
	}
	return b, nil
}
