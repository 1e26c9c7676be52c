//! Writes Arrow IPC files (the engine's output, dumped by sink/parquet's
//! BenchmarkCodecs with OPENETL_BENCH_IPC_DIR) as Parquet with arrow-rs,
//! under the same codec settings as that benchmark, into memory, and
//! prints CPU nanoseconds a row and file bytes a row for each. Run by
//! scripts/bench-parquet.sh; not part of the build or the tests.
//!
//!     openetl-parquet-rs-bench RUNS FILE.arrow...

use std::fs::File;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::reader::FileReader;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

fn cpu_nanos() -> i64 {
    let mut ru: libc_rusage = unsafe { std::mem::zeroed() };
    unsafe { getrusage(0, &mut ru) };
    (ru.utime.sec * 1_000_000 + ru.utime.usec + ru.stime.sec * 1_000_000 + ru.stime.usec) * 1000
}

#[repr(C)]
struct Timeval {
    sec: i64,
    usec: i64,
}

#[repr(C)]
struct libc_rusage {
    utime: Timeval,
    stime: Timeval,
    rest: [i64; 14],
}

extern "C" {
    fn getrusage(who: i32, usage: *mut libc_rusage) -> i32;
}

fn props(name: &str) -> WriterProperties {
    let b = WriterProperties::builder().set_max_row_group_row_count(Some(131072));
    let b = match name {
        "zstd-3" => b.set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap())),
        "zstd-1" => b.set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap())),
        "zstd-6" => b.set_compression(Compression::ZSTD(ZstdLevel::try_new(6).unwrap())),
        "snappy" => b.set_compression(Compression::SNAPPY),
        "lz4raw" => b.set_compression(Compression::LZ4_RAW),
        "none" => b.set_compression(Compression::UNCOMPRESSED),
        "zstd-1-dictnone" => b
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap()))
            .set_dictionary_enabled(false),
        _ => unreachable!(),
    };
    // arrow-rs's default: a dictionary on every column (like the Go
    // writer's DictionaryAll), but the unique metadata columns.
    b.set_column_dictionary_enabled("_openetl_id".into(), false)
        .set_column_dictionary_enabled("_openetl_seq".into(), false)
        .build()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args[1].parse().expect("RUNS");
    for path in &args[2..] {
        let reader = FileReader::try_new(File::open(path).expect("open"), None).expect("ipc");
        let schema = reader.schema();
        let batches: Vec<RecordBatch> = reader.map(|b| b.expect("batch")).collect();
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let name = std::path::Path::new(path)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .to_string();
        for v in [
            "zstd-3",
            "zstd-1",
            "zstd-6",
            "snappy",
            "lz4raw",
            "none",
            "zstd-1-dictnone",
        ] {
            let mut bytes = 0;
            let c0 = cpu_nanos();
            for _ in 0..runs {
                let mut out = Vec::with_capacity(64 << 20);
                let mut w = ArrowWriter::try_new(&mut out, Arc::clone(&schema), Some(props(v)))
                    .expect("writer");
                for b in &batches {
                    w.write(b).expect("write");
                }
                w.close().expect("close");
                bytes = out.len();
            }
            let cpu = (cpu_nanos() - c0) as f64 / (rows * runs) as f64;
            println!(
                "{name}/{v}\tarrow-rs\t{cpu:.0} cpu-ns/row\t{:.2} B/row",
                bytes as f64 / rows as f64
            );
        }
    }
}
