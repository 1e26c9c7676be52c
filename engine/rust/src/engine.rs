//! The engine: sans-IO and push-based. [`Engine::push`] takes one input
//! batch of one stream and returns its rows as Arrow, the rows it set
//! aside, and the lane boundaries. Per-stream schemas live in plain structs
//! ([`crate::state`]); scratch buffers are reused across pushes so the
//! steady state allocates per batch, not per row.
//!
//! A push runs in two passes: the scan parses every document once,
//! recording its fields as cells and widening the stream's column types;
//! the build then writes each column at its final type, in lane order.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::Field;
use serde_json::Value;

use crate::coerce::{self, Val};
use crate::columns::{Cell, ColumnBuilder};
use crate::error::Error;
use crate::infer::ColumnType;
use crate::infer::Kind;
use crate::input::RawRows;
use crate::json::{self, FieldSink};
use crate::meta::{self, OP_DELETE, RESERVED_PREFIX};
use crate::nested::JType;
use crate::policy::{self, Policies};
use crate::quarantine::{Quarantined, Reason, Reject};
use crate::route;
use crate::rows;
use crate::state::{self, Policy, StreamSchema};
use crate::tape::{self, Tape};
use crate::{hold, names};

mod config;
mod rowpush;

pub use config::TABLE_METADATA_KEY;
use config::{apply_names, out_schema};

/// The default for `max_document_bytes`: 16 MiB.
pub const DEFAULT_MAX_DOCUMENT_BYTES: usize = 16 << 20;
/// The most lanes an engine routes to.
pub const MAX_LANES: u32 = 1 << 16;

/// Engine settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Writer lanes rows are routed to; 1 to 65536. Default 1.
    pub lanes: u32,
    /// The largest payload accepted; larger ones are quarantined
    /// `too_large`. Default 16 MiB.
    pub max_document_bytes: usize,
    /// Per-stream settings: format, declared columns, schema policy.
    pub streams: Vec<StreamSpec>,
    /// The destination's naming rules; inactive (the default) passes
    /// names through.
    pub naming: names::Rules,
    /// Type classes the destination can't take (see [`crate::hold`]):
    /// such columns are held back.
    pub unsupported: Vec<String>,
    /// Streams given their destination names when the engine is made, in
    /// this order, before any push: the table name (under active rules)
    /// and a declared stream's column names. Names then don't depend on
    /// which stream's rows arrive first, and the runner can tell writers
    /// every table's name before the first batch.
    pub tables: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lanes: 1,
            max_document_bytes: DEFAULT_MAX_DOCUMENT_BYTES,
            streams: Vec::new(),
            naming: names::Rules::default(),
            unsupported: Vec::new(),
            tables: Vec::new(),
        }
    }
}

/// One stream's settings. A spec overrides what a saved state says about
/// the stream's policy and declared columns; inferred columns are kept.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSpec {
    pub name: String,
    pub policy: Policy,
    /// The declared columns of a row stream; `None` for a JSON stream.
    pub declared: Option<rows::DeclStream>,
    /// Inference options of a JSON stream.
    pub opts: state::JsonOpts,
    /// Column and row policies (see [`crate::policy`]); configuration
    /// only, never in the saved state.
    pub policies: Policies,
    /// A keyed JSON stream's key fields: a document without a non-null
    /// value for each is quarantined `missing_key`. Configuration only.
    pub key_columns: Vec<String>,
}

/// A schema outcome of a push, for the runner's schema events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaChange {
    pub stream: String,
    pub column: String,
    /// "added", "widened", "blocked" (freeze quarantined a document) or
    /// "discarded" (discard dropped a new field).
    pub kind: &'static str,
    /// The column's type before ("" when new) and after (or wanted).
    pub from: &'static str,
    pub to: &'static str,
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
    /// The rows a row filter dropped (neither in the record nor
    /// quarantined).
    pub filtered: usize,
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
    /// Per column: whether its name is a plain JSON key
    /// ([`json::plain_key`]), which the scan can match in place.
    plain: Vec<bool>,
    /// Per column: the row stamp of the last document that set it.
    seen: Vec<u64>,
    /// Per column: an upper bound of its text bytes in this push.
    col_bytes: Vec<usize>,
    ks: Vec<u32>,
    order: Vec<u32>,
    out_rows: Vec<u32>,
    offsets: Vec<usize>,
    /// Column types at the start of a push, to report changes.
    before: Vec<ColumnType>,
    /// Declared rows: coerced values, row-major, `ncols` per accepted row.
    vals: Vec<Val>,
    /// Declared rows: list elements.
    elems: Vec<Val>,
    unescape: Vec<u8>,
    /// Parsed nested values of this push (cells of nested columns hold
    /// their root node).
    tape: Tape,
    /// A document's column changes: (column, new type, new tree).
    proposals: Vec<(u32, ColumnType, Option<JType>)>,
    before_trees: Vec<Option<JType>>,
    /// Policies: the output rows' input indices, ops and filter truth
    /// values.
    pol_rows: Vec<u32>,
    pol_ops: Vec<u8>,
    pol_eval: Vec<u8>,
}

