//! The engine: sans-IO and push-based. [`Engine::push`] takes one input
//! batch of one stream and returns its rows as Arrow, the rows it set
//! aside, and the lane boundaries. Per-stream schemas live in plain structs
//! ([`crate::state`]); scratch buffers are reused across pushes so the
//! steady state allocates per batch, not per row.
//!
//! A push runs in two passes: the scan parses every document once,
//! recording its fields as cells and widening the stream's column types;
//! the build then writes each column at its final type, in lane order.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};
use serde_json::Value;

use crate::columns::{Cell, ColumnBuilder};
use crate::error::Error;
use crate::infer::ColumnType;
use crate::input::RawRows;
use crate::json::{self, FieldSink};
use crate::meta::{self, OP_DELETE, RESERVED_PREFIX};
use crate::quarantine::{Quarantined, Reason, Reject};
use crate::route;
use crate::state::{self, StreamSchema};

/// The default for `max_document_bytes`: 16 MiB.
pub const DEFAULT_MAX_DOCUMENT_BYTES: usize = 16 << 20;
/// The most lanes an engine routes to.
pub const MAX_LANES: u32 = 1 << 16;

/// Engine settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Writer lanes rows are routed to; 1 to 65536. Default 1.
    pub lanes: u32,
    /// The largest payload accepted; larger ones are quarantined
    /// `too_large`. Default 16 MiB.
    pub max_document_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lanes: 1,
            max_document_bytes: DEFAULT_MAX_DOCUMENT_BYTES,
        }
    }
}

/// The result of one push.
#[derive(Debug)]
pub struct PushOutput {
    /// The rows taken: the stream's columns, then the metadata columns,
    /// grouped by lane. `None` when no row was taken.
    pub record: Option<RecordBatch>,
    /// `lanes + 1` entries: lane `i` is rows `[lane_offsets[i], lane_offsets[i+1])`.
    pub lane_offsets: Vec<usize>,
    /// The rows set aside, in input order.
    pub quarantined: Vec<Quarantined>,
}

/// Buffers reused across pushes.
#[derive(Default)]
struct Scratch {
    cells: Vec<Cell>,
    /// Accepted row k's cells are `cells[bounds[k]..bounds[k+1]]`.
    bounds: Vec<u32>,
    /// Accepted row k's input row index.
    accepted: Vec<u32>,
    /// Accepted row k's lane (only when lanes > 1).
    lanes: Vec<u32>,
    /// Unescaped strings of this push.
    arena: Vec<u8>,
    key_buf: Vec<u8>,
    id_buf: Vec<u8>,
    /// Per column: the row stamp of the last document that set it.
    seen: Vec<u64>,
    /// Per column: an upper bound of its text bytes in this push.
    col_bytes: Vec<usize>,
    ks: Vec<u32>,
    order: Vec<u32>,
    out_rows: Vec<u32>,
    offsets: Vec<usize>,
}

/// An engine: the schemas of the streams it has seen and its scratch
/// space. Not thread-safe; one per engine lane.
pub struct Engine {
    cfg: Config,
    streams: HashMap<String, StreamSchema>,
    scratch: Scratch,
    /// Stamps documents for duplicate-field detection; never repeats.
    stamp: u64,
}

impl Engine {
    /// A new engine, from a saved state if `state` is given.
    pub fn new(cfg: Config, state: Option<&Value>) -> Result<Engine, Error> {
        if cfg.lanes == 0 || cfg.lanes > MAX_LANES {
            return Err(Error::invalid_input(format!(
                "lanes must be between 1 and {MAX_LANES}, got {}",
                cfg.lanes
            )));
        }
        if cfg.max_document_bytes == 0 || cfg.max_document_bytes > i32::MAX as usize {
            return Err(Error::invalid_input(format!(
                "max_document_bytes must be between 1 and {}, got {}",
                i32::MAX,
                cfg.max_document_bytes
            )));
        }
        let streams = match state {
            Some(v) => state::import(v)?,
            None => HashMap::new(),
        };
        Ok(Engine {
            cfg,
            streams,
            scratch: Scratch::default(),
            stamp: 0,
        })
    }

