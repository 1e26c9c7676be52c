/*
 * openetl_engine.h: the C ABI of the OpenETL Rust engine (engine/rust),
 * version 1. The authoritative description of each function is in
 * engine/rust/src/lib.rs; this header must match it.
 *
 * Every function returning int32_t returns a status: 0 ok, 1 invalid
 * input, 2 invalid state, 3 panic (caught; the engine is poisoned), 4
 * internal, 5 closed. On any status but 0, *err (when err is not NULL)
 * receives a message to free with openetl_string_free.
 *
 * Arrow crosses through the C Data Interface with move semantics.
 *
 * Every JSON argument (the engine config with its stream specs, policies
 * and saved state; the Parquet options) is read strictly: a key the
 * engine does not know is status 1 (status 2 inside a saved state) with a
 * message naming it, and so is a flag that is not a boolean.
 *
 * engine/header_test.go checks this header against the Rust exports
 * (names, parameter and return types, in both directions), the ABI
 * version against the versioned symbol, and the signatures against those
 * recorded for the version (engine/testdata/abi_v<N>.txt): changing or
 * removing one means raising the version. The header is part of the
 * engine's source hash (engine/source_hash.sh).
 */
#ifndef OPENETL_ENGINE_H
#define OPENETL_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

/* The ABI version: the suffix of the symbol below, ABI_VERSION in lib.rs
 * and abiVersion in engine/cgo.go. */
#define OPENETL_ENGINE_ABI_VERSION 1

/* Returns 1. Linking against it makes a library of another ABI a link error
 * naming the version wanted (undefined reference to openetl_engine_abi_vN). */
uint32_t openetl_engine_abi_v1(void);

/* Creates an engine. cfg is JSON:
 *   {"lanes":N,"max_document_bytes":N,"state":<saved state, as a JSON value
 *    or a JSON string holding it, or null>,
 *    "streams":[{"name":S,"format":"json"|"row","types":"postgres"|"mysql",
 *                "columns":[{"name":S,"type":S,"nullable":B,"key":B}],
 *                "policy":"evolve"|"freeze"|"discard",
 *                "nested_text":B,"timestamps":B,"keyed":B,
 *                "policies":{"rules":[{"kind":"exclude"|"null","column":S}
 *                             | {"kind":"include","columns":[S...]}
 *                             | {"kind":"rename","column":S,"to":S}
 *                             | {"kind":"hash","column":S,"key":hex}
 *                             | {"kind":"mask"|"truncate_chars"|
 *                                "truncate_bytes","column":S,"n":N}],
 *                            "filter":cond,"merge":B,"key":[S...]}}],
 *    cond: {"op":"eq"|"ne"|"lt"|"le"|"gt"|"ge","column":S,"value":lit}
 *        | {"op":"is_null"|"not_null","column":S}
 *        | {"op":"in","column":S,"values":[lit...]}
 *        | {"op":"and"|"or"|"not","args":[cond...]},
 *    lit: {"int":N}|{"float":F}|{"str":S}|{"bool":B}
 *    (see engine/rust/src/policy.rs; policies are never in the state),
 *    "naming":{"max_len":N,"case":"lower"|"upper"|"","simple":B,
 *              "reserved":[S...]},
 *    "unsupported":[type class...],"tables":[S...]}
 * On success *out holds a handle for openetl_engine_free. A corrupt state is
 * status 2. */
int32_t openetl_engine_new(const uint8_t* cfg, size_t cfg_len, void** out, char** err);

/* Pushes one batch of one stream (stream: UTF-8 bytes).
 *
 * in_array: struct array {op uint8, seq int64, key binary, payload binary};
 * in_schema may be NULL (that type is assumed). The engine ALWAYS takes both
 * (leaving them released) and releases them before returning.
 *
 * The four out-structs must be released (zeroed) on entry. On status 0:
 * *out_rows = rows taken, and when > 0 out_array/out_schema hold the record
 * batch (a struct array: the stream's columns, then _openetl_id,
 * _openetl_op, _openetl_seq, _openetl_synced_at), owned by the caller;
 * *q_rows = rows quarantined (the rows a policy's row filter dropped are
 * the batch's rows less these two counts), and when > 0 q_array/q_schema hold
 * {row uint32, reason utf8, detail utf8}, owned by the caller.
 * lane_offsets (lane_offsets_len = lanes + 1 entries) receives the lane
 * boundaries of the record's rows. */
