package parquet_test

import (
	"testing"

	"github.com/openetl/etl/sink/parquet"
)

// TestCompressionLevel: a level out of its codec's range, or for a codec
// without levels, is refused; the default is DefaultZstdLevel; another
// level changes the files, which still read back whole.
func TestCompressionLevel(t *testing.T) {
	b := buckets[0].open(t)
	for _, bad := range []parquet.Config{
		{Compression: parquet.Zstd, CompressionLevel: 23},
		{Compression: parquet.Zstd, CompressionLevel: -1},
		{Compression: parquet.Gzip, CompressionLevel: 10},
		{Compression: parquet.Snappy, CompressionLevel: 3},
		{Compression: parquet.Uncompressed, CompressionLevel: 1},
	} {
		bad.Bucket = b
		if _, err := parquet.New(bad); err == nil {
			t.Errorf("New(%v, level %d): no error", bad.Compression, bad.CompressionLevel)
		}
	}
	size := func(cfg parquet.Config) int64 {
		t.Helper()
		b := buckets[0].open(t)
		w := newWriter(t, newDest(t, b, cfg), "p", 0)
		recoverGen(t, w, 1, nil)
		write(t, w, "s", 0, 20_000, false)
		commit(t, w, 1, preCommit(t, w, 1))
		ids, _ := readStream(t, b, "", "s")
		wantIDs(t, ids, 20_000)
		var n int64
		for _, f := range manifest(t, b, "", "s").Files {
			n += f.Bytes
		}
		return n
	}
	def, one := size(parquet.Config{}), size(parquet.Config{CompressionLevel: parquet.DefaultZstdLevel})
	three, best := size(parquet.Config{CompressionLevel: 3}), size(parquet.Config{CompressionLevel: 19})
	t.Logf("zstd bytes: default %d, level 1 %d, level 3 %d, level 19 %d", def, one, three, best)
	if def != one {
		t.Errorf("default level wrote %d bytes, level %d %d: not the default", def, parquet.DefaultZstdLevel, one)
	}
	if three == one || best == one {
		t.Errorf("levels 3 (%d bytes) and 19 (%d) against 1 (%d): the level is not applied", three, best, one)
	}
	g1, g9 := size(parquet.Config{Compression: parquet.Gzip, CompressionLevel: 1}), size(parquet.Config{Compression: parquet.Gzip, CompressionLevel: 9})
	if g9 == g1 {
		t.Errorf("gzip level 9 wrote %d bytes, level 1 %d: the level is not applied", g9, g1)
	}
}
