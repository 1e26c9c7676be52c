//! The push of a declared (FormatRow) stream: each row's values are
//! coerced to the declared types. A row with a value that is not of its
//! type (or not sent, or a malformed payload) is quarantined whole; a
//! value of its type that its column's Arrow type can't hold
//! (`out_of_range`) costs only that cell, which is held (see
//! [`crate::hold`]) while the row lands with a null there.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::Field;

use super::{Engine, PushOutput};
use crate::coerce::{self, Src, Val};
use crate::error::Error;
use crate::input::RawRows;
use crate::meta::{self, OP_DELETE};
use crate::quarantine::{Quarantined, Reason, Reject};
use crate::route;
use crate::rows::{self, Entry};

impl Engine {
    pub(super) fn push_rows(
        &mut self,
        stream: &str,
        rows: &RawRows<'_>,
        synced_at_micros: i64,
    ) -> Result<PushOutput, Error> {
        let st = self
            .streams
            .get_mut(stream)
            .ok_or_else(|| Error::internal("declared stream vanished"))?;
        let names = &mut st.names;
        let keyed = st.opts.keyed;
        let decl = st
            .declared
            .as_ref()
            .ok_or_else(|| Error::internal("declared stream vanished"))?;
        let ncols = decl.columns.len();
        // Columns the policies leave out (and the filter doesn't read)
        // are neither built nor held.
        let skip: Vec<bool> = match self.policies.get(stream) {
            Some(p) => decl.columns.iter().map(|c| p.skips(&c.name)).collect(),
            None => vec![false; ncols],
        };
        let held_cols: Vec<bool> = decl
            .columns
            .iter()
            .zip(&skip)
            .map(|(c, &s)| !s && Self::is_held(&self.cfg.unsupported, &c.decl.data_type()))
            .collect();
        // A batch of Avro rows of one plan filling every column: decoded
        // straight into its columns (crate::avro::direct).
        if self.cfg.lanes == 1
            && !self.policies.contains_key(stream)
            && !held_cols.iter().any(|&h| h)
            && let Some(cols) = crate::avro::direct(
                rows,
                &decl.columns,
                keyed,
                self.cfg.max_document_bytes,
                &mut self.scratch.arena,
            )?
        {
            let n = rows.len();
            let mut fields: Vec<Field> =
                decl.columns.iter().map(|c| c.decl.field(&c.name)).collect();
            let table = super::config::apply_names(
                &self.cfg.naming,
                &mut self.tables,
                names,
                stream,
                &mut fields,
                None,
            );
            let sc = &mut self.scratch;
            sc.out_rows.clear();
            sc.out_rows.extend(0..n as u32);
            return super::finish(
                stream,
                rows,
                &sc.out_rows,
                synced_at_micros,
                &mut sc.id_buf,
                fields,
                cols,
                table,
                vec![0, n],
                Vec::new(),
                None,
            );
        }
        let sc = &mut self.scratch;
        sc.vals.clear();
        sc.elems.clear();
        sc.arena.clear();
        sc.accepted.clear();
        sc.lanes.clear();
        let lanes = self.cfg.lanes;
        let payload_buf = rows.payload_buffer();
        let mut quarantined = Vec::new();
        // Cells held on their own: input row, column, the value's bytes
        // in the payload buffer, the detail.
        let mut cells: Vec<(u32, usize, usize, usize, String)> = Vec::new();
        let mut avro_cache = crate::avro::Cache::default();

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
            let marked = crate::avro::is_marked(payload);
            if marked
                && (payload.len() > self.cfg.max_document_bytes / 2
                    || held_cols.iter().any(|&h| h)
                    || (lanes > 1 && rows.key(i).is_empty()))
            {
                return Err(Error::new(
                    crate::error::Status::Fallback,
                    "avro fast path: a row the Go path decides",
                ));
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
            let (vmark, emark, amark) = (sc.vals.len(), sc.elems.len(), sc.arena.len());
            let cmark = cells.len();
            let base = rows.payload_start(i);
            let result = if payload.is_empty() && op == OP_DELETE {
                sc.vals.resize(vmark + ncols, Val::Null);
                Ok(())
            } else {
                let mut pos = 0;
                let mut first = 0;
                if marked {
                    // An Avro body fills the first columns (crate::avro).
                    (first, pos) = crate::avro::decode(
                        &mut avro_cache,
                        &decl.columns,
                        payload,
                        base,
                        self.cfg.max_document_bytes,
                        &mut sc.vals,
                        &mut sc.arena,
                    )?;
                }
                let mut last = (0, 0);
                let mut res = Ok(());
                for (ci, col) in decl.columns.iter().enumerate().skip(first) {
                    let entry = rows::next_entry(payload, &mut pos);
                    if let Ok(Some(Entry::Value(s, e))) = entry {
                        last = (s, e);
                    }
                    let v = match entry {
                        Err(m) => Err((Reason::Parse, format!("row payload: {m}"))),
                        Ok(None) => Err((
                            Reason::Parse,
                            format!(
                                "row payload has fewer values than the {ncols} declared columns"
                            ),
                        )),
                        Ok(Some(Entry::Null)) => Ok(Val::Null),
                        Ok(Some(Entry::Unchanged)) => Err((
                            Reason::Unchanged,
                            format!(
                                "column {:?}: value unchanged and not sent by the source (an unchanged TOAST value)",
                                col.name
                            ),
                        )),
                        Ok(Some(Entry::Value(s, e))) => coerce::coerce(
                            &col.decl,
                            &payload[s..e],
                            Src::Payload(base + s),
                            &mut sc.arena,
                            &mut sc.elems,
                            &mut sc.unescape,
                        )
                        .map_err(|r| {
                            (
                                r.reason,
                                format!("column {:?} ({}): {}", col.name, col.type_name, r.detail),
                            )
                        }),
                    };
                    match v {
                        // A held column keeps the value's text (checked above).
                        Ok(Val::Null) => sc.vals.push(Val::Null),
                        Ok(_) if held_cols[ci] => sc.vals.push(Val::Text {
                            arena: false,
                            start: (base + last.0) as u32,
                            end: (base + last.1) as u32,
                        }),
                        Ok(v) => sc.vals.push(v),
                        // A value of its type that the Arrow type can't
                        // hold: the cell is held, the row goes on (but for
                        // a key column: a row needs its key).
                        Err((Reason::OutOfRange, detail)) if !col.key => {
                            sc.vals.push(Val::Null);
                            cells.push((i as u32, ci, base + last.0, base + last.1, detail));
                        }
                        Err(e) => {
                            res = Err(e);
                            break;
                        }
                    }
                }
                if res.is_ok() && pos != payload.len() {
                    res = Err((
                        Reason::Parse,
                        format!("row payload has more values than the {ncols} declared columns"),
                    ));
                }
                if res.is_ok()
                    && let Some(col) = decl.columns.iter().enumerate().find_map(|(ci, c)| {
                        (c.key && matches!(sc.vals[vmark + ci], Val::Null)).then_some(c)
                    })
                {
                    // A row needs its key to be merged or deleted by key.
                    res = Err((
                        Reason::MissingKey,
                        format!("key column {:?} is null", col.name),
                    ));
                }
                res
            };
            match result {
                Ok(()) => {
                    sc.accepted.push(i as u32);
                    if lanes > 1 {
                        sc.lanes.push(route::lane_of(rows.key(i), payload, lanes));
                    }
                }
                Err((reason, detail)) => {
                    cells.truncate(cmark);
                    sc.vals.truncate(vmark);
                    sc.elems.truncate(emark);
                    sc.arena.truncate(amark);
                    quarantined.push(Quarantined {
                        row: i as u32,
                        reason,
                        detail,
                    });
                }
            }
        }

        let n = sc.accepted.len();
        // order[k] is the accepted index of output row k.
        sc.order.clear();
        if lanes > 1 {
            sc.ks.clear();
            sc.ks.extend(0..n as u32);
            route::group(&sc.ks, &sc.lanes, lanes, &mut sc.order, &mut sc.offsets);
        } else {
            sc.order.extend(0..n as u32);
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
        sc.out_rows.clear();
        sc.out_rows
            .extend(sc.order.iter().map(|&k| sc.accepted[k as usize]));

        let mut fields: Vec<Field> = Vec::with_capacity(ncols + 4);
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(ncols + 4);
        let mut held: Vec<(u32, usize, Vec<u8>, Option<Reject>)> = Vec::new();
        for (c, col) in decl.columns.iter().enumerate() {
            fields.push(col.decl.field(&col.name));
            if skip[c] {
                cols.push(Arc::new(arrow_array::NullArray::new(n)));
                continue;
            }
            if held_cols[c] {
                for (&k, &r) in sc.order.iter().zip(&sc.out_rows) {
                    if let Val::Text { start, end, .. } = sc.vals[k as usize * ncols + c] {
                        let v = payload_buf
                            .get(start as usize..end as usize)
                            .ok_or_else(|| Error::internal("a held value outside the payload"))?;
                        held.push((r, c, v.to_vec(), None));
                    }
                }
                cols.push(Arc::new(arrow_array::NullArray::new(n)));
                continue;
            }
            let vals = &sc.vals;
            let it = sc.order.iter().map(|&k| &vals[k as usize * ncols + c]);
            cols.push(rows::build(
                &col.decl,
                it,
                n,
                payload_buf,
                &sc.arena,
                &sc.elems,
            )?);
        }
        let pol = self.policies.get(stream);
        let table = super::config::apply_names(
            &self.cfg.naming,
            &mut self.tables,
            names,
            stream,
            &mut fields,
            pol,
        );
        let mut srcs: Vec<String> = Vec::new();
        if pol.is_some() {
            srcs.extend(decl.columns.iter().map(|c| c.name.clone()));
        }
        for (row, col, start, end, detail) in cells {
            if skip[col] {
                continue;
            }
            let v = payload_buf
                .get(start..end)
                .ok_or_else(|| Error::internal("a held cell outside the payload"))?;
            held.push((
                row,
                col,
                v.to_vec(),
                Some(Reject::new(Reason::OutOfRange, detail)),
            ));
        }
        if !held.is_empty() {
            held.sort_by_key(|h| (h.0, h.1));
            self.held = held
                .into_iter()
                .map(|(row, col, value, cell)| crate::hold::Held {
                    row,
                    column: fields[col].name().clone(),
                    value,
                    cell,
                })
                .collect();
        }
        if held_cols.iter().any(|&h| h) {
            let mut i = 0;
            fields.retain(|_| (!held_cols[i], i += 1).0);
            let mut i = 0;
            cols.retain(|_| (!held_cols[i], i += 1).0);
            let mut i = 0;
            srcs.retain(|_| (!held_cols[i] || pol.is_none(), i += 1).0);
        }
        let mut lane_offsets = lane_offsets;
        let applied = match pol {
            None => None,
            Some(p) => {
                sc.pol_ops.clear();
                sc.pol_ops
                    .extend(sc.out_rows.iter().map(|&r| rows.op(r as usize)));
                Some(crate::policy::apply(
                    p,
                    &mut srcs,
                    &mut fields,
                    &mut cols,
                    &sc.pol_ops,
                    &mut sc.out_rows,
                    &mut lane_offsets,
                    &mut sc.pol_eval,
                    None,
                )?)
            }
        };
        super::finish(
            stream,
            rows,
            &sc.out_rows,
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