int32_t openetl_engine_push(void* eng, const uint8_t* stream, size_t stream_len,
                            struct ArrowArray* in_array, struct ArrowSchema* in_schema,
                            int64_t synced_at_micros,
                            struct ArrowArray* out_array, struct ArrowSchema* out_schema,
                            struct ArrowArray* q_array, struct ArrowSchema* q_schema,
                            int64_t* lane_offsets, size_t lane_offsets_len,
                            int64_t* out_rows, int64_t* q_rows, char** err);

/* Exports the engine state (JSON bytes) into *out/*out_len, freed with
 * openetl_bytes_free. */
int32_t openetl_engine_state(void* eng, uint8_t** out, size_t* out_len, char** err);

/* Exports the schema outcomes of the last push as JSON bytes (a list of
 * {"stream","column","kind","from","to"}); *out is NULL and *out_len 0
 * when there are none. Free with openetl_bytes_free. */
int32_t openetl_engine_changes(void* eng, uint8_t** out, size_t* out_len, char** err);

/* Moves the values the last push held back (columns of a type listed in
 * the config's "unsupported", and cells whose value is out of range) out
 * as {row uint32, column utf8, value binary, reason utf8, detail utf8}
 * (reason and detail empty but for cells): *n_rows is the count; when
 * > 0 out_array/out_schema (released on entry) receive the batch, owned by
 * the caller. */
int32_t openetl_engine_held(void* eng, struct ArrowArray* out_array, struct ArrowSchema* out_schema,
                            int64_t* n_rows, char** err);

/* Turns n held values of one column back into Arrow: value i is
 * data[offsets[i]..offsets[i+1]] (offsets has n+1 entries). On status 0
 * out_array/out_schema (released on entry) receive a struct array with one
 * field, the column at its type, owned by the caller. A value the type
 * can't take is status 1. */
int32_t openetl_engine_release(void* eng, const uint8_t* stream, size_t stream_len,
                               const uint8_t* column, size_t column_len,
                               const uint8_t* data, size_t data_len,
                               const int64_t* offsets, size_t n,
                               struct ArrowArray* out_array, struct ArrowSchema* out_schema,
                               char** err);

/* Parquet files (engine/rust/src/pqwrite.rs), for sink/parquet.
 *
 * openetl_parquet_new starts a file of schema (a struct schema; always
 * taken and released) with the options JSON
 *   {"codec":"zstd"|"snappy"|"lz4_raw"|"uncompressed","level":N,
 *    "row_group_rows":N,"dictionary":B,"dictionary_columns":{name:B},
 *    "created_by":S}
 * (unknown keys are status 1); *out receives a writer to free with
 * openetl_parquet_free. openetl_parquet_write encodes one record batch
 * (a struct array with its schema; both always taken and released);
 * openetl_parquet_finish writes the last row group and the footer. On
 * status 0 both set *out/*out_len to the bytes the call completed (often
 * none before the footer), owned by the writer and valid until its next
 * call (finish: until it is freed). After a failed call the writer
 * refuses every call but free. */
int32_t openetl_parquet_new(struct ArrowSchema* schema, const uint8_t* opts, size_t opts_len,
                            void** out, char** err);
int32_t openetl_parquet_write(void* w, struct ArrowArray* array, struct ArrowSchema* schema,
                              const uint8_t** out, size_t* out_len, char** err);
int32_t openetl_parquet_finish(void* w, const uint8_t** out, size_t* out_len, char** err);
void openetl_parquet_free(void* w);

/* Registers a plan of the Avro fast path (engine/rust/src/avro.rs) and
 * writes its ID to *id; the same plan bytes get the same ID. A push of
 * rows marked with a plan that the fast path leaves to the Go decoder
 * returns status 6 with nothing changed. */
int32_t openetl_avro_plan(const uint8_t* plan, size_t plan_len, uint32_t* id, char** err);

void openetl_bytes_free(uint8_t* ptr, size_t len);
void openetl_engine_free(void* eng);
void openetl_string_free(char* s);

/* Test hook, only in a library built with the cargo feature debug-panic
 * (never the committed one): panics inside the engine's guard and returns
 * 3 with the panic's message. Weak: its address is NULL in a library
 * without it. */
int32_t openetl_engine_debug_panic(char** err) __attribute__((weak));

#ifdef __cplusplus
}
#endif

#endif /* OPENETL_ENGINE_H */