    /// Parses a config as the C surface receives it:
    /// `{"lanes":N,"max_document_bytes":N,"state":<state or null>}`, where
    /// the state is the JSON value [`Engine::state`] wrote, or a string
    /// holding it. A flawed state is an `InvalidState` error.
    pub fn from_config_json(b: &[u8]) -> Result<Engine, Error> {
        let v: Value = serde_json::from_slice(b)
            .map_err(|e| Error::invalid_input(format!("engine config: {e}")))?;
        let m = v
            .as_object()
            .ok_or_else(|| Error::invalid_input("engine config is not an object"))?;
        let mut cfg = Config::default();
        let mut state = None;
        for (k, v) in m {
            match k.as_str() {
                "lanes" => {
                    cfg.lanes =
                        v.as_u64()
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(|| {
                                Error::invalid_input(
                                    "engine config: lanes is not a small unsigned integer",
                                )
                            })?;
                }
                "max_document_bytes" => {
                    cfg.max_document_bytes = v
                        .as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| {
                            Error::invalid_input(
                                "engine config: max_document_bytes is not an unsigned integer",
                            )
                        })?;
                }
                "state" => match v {
                    Value::Null => {}
                    Value::String(s) => {
                        let parsed = serde_json::from_str::<Value>(s).map_err(|e| {
                            Error::invalid_state(format!("engine state: not JSON: {e}"))
                        })?;
                        state = Some(parsed);
                    }
                    other => state = Some(other.clone()),
                },
                other => {
                    return Err(Error::invalid_input(format!(
                        "engine config: unknown field {other:?}"
                    )));
                }
            }
        }
        Engine::new(cfg, state.as_ref())
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The saved state: each stream's columns.
    pub fn state(&self) -> Vec<u8> {
        state::export(&self.streams)
    }

    /// The columns of `stream` so far (name, type), in output order.
    pub fn columns(&self, stream: &str) -> Vec<(String, ColumnType)> {
        self.streams
            .get(stream)
            .map(|s| s.columns.iter().map(|c| (c.name.clone(), c.ty)).collect())
            .unwrap_or_default()
    }