/// An engine: the schemas of the streams it has seen and its scratch
/// space. Not thread-safe; one per engine lane.
pub struct Engine {
    cfg: Config,
    streams: HashMap<String, StreamSchema>,
    scratch: Scratch,
    /// Stamps documents for duplicate-field detection; never repeats.
    stamp: u64,
    /// The schema outcomes of the last push.
    changes: Vec<SchemaChange>,
    /// Destination table names given, lowercased.
    tables: HashSet<String>,
    /// The values held back by the last push.
    held: Vec<hold::Held>,
    /// Each stream's policies, when it has any.
    policies: HashMap<String, Policies>,
    /// Each keyed JSON stream's key fields, when it names them.
    key_columns: HashMap<String, Vec<String>>,
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
        let mut streams = match state {
            Some(v) => state::import(v)?,
            None => HashMap::new(),
        };
        let mut tables = streams
            .values()
            .filter_map(|s| s.names.table.as_ref().map(|t| t.to_lowercase()))
            .collect();
        let mut policies = HashMap::new();
        let mut key_columns = HashMap::new();
        for spec in &cfg.streams {
            let st = streams.entry(spec.name.clone()).or_default();
            st.policy = spec.policy;
            st.declared = spec.declared.clone();
            st.opts = spec.opts;
            if spec.declared.is_none() && spec.opts.keyed && !spec.key_columns.is_empty() {
                key_columns.insert(spec.name.clone(), spec.key_columns.clone());
            }
            if spec.policies.is_empty() {
                continue;
            }
            let p = &spec.policies;
            match &st.declared {
                Some(d) => {
                    let cols: Vec<(&str, arrow_schema::DataType)> = d
                        .columns
                        .iter()
                        .map(|c| (c.name.as_str(), c.decl.data_type()))
                        .collect();
                    p.check_declared(&cols).map_err(|e| {
                        Error::invalid_input(format!("engine config: stream {:?}: {e}", spec.name))
                    })?;
                }
                None => {
                    // A JSON column under a text policy is utf8, from
                    // its first value or, if it has a type already, from
                    // now on (a widening).
                    for c in st.columns.iter_mut() {
                        if p.wants_text(&c.name) {
                            c.ty = ColumnType::Utf8;
                            c.tree = None;
                        }
                    }
                }
            }
            policies.insert(spec.name.clone(), p.clone());
        }
        for name in &cfg.tables {
            if name.is_empty() {
                return Err(Error::invalid_input(
                    "engine config: an empty stream name in tables",
                ));
            }
            let st = streams.entry(name.clone()).or_default();
            config::name_ahead(&cfg.naming, &mut tables, st, name, policies.get(name));
        }
        Ok(Engine {
            cfg,
            streams,
            scratch: Scratch::default(),
            stamp: 0,
            changes: Vec::new(),
            tables,
            held: Vec::new(),
            policies,
            key_columns,
        })
    }

    /// The schema outcomes of the last push.
    pub fn changes(&self) -> &[SchemaChange] {
        &self.changes
    }

    /// The values the last push held back.
    pub fn held(&self) -> &[hold::Held] {
        &self.held
    }

    /// Turns held values of `stream`'s column (by destination name) back
    /// into an array of the column's type.
    pub fn release(&self, stream: &str, column: &str, values: &[&[u8]]) -> Result<ArrayRef, Error> {
        let st = self
            .streams
            .get(stream)
            .ok_or_else(|| Error::invalid_input(format!("unknown stream {stream:?}")))?;
        hold::release(st, column, values)
    }

    /// Whether a column of type `dt` is held back: its type, or a type
    /// inside it (a list's element, a struct's field), is one the
    /// destination can't take.
    fn is_held(unsupported: &[String], dt: &arrow_schema::DataType) -> bool {
        use arrow_schema::DataType;
        if unsupported.is_empty() {
            return false;
        }
        unsupported.iter().any(|u| u == hold::type_class(dt))
            || match dt {
                DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                    Self::is_held(unsupported, f.data_type())
                }
                DataType::Struct(fs) => {
                    fs.iter().any(|f| Self::is_held(unsupported, f.data_type()))
                }
                _ => false,
            }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The saved state: each stream's columns.
    pub fn state(&self) -> Vec<u8> {
        state::export(&self.streams)
    }

    /// The Arrow types of `stream`'s columns so far, in output order.
    pub fn column_types(&self, stream: &str) -> Vec<(String, arrow_schema::DataType)> {
        self.streams
            .get(stream)
            .map(|s| {
                s.columns
                    .iter()
                    .map(|c| (c.name.clone(), c.data_type()))
                    .collect()
            })
            .unwrap_or_default()
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
        self.changes.clear();
        self.held.clear();
        if !self.streams.contains_key(stream) {
            self.streams
                .insert(stream.to_string(), StreamSchema::default());
        }
        if self
            .streams
            .get(stream)
            .is_some_and(|s| s.declared.is_some())
        {
            return self.push_rows(stream, rows, synced_at_micros);
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
        sc.plain.clear();
        sc.plain
            .extend(schema.columns.iter().map(|c| json::plain_key(&c.name)));
        sc.before.clear();
        sc.before.extend(schema.columns.iter().map(|c| c.ty));
        let policy = schema.policy;
        let opts = schema.opts;
        let keyed = opts.keyed;
        sc.tape.clear();
        sc.proposals.clear();
        sc.before_trees.clear();
        sc.before_trees
            .extend(schema.columns.iter().map(|c| c.tree.clone()));
        let mut blocked: Vec<(String, &'static str)> = Vec::new();
        let mut discarded: Vec<String> = Vec::new();
        let mut quarantined = Vec::new();
        let lanes = self.cfg.lanes;
        let payload_buf = rows.payload_buffer();
        let pols = self.policies.get(stream);
        let key_cols = self.key_columns.get(stream);

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
            if keyed && rows.key(i).is_empty() {
                quarantined.push(Quarantined {
                    row: i as u32,
                    reason: Reason::MissingKey,
                    detail: "the stream has a primary key but the record has none".into(),
                });
                continue;
            }
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
            let mut classify = false;
            let result = if payload.is_empty() && op == OP_DELETE {
                Ok(())
            } else {
                let mut sink = RowSink {
                    schema: &mut *schema,
                    cells: &mut sc.cells,
                    seen: &mut sc.seen,
                    plain: &mut sc.plain,
                    stamp: self.stamp,
                    base: rows.payload_start(i),
                    next: 0,
                    policy,
                    blocked: &mut blocked,
                    discarded: &mut discarded,
                    col_bytes: &mut sc.col_bytes,
                    opts,
                    classify: false,
                    policies: pols,
                };
                let r = json::scan_object(payload, &mut sc.key_buf, &mut sc.arena, &mut sink);
                classify = sink.classify;
                r
            };
            // A keyed stream's document must carry each key field, not
            // null: without it the row can't be merged or deleted by
            // key (a merge would fold every such row into one).
            let result = result.and_then(|()| match key_cols {
                Some(keys) if !(payload.is_empty() && op == OP_DELETE) => {
                    for k in keys {
                        let c = schema.lookup(k);
                        let present = c.is_some_and(|c| {
                            sc.cells[cells_mark..]
                                .iter()
                                .any(|cell| cell.col as usize == c && cell.kind != Kind::Null)
                        });
                        if !present {
                            return Err(Reject::new(
                                Reason::MissingKey,
                                format!("key field {k:?} is missing or null"),
                            ));
                        }
                    }
                    Ok(())
                }
                _ => Ok(()),
            });
            // Classify the document's values against its columns: the
            // type each column would widen to and, for nested values,
            // the shape; under freeze any change blocks the document.
            // Skipped when every value fits its column as it is (the
            // steady state), which RowSink saw.
            let nested_mark = sc.tape.mark();
            let result = result.and_then(|()| {
                if !classify {
                    return Ok(());
                }
                for ci in cells_mark..sc.cells.len() {
                    let mut c = sc.cells[ci];
                    if opts.timestamps && c.kind == Kind::Text {
                        let src = if c.in_arena {
                            &sc.arena[..]
                        } else {
                            payload_buf
                        };
                        if let Some(us) = src
                            .get(c.start as usize..c.end as usize)
                            .and_then(coerce::rfc3339_micros)
                        {
                            c.kind = Kind::Timestamp;
                            c.num = us as u64;
                            sc.cells[ci] = c;
                        }
                    }
                    let col = &schema.columns[c.col as usize];
                    let kt = c.kind.column_type_with(c.num, opts.nested_text);
                    // Fast path: the value fits the column as it is.
                    if kt == ColumnType::Null || (kt == col.ty && kt != ColumnType::Nested) {
                        continue;
                    }
                    let mut to = col.ty.widen(kt);
                    let mut tree = None;
                    if to == ColumnType::Nested && c.kind == Kind::Nested {
                        let root = sc
                            .tape
                            .push(payload_buf, c.start as usize, c.end as usize)?;
                        // Steady state: the value fits the column's tree,
                        // checked in place without building its type.
                        let fits = col.tree.as_ref().is_some_and(|t| {
                            t.is_nested() && sc.tape.fits(payload_buf, t, root, 1)
                        });
                        if !fits {
                            let t = sc.tape.infer(payload_buf, root, 1);
                            if let Some(k) = t.bad_name() {
                                return Err(if k.is_empty() {
                                    Reject::parse(
                                        "a nested field name is empty, which no destination takes",
                                    )
                                } else {
                                    nul_name(k)
                                });
                            }
                            let joined = match &col.tree {
                                Some(old) => old.join(&t),
                                None => t,
                            };
                            if joined.is_nested() {
                                if col.tree.as_ref() != Some(&joined) {
                                    tree = Some(joined);
                                }
                            } else {
                                // An object meeting an array: JSON text from now on.
                                to = ColumnType::Utf8;
                            }
                        }
                        sc.cells[ci].num = u64::from(root);
                    }
                    if policy == Policy::Freeze && (to != col.ty || tree.is_some()) {
                        if !blocked.iter().any(|(n, _)| *n == col.name) {
                            blocked.push((col.name.clone(), to.name()));
                        }
                        return Err(Reject::new(
                            Reason::TypeConflict,
                            format!(
                                "field {:?} would change the frozen column's type {} to {}",
                                col.name,
                                col.ty.name(),
                                to.name()
                            ),
                        ));
                    }
                    if to != col.ty || tree.is_some() {
                        sc.proposals.push((c.col, to, tree));
                    }
                }
                Ok(())
            });
            match result {
                Ok(()) => {
                    if !sc.proposals.is_empty() {
                        for (col, to, tree) in sc.proposals.drain(..) {
                            let col = &mut schema.columns[col as usize];
                            col.ty = to;
                            if to != ColumnType::Nested {
                                col.tree = None;
                            } else if tree.is_some() {
                                col.tree = tree;
                            }
                        }
                    }
                    sc.accepted.push(i as u32);
                    sc.bounds.push(sc.cells.len() as u32);
                    if lanes > 1 {
                        sc.lanes.push(route::lane_of(rows.key(i), payload, lanes));
                    }
                }
                Err(rej) => {
                    sc.tape.truncate(nested_mark);
                    sc.cells.truncate(cells_mark);
                    sc.arena.truncate(arena_mark);
                    sc.proposals.clear();
                    schema.truncate(ncols);
                    sc.seen.truncate(ncols);
                    sc.plain.truncate(ncols);
                    sc.col_bytes.truncate(ncols);
                    quarantined.push(Quarantined {
                        row: i as u32,
                        reason: rej.reason,
                        detail: rej.detail,
                    });
                }
            }
        }

        for (i, c) in schema.columns.iter().enumerate() {
            match sc.before.get(i) {
                None => self.changes.push(SchemaChange {
                    stream: stream.to_string(),
                    column: c.name.clone(),
                    kind: "added",
                    from: "",
                    to: c.ty.name(),
                }),
                Some(&b) if b != c.ty || sc.before_trees.get(i).is_some_and(|t| *t != c.tree) => {
                    self.changes.push(SchemaChange {
                        stream: stream.to_string(),
                        column: c.name.clone(),
                        kind: "widened",
                        from: b.name(),
                        to: c.ty.name(),
                    })
                }
                _ => {}
            }
        }
        for (col, to) in blocked {
            let from = schema
                .lookup(&col)
                .map_or("", |i| schema.columns[i].ty.name());
            self.changes.push(SchemaChange {
                stream: stream.to_string(),
                column: col,
                kind: "blocked",
                from,
                to,
            });
        }
        for col in discarded {
            self.changes.push(SchemaChange {
                stream: stream.to_string(),
                column: col,
                kind: "discarded",
                from: "",
                to: "",
            });
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
                filtered: 0,
            });
        }

        let pol = self.policies.get(stream);
        // Columns the policies leave out (and the filter doesn't read)
        // are not built.
        let skip: Vec<bool> = match pol {
            Some(p) => schema.columns.iter().map(|c| p.skips(&c.name)).collect(),
            None => Vec::new(),
        };
        let skipped = |i: usize| skip.get(i).copied().unwrap_or(false);
        // Nested columns whose shape has parts the destination can't
        // write: the part it can (None: nothing, the column is held).
        let unsupported = &self.cfg.unsupported;
        let pruned: Vec<Option<Option<JType>>> = schema
            .columns
            .iter()
            .map(|c| match (&c.tree, c.ty) {
                (Some(t), ColumnType::Nested) if t.needs_pruning(unsupported) => {
                    Some(t.writable(unsupported))
                }
                _ => None,
            })
            .collect();
        let partial: Vec<Option<&JType>> = pruned
            .iter()
            .map(|p| p.as_ref().and_then(Option::as_ref))
            .collect();
        let held_cols: Vec<bool> = schema
            .columns
            .iter()
            .zip(&pruned)
            .enumerate()
            .map(|(i, (c, p))| {
                !skipped(i)
                    && match p {
                        Some(w) => w.is_none(),
                        None => Self::is_held(unsupported, &c.data_type()),
                    }
            })
            .collect();
        let in_order: &[u32] = if lanes > 1 {
            &sc.out_rows
        } else {
            &sc.accepted
        };
        // The filter first, on an append stream whose filter reads plain
        // columns only: those are built for every row, the filter
        // decides, and the other columns are built for the kept rows
        // only (the dropped ones are parsed, never built nor copied).
        let mut pre: Option<PreFilter> = None;
        if let Some(p) = pol
            && let Some(f) = &p.filter
            && !p.merge
        {
            let reads: Vec<bool> = schema.columns.iter().map(|c| f.reads(&c.name)).collect();
            let plain = schema.columns.iter().enumerate().all(|(i, c)| {
                !reads[i] || (c.ty != ColumnType::Nested && c.tree.is_none() && !held_cols[i])
            });
            if plain {
                let mut fb: Vec<Option<ColumnBuilder>> = schema
                    .columns
                    .iter()
                    .zip(&sc.col_bytes)
                    .zip(&reads)
                    .map(|((c, &bytes), &r)| r.then(|| ColumnBuilder::new(c.ty, n, bytes)))
                    .collect();
                for row in 0..n {
                    let k = if lanes > 1 {
                        sc.order[row] as usize
                    } else {
                        row
                    };
                    let (a, b) = (sc.bounds[k] as usize, sc.bounds[k + 1] as usize);
                    for cell in &sc.cells[a..b] {
                        if let Some(b) = fb[cell.col as usize].as_mut() {
                            b.push(row, cell, payload_buf, &sc.arena)?;
                        }
                    }
                }
                let fcols = fb
                    .into_iter()
                    .map(|b| b.map(|b| b.finish(n)).transpose())
                    .collect::<Result<Vec<_>, Error>>()?;
                sc.pol_ops.clear();
                sc.pol_ops
                    .extend(in_order.iter().map(|&r| rows.op(r as usize)));
                let col = |name: &str| schema.lookup(name).and_then(|i| fcols[i].as_ref());
                // Not merged: nothing is set aside here.
                let dropped = policy::decide(p, n, &col, &sc.pol_ops, &mut sc.pol_eval).dropped;
                let keep = &sc.pol_eval;
                let mut map = Vec::with_capacity(n);
                let mut next = 0u32;
                for &d in keep.iter() {
                    map.push(if d == policy::DROP {
                        GONE
                    } else {
                        next += 1;
                        next - 1
                    });
                }
                sc.pol_rows.clear();
                sc.pol_rows.extend(
                    in_order
                        .iter()
                        .zip(keep.iter())
                        .filter(|(_, d)| **d != policy::DROP)
                        .map(|(&r, _)| r),
                );
                let kept_ops: Vec<u8> = sc
                    .pol_ops
                    .iter()
                    .zip(keep.iter())
                    .filter(|(_, d)| **d != policy::DROP)
                    .map(|(&o, _)| o)
                    .collect();
                sc.pol_ops.clear();
                sc.pol_ops.extend_from_slice(&kept_ops);
                let filter = (dropped > 0).then(|| {
                    let pred: arrow_array::BooleanArray =
                        keep.iter().map(|d| Some(*d != policy::DROP)).collect();
                    arrow_select::filter::FilterBuilder::new(&pred)
                        .optimize()
                        .build()
                });
                let mut built = Vec::with_capacity(fcols.len());
                for (i, c) in fcols.into_iter().enumerate() {
                    built.push(match (c, &filter) {
                        (Some(_), _) if p.dropped(&schema.columns[i].name) => None,
                        (Some(c), Some(f)) => Some(f.filter(c.as_ref())?),
                        (c, _) => c,
                    });
                }
                pre = Some(PreFilter {
                    map,
                    dropped,
                    built: built.into_iter().map(|c| c.map(Some)).collect(),
                    reads,
                });
            }
        }
        let m = pre.as_ref().map_or(n, |p| n - p.dropped);
        let prebuilt = |i: usize| pre.as_ref().is_some_and(|p| p.reads[i]);
        let mut builders: Vec<ColumnBuilder> = schema
            .columns
            .iter()
            .zip(&sc.col_bytes)
            .enumerate()
            .map(|(i, (c, &bytes))| {
                let bytes = if skipped(i) || prebuilt(i) { 0 } else { bytes };
                ColumnBuilder::new(c.ty, m, bytes)
            })
            .collect();
        // Nested columns: one tape node (or none) per output row.
        let mut slots: Vec<Vec<u32>> = schema
            .columns
            .iter()
            .map(|c| {
                if c.ty == ColumnType::Nested {
                    vec![tape::NONE; m]
                } else {
                    Vec::new()
                }
            })
            .collect();
        // Per column, where its cells go: a builder, the held values or
        // the nested slots (one test per cell in the loop below).
        const TO_BUILDER: u8 = 0;
        const TO_HELD: u8 = 1;
        const TO_SKIP: u8 = 3;
        let dest: Vec<u8> = held_cols
            .iter()
            .zip(&slots)
            .enumerate()
            .map(|(i, (&h, s))| {
                if skipped(i) || prebuilt(i) {
                    TO_SKIP
                } else if h {
                    TO_HELD
                } else if !s.is_empty() {
                    2
                } else {
                    TO_BUILDER
                }
            })
            .collect();
        let map: Option<&[u32]> = pre.as_ref().map(|p| &p.map[..]);
        let mut held: Vec<(u32, usize, Vec<u8>)> = Vec::new();
        let mut put = |row: usize, k: usize| -> Result<(), Error> {
            // The row's output index; GONE: the filter dropped it (its
            // held values are still kept, as before the filter ran first).
            let row = map.map_or(row as u32, |m| m[row]);
            let (a, b) = (sc.bounds[k] as usize, sc.bounds[k + 1] as usize);
            for cell in &sc.cells[a..b] {
                let col = cell.col as usize;
                let to = dest[col];
                if to == TO_BUILDER {
                    if row != GONE {
                        builders[col].push(row as usize, cell, payload_buf, &sc.arena)?;
                    }
                    continue;
                }
                if to == TO_SKIP {
                    continue;
                }
                if to == TO_HELD {
                    if cell.kind != Kind::Null {
                        let src = if cell.in_arena {
                            &sc.arena[..]
                        } else {
                            payload_buf
                        };
                        let v = src
                            .get(cell.start as usize..cell.end as usize)
                            .ok_or_else(|| Error::internal("a cell outside its buffer"))?;
                        held.push((sc.accepted[k], col, v.to_vec()));
                    }
                    continue;
                }
                if cell.kind == Kind::Nested {
                    let node = u32::try_from(cell.num).unwrap_or(tape::NONE);
                    if row != GONE {
                        slots[col][row as usize] = node;
                    }
                    // A value with more than the column's Arrow type
                    // holds (an empty object where the type has no
                    // struct) is also kept whole, so nothing is lost.
                    if let Some(p) = partial[col]
                        && node != tape::NONE
                        && sc.tape.lost(payload_buf, p, node, 1)
                    {
                        let v = payload_buf
                            .get(cell.start as usize..cell.end as usize)
                            .ok_or_else(|| Error::internal("a cell outside its buffer"))?;
                        held.push((sc.accepted[k], col, v.to_vec()));
                    }
                }
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
        let mut lane_offsets = lane_offsets;
        // The output's input rows (with a filter run first: in
        // sc.pol_rows, which the policies' step below takes).
        let out_rows: &[u32] = match &pre {
            Some(p) => {
                // Lane boundaries over the kept rows.
                for off in lane_offsets.iter_mut() {
                    *off = p.map[..*off].iter().filter(|&&r| r != GONE).count();
                }
                &[]
            }
            None if lanes > 1 => &sc.out_rows,
            None => &sc.accepted,
        };

        let mut fields: Vec<Field> = schema
            .columns
            .iter()
            .zip(&partial)
            .map(|(c, p)| {
                let dt = p.map_or_else(|| c.data_type(), JType::data_type);
                Field::new(c.name.as_str(), dt, true)
            })
            .collect();
        let table = apply_names(
            &self.cfg.naming,
            &mut self.tables,
            &mut schema.names,
            stream,
            &mut fields,
            pol,
        );
        let mut srcs: Vec<String> = Vec::new();
        if pol.is_some() {
            srcs.extend(schema.columns.iter().map(|c| c.name.clone()));
        }
        let mut built = pre.as_mut().map(|p| std::mem::take(&mut p.built));
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(fields.len() + 4);
        for (i, ((b, c), slot)) in builders
            .into_iter()
            .zip(&schema.columns)
            .zip(&slots)
            .enumerate()
        {
            if let Some(a) = built.as_mut().and_then(|v| v[i].take()) {
                cols.push(a.unwrap_or_else(|| Arc::new(arrow_array::NullArray::new(m))));
                continue;
            }
            match (&c.tree, c.ty) {
                // Left out below.
                _ if held_cols[i] || skipped(i) => {
                    cols.push(Arc::new(arrow_array::NullArray::new(m)))
                }
                (Some(t), ColumnType::Nested) => {
                    let t = partial[i].unwrap_or(t);
                    cols.push(tape::build(t, &mut sc.tape, payload_buf, slot)?);
                }
                _ => cols.push(b.finish(m)?),
            }
        }
        if !held.is_empty() || held_cols.iter().any(|&h| h) {
            held.sort_by_key(|h| (h.0, h.1));
            self.held = held
                .into_iter()
                .map(|(row, col, value)| hold::Held {
                    row,
                    column: fields[col].name().clone(),
                    value,
                    cell: None,
                })
                .collect();
            let mut i = 0;
            fields.retain(|_| (!held_cols[i], i += 1).0);
            let mut i = 0;
            cols.retain(|_| (!held_cols[i], i += 1).0);
            if pol.is_some() {
                let mut i = 0;
                srcs.retain(|_| (!held_cols[i], i += 1).0);
            }
        }
        let (out_rows, applied) = match pol {
            None => (out_rows, None),
            Some(p) => {
                let pre_dropped = pre.as_ref().map(|p| p.dropped);
                if pre.is_none() {
                    sc.pol_rows.clear();
                    sc.pol_rows.extend_from_slice(out_rows);
                    sc.pol_ops.clear();
                    sc.pol_ops
                        .extend(out_rows.iter().map(|&r| rows.op(r as usize)));
                }
                let a = policy::apply(
                    p,
                    &mut srcs,
                    &mut fields,
                    &mut cols,
                    &sc.pol_ops,
                    &mut sc.pol_rows,
                    &mut lane_offsets,
                    &mut sc.pol_eval,
                    pre_dropped,
                )?;
                (&sc.pol_rows[..], Some(a))
            }
        };
        finish(
            stream,
            rows,
            out_rows,
            synced_at_micros,
            &mut sc.id_buf,
            fields,
            cols,
            table,
            lane_offsets,
            quarantined,
            applied,
        )
    }
}