    /// Turns one batch of `stream` into Arrow. Every input row is either in
    /// the output record or quarantined, never both.
    pub fn push(
        &mut self,
        stream: &str,
        rows: &RawRows<'_>,
        synced_at_micros: i64,
    ) -> Result<PushOutput, Error> {
        if stream.is_empty() {
            return Err(Error::invalid_input("empty stream name"));
        }
        if rows.len() > u32::MAX as usize {
            return Err(Error::invalid_input("batch has more than 2^32 rows"));
        }
        if !self.streams.contains_key(stream) {
            self.streams
                .insert(stream.to_string(), StreamSchema::default());
        }
        let schema = self
            .streams
            .get_mut(stream)
            .ok_or_else(|| Error::internal("stream vanished"))?;
        let sc = &mut self.scratch;
        sc.cells.clear();
        sc.bounds.clear();
        sc.bounds.push(0);
        sc.accepted.clear();
        sc.lanes.clear();
        sc.arena.clear();
        sc.col_bytes.clear();
        sc.col_bytes.resize(schema.len(), 0);
        sc.seen.resize(schema.len(), 0);
        let mut quarantined = Vec::new();
        let lanes = self.cfg.lanes;
        let payload_buf = rows.payload_buffer();

        for i in 0..rows.len() {
            let op = rows.op(i);
            if meta::op_name(op).is_none() {
                quarantined.push(Quarantined {
                    row: i as u32,
                    reason: Reason::Parse,
                    detail: format!("unknown op code {op} (want 1 insert, 2 update or 3 delete)"),
                });
                continue;
            }
            let payload = rows.payload(i);
            if payload.len() > self.cfg.max_document_bytes {
                quarantined.push(Quarantined {
                    row: i as u32,
                    reason: Reason::TooLarge,
                    detail: format!(
                        "payload of {} bytes is over the limit of {} bytes",
                        payload.len(),
                        self.cfg.max_document_bytes
                    ),
                });
                continue;
            }
            self.stamp += 1;
            let cells_mark = sc.cells.len();
            let arena_mark = sc.arena.len();
            let ncols = schema.len();
            // A delete may come without a document (a Kafka tombstone, a
            // key-only CDC delete): its row has only the metadata.
            let result = if payload.is_empty() && op == OP_DELETE {
                Ok(())
            } else {
                let mut sink = RowSink {
                    schema: &mut *schema,
                    cells: &mut sc.cells,
                    seen: &mut sc.seen,
                    stamp: self.stamp,
                    base: rows.payload_start(i),
                    next: 0,
                };
                json::scan_object(payload, &mut sc.key_buf, &mut sc.arena, &mut sink)
            };
            match result {
                Ok(()) => {
                    sc.col_bytes.resize(schema.len(), 0);
                    for c in &sc.cells[cells_mark..] {
                        let col = &mut schema.columns[c.col as usize];
                        col.ty = col.ty.widen(c.kind.column_type());
                        sc.col_bytes[c.col as usize] += (c.end - c.start) as usize;
                    }
                    sc.accepted.push(i as u32);
                    sc.bounds.push(sc.cells.len() as u32);
                    if lanes > 1 {
                        sc.lanes.push(route::lane_of(rows.key(i), payload, lanes));
                    }
                }
                Err(rej) => {
                    sc.cells.truncate(cells_mark);
                    sc.arena.truncate(arena_mark);
                    schema.truncate(ncols);
                    sc.seen.truncate(ncols);
                    quarantined.push(Quarantined {
                        row: i as u32,
                        reason: rej.reason,
                        detail: rej.detail,
                    });
                }
            }
        }

        let n = sc.accepted.len();
        // Group by lane. With one lane the output order is the input order.
        if lanes > 1 {
            sc.ks.clear();
            sc.ks.extend(0..n as u32);
            route::group(&sc.ks, &sc.lanes, lanes, &mut sc.order, &mut sc.offsets);
            sc.out_rows.clear();
            sc.out_rows
                .extend(sc.order.iter().map(|&k| sc.accepted[k as usize]));
        } else {
            sc.offsets.clear();
            sc.offsets.extend([0, n]);
        }
        let lane_offsets = sc.offsets.clone();
        if n == 0 {
            return Ok(PushOutput {
                record: None,
                lane_offsets,
                quarantined,
            });
        }

        let mut builders: Vec<ColumnBuilder> = schema
            .columns
            .iter()
            .zip(&sc.col_bytes)
            .map(|(c, &bytes)| ColumnBuilder::new(c.ty, n, bytes))
            .collect();
        let mut put = |row: usize, k: usize| -> Result<(), Error> {
            let (a, b) = (sc.bounds[k] as usize, sc.bounds[k + 1] as usize);
            for cell in &sc.cells[a..b] {
                builders[cell.col as usize].push(row, cell, payload_buf, &sc.arena)?;
            }
            Ok(())
        };
        if lanes > 1 {
            for (row, &k) in sc.order.iter().enumerate() {
                put(row, k as usize)?;
            }
        } else {
            for k in 0..n {
                put(k, k)?;
            }
        }
        let out_rows: &[u32] = if lanes > 1 {
            &sc.out_rows
        } else {
            &sc.accepted
        };

        let mut fields: Vec<Field> = schema
            .columns
            .iter()
            .map(|c| Field::new(c.name.as_str(), c.ty.data_type(), true))
            .collect();
        fields.extend(meta::fields());
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(fields.len());
        for b in builders {
            cols.push(b.finish(n)?);
        }
        cols.extend(meta::columns(
            stream.as_bytes(),
            rows,
            out_rows,
            synced_at_micros,
            &mut sc.id_buf,
        )?);
        let record = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?;
        Ok(PushOutput {
            record: Some(record),
            lane_offsets,
            quarantined,
        })
    }
}

/// Records one document's fields as cells, adding columns as needed.
struct RowSink<'a> {
    schema: &'a mut StreamSchema,
    cells: &'a mut Vec<Cell>,
    seen: &'a mut Vec<u64>,
    stamp: u64,
    /// The document's offset in the payload buffer.
    base: usize,
    /// The column the next field most likely is: documents of a stream
    /// usually list fields in one order, so this skips the hash lookup.
    next: usize,
}

impl FieldSink for RowSink<'_> {
    #[inline]
    fn field(&mut self, key: &str, v: json::Value) -> Result<(), Reject> {
        let col = match self.schema.columns.get(self.next) {
            Some(c) if c.name == key => self.next,
            _ => match self.schema.lookup(key) {
                Some(c) => c,
                None => {
                    if key.starts_with(RESERVED_PREFIX) {
                        return Err(Reject::parse(format!(
                            "field {key:?} uses the prefix {RESERVED_PREFIX:?}, reserved for metadata columns"
                        )));
                    }
                    self.seen.push(0);
                    self.schema.add(key, ColumnType::Null)
                }
            },
        };
        if self.seen[col] == self.stamp {
            return Err(Reject::parse(format!("duplicate field {key:?}")));
        }
        self.seen[col] = self.stamp;
        self.next = col + 1;
        let (start, end) = if v.in_arena {
            (v.start, v.end)
        } else {
            (v.start + self.base, v.end + self.base)
        };
        self.cells.push(Cell {
            col: col as u32,
            kind: v.kind,
            in_arena: v.in_arena,
            start: start as u32,
            end: end as u32,
            num: v.num,
        });
        Ok(())
    }
}