/// An output row the filter dropped (see [`PreFilter`]).
const GONE: u32 = u32::MAX;

/// A push whose filter ran before its columns were built.
struct PreFilter {
    /// Per output row (before the filter), its row among the kept, or
    /// [`GONE`].
    map: Vec<u32>,
    dropped: usize,
    /// Per column, those the filter read, built and filtered (`Some(None)`:
    /// left out by the policies).
    built: Vec<Option<Option<ArrayRef>>>,
    /// Per column, whether the filter reads it.
    reads: Vec<bool>,
}

/// Adds the metadata columns to a push's output and makes its record.
#[allow(clippy::too_many_arguments)]
fn finish(
    stream: &str,
    rows: &RawRows<'_>,
    out_rows: &[u32],
    synced_at_micros: i64,
    id_buf: &mut Vec<u8>,
    mut fields: Vec<Field>,
    mut cols: Vec<ArrayRef>,
    table: Option<String>,
    lane_offsets: Vec<usize>,
    mut quarantined: Vec<Quarantined>,
    mut applied: Option<policy::Applied>,
) -> Result<PushOutput, Error> {
    let filtered = applied.as_ref().map_or(0, |a| a.dropped);
    if let Some(a) = applied.as_mut()
        && !a.set_aside.is_empty()
    {
        quarantined.append(&mut a.set_aside);
        quarantined.sort_by_key(|q| q.row);
    }
    if out_rows.is_empty() {
        return Ok(PushOutput {
            record: None,
            lane_offsets,
            quarantined,
            filtered,
        });
    }
    fields.extend(meta::fields());
    let from = applied.as_ref().and_then(|a| a.id_from.as_ref());
    let mut m = meta::columns(
        stream.as_bytes(),
        rows,
        out_rows,
        synced_at_micros,
        id_buf,
        from,
    )?;
    if let Some(a) = &applied
        && !a.to_delete.is_empty()
    {
        m[1] = policy::deletes(&m[1], &a.to_delete);
    }
    cols.extend(m);
    let record = RecordBatch::try_new(Arc::new(out_schema(fields, table)), cols)?;
    Ok(PushOutput {
        record: Some(record),
        lane_offsets,
        quarantined,
        filtered,
    })
}

/// The rejection of a document with a field name holding a NUL byte: no
/// Arrow field can have such a name (the C Data Interface carries names as
/// C strings), so no destination takes it.
#[cold]
fn nul_name(key: &str) -> Reject {
    Reject::parse(format!(
        "field name {key:?} holds a NUL byte, which no destination takes"
    ))
}

/// `a == b`, without a library call for short keys (most field names).
#[inline(always)]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a.len() <= 16 {
        return a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0;
    }
    a == b
}

/// Records one document's fields as cells, adding columns as needed.
struct RowSink<'a> {
    schema: &'a mut StreamSchema,
    cells: &'a mut Vec<Cell>,
    seen: &'a mut Vec<u64>,
    /// Per column: whether its name is plain (see [`json::plain_key`]).
    plain: &'a mut Vec<bool>,
    stamp: u64,
    /// The document's offset in the payload buffer.
    base: usize,
    /// The column the next field most likely is: documents of a stream
    /// usually list fields in one order, so this skips the hash lookup.
    next: usize,
    policy: Policy,
    /// Columns a frozen schema refused this push (name, wanted type).
    blocked: &'a mut Vec<(String, &'static str)>,
    /// New fields the discard policy dropped this push.
    discarded: &'a mut Vec<String>,
    /// Per column: an upper bound of its text bytes in this push.
    col_bytes: &'a mut Vec<usize>,
    /// The stream's options, for the fast-path check below.
    opts: state::JsonOpts,
    /// Set when some value may not fit its column as it is (or may be a
    /// timestamp): the document's cells then need classifying.
    classify: bool,
    /// The stream's policies: a new column under a text policy is utf8.
    policies: Option<&'a Policies>,
}

impl FieldSink for RowSink<'_> {
    #[inline(always)]
    fn likely_key(&self) -> &str {
        match self.plain.get(self.next) {
            Some(true) => &self.schema.columns[self.next].name,
            _ => "",
        }
    }

    #[inline]
    fn likely_field(&mut self, key: &str, v: json::Value) -> Result<(), Reject> {
        self.set(self.next, key, v)
    }

    #[inline]
    fn field(&mut self, key: &str, v: json::Value) -> Result<(), Reject> {
        let col = match self.schema.columns.get(self.next) {
            Some(c) if same_key(c.name.as_bytes(), key.as_bytes()) => self.next,
            _ => match self.schema.lookup(key) {
                Some(c) => c,
                None => {
                    if meta::is_reserved(key) {
                        return Err(Reject::parse(format!(
                            "field {key:?} uses the prefix {RESERVED_PREFIX:?} (in any case), reserved for metadata columns"
                        )));
                    }
                    if key.contains('\0') {
                        return Err(nul_name(key));
                    }
                    match self.policy {
                        Policy::Evolve => {}
                        Policy::Freeze => {
                            if !self.blocked.iter().any(|(n, _)| n == key) {
                                self.blocked
                                    .push((key.to_string(), v.kind.column_type().name()));
                            }
                            return Err(Reject::new(
                                Reason::TypeConflict,
                                format!("field {key:?} is not in the frozen schema"),
                            ));
                        }
                        Policy::Discard => {
                            if !self.discarded.iter().any(|n| n == key) {
                                self.discarded.push(key.to_string());
                            }
                            return Ok(());
                        }
                    }
                    self.seen.push(0);
                    self.plain.push(json::plain_key(key));
                    self.col_bytes.push(0);
                    let ty = match self.policies {
                        Some(p) if p.wants_text(key) => ColumnType::Utf8,
                        _ => ColumnType::Null,
                    };
                    self.schema.add(key, ty)
                }
            },
        };
        self.set(col, key, v)
    }
}

impl RowSink<'_> {
    /// Records field `key`'s value `v` as a cell of column `col`.
    #[inline(always)]
    fn set(&mut self, col: usize, key: &str, v: json::Value) -> Result<(), Reject> {
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
        // The classification's fast path, decided here while the column
        // is at hand: a value that fits its column as it is needs nothing
        // more.
        let ty = self.schema.columns[col].ty;
        // The common pairs first, without building the value's type; they
        // decide exactly as the general test below.
        let fits = match (v.kind, ty) {
            (Kind::Null, _)
            | (Kind::Int, ColumnType::Int64)
            | (Kind::Float, ColumnType::Float64)
            | (Kind::Bool, ColumnType::Bool) => true,
            (Kind::Text, ColumnType::Utf8) => !self.opts.timestamps,
            _ => {
                let kt = v.kind.column_type_with(v.num, self.opts.nested_text);
                (kt == ColumnType::Null || (kt == ty && kt != ColumnType::Nested))
                    && !(self.opts.timestamps && v.kind == Kind::Text)
            }
        };
        if !fits {
            self.classify = true;
        }
        // An upper bound: a rejected document's bytes stay counted.
        self.col_bytes[col] += v.end - v.start;
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
