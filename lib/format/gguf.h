/* GGUF v2/v3: read (mmapped, every field validated) and write.
 *
 * Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors,
 * u64 n_kv, then n_kv (string key, u32 value type, value), then n_tensors
 * tensor infos (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type,
 * u64 offset), padding to `general.alignment` (default 32), then the data
 * section; each tensor's offset is relative to the data section and aligned.
 * Strings are u64 length + bytes (no NUL). Version 1 (u32 counts) is
 * refused with a clear error.
 *
 * Shapes: GGUF stores ne[0] as the innermost (fastest-varying) dimension.
 * gguf_tensor keeps that order in `ne`; tensor_view (checkpoint.h) exposes
 * the outermost-first order that safetensors and PyTorch use. */
#ifndef MEMRA_FORMAT_GGUF_H
#define MEMRA_FORMAT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/err.h"
#include "core/mapfile.h"
#include "core/utf8.h"
#include "format/dtype.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef enum {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_VTYPE_COUNT = 13
} gguf_vtype;

typedef struct {
    uint64_t len;
    const char *str; /* NUL-terminated copy; may contain NULs before len */
} gguf_str;

/* One metadata value. Scalars are widened into u/i/f; arrays hold their
 * elements decoded into native arrays (uint8_t[], int32_t[], float[],
 * gguf_str[] ... matching elem_type; bools as uint8_t). */
typedef struct {
    gguf_vtype type;
    union {
        uint64_t u;  /* UINT8/16/32/64, BOOL */
        int64_t i;   /* INT8/16/32/64 */
        double f;    /* FLOAT32/64 */
        gguf_str s;  /* STRING */
        struct {
            gguf_vtype elem_type; /* never ARRAY: nested arrays are refused */
            uint64_t n;
            const void *data;
        } arr;
    } v;
} gguf_value;

typedef struct {
    const char *key;
    gguf_value value;
} gguf_kv;

typedef struct {
    const char *name;
    dtype type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] innermost; unused dims are 1 */
    uint64_t offset;           /* relative to the data section */
    uint64_t nbytes;
    const uint8_t *data;       /* into the map */
} gguf_tensor;

typedef struct {
    mapped_file map;
    arena mem; /* keys, strings, arrays, tensor names */
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    uint64_t data_offset; /* start of the data section in the file */
    /* private: a hash index of tensor names for gguf_find_tensor, and
     * whether `map` came from map_file (gguf_open) or is the caller's
     * buffer (gguf_open_buffer, where map.path is a copy of `what`). */
    uint64_t *tensor_index;
    uint64_t tensor_index_cap;
    int owns_map;
} gguf_file;

/* Open and validate: every length and count against the file size, every
 * key unique and valid UTF-8, every tensor name unique, every type known,
 * every offset aligned, in bounds and not overlapping another tensor. */
int gguf_open(const char *path, gguf_file *out, memra_err *err);
/* The same checks over a buffer the caller keeps alive (fuzzing, tests). */
int gguf_open_buffer(const uint8_t *data, size_t size, const char *what, gguf_file *out,
                     memra_err *err);
/* Safe on a zeroed struct and on one whose open failed (open leaves it zeroed). */
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
const char *gguf_vtype_name(gguf_vtype t);
/* Bytes of one scalar of type t in the file; 0 for STRING, ARRAY and
 * unknown types. */
size_t gguf_vtype_size(gguf_vtype t);
/* Elements in a tensor (product of ne). */
int64_t gguf_tensor_nelements(const gguf_tensor *t);

/* Convenience getters: 0 when found with a compatible type, -1 otherwise
 * (missing or wrong type; err names the key). Integers of any width and
 * signedness are accepted when the value fits. */
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, memra_err *err);
int gguf_get_f64(const gguf_file *f, const char *key, double *out, memra_err *err);
int gguf_get_str(const gguf_file *f, const char *key, const char **out, memra_err *err);

/* ---- writing ---- */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
/* Metadata values are deep-copied; setting an existing key replaces it.
 * In gguf_writer_set a STRING array holds gguf_str[] (as the reader returns
 * it), so a value read from a file can be passed on unchanged. The setters
 * cannot fail: a bad key (empty, not UTF-8) or value (unknown type, nested
 * array) is remembered and reported by gguf_writer_write. */
void gguf_writer_set(gguf_writer *w, const char *key, const gguf_value *v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *s);
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, int v);
/* elem_type is GGUF_STRING with data as const char *[] , or a numeric type
 * with data as that type's native array. */
void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, uint64_t n,
                         const void *data);
/* Every metadata pair of `f`, in file order (general.alignment included). */
void gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f);
/* Tensors are written in the order added. `ne` is innermost-first as in the
 * file; `data` (nbytes, which must match the type and shape) is not copied
 * and must stay valid until gguf_writer_write returns. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, dtype type, int n_dims,
                           const int64_t *ne, const void *data, uint64_t nbytes, memra_err *err);
/* Names longer than this are refused: ggml-based readers (GGML_MAX_NAME 64,
 * NUL included) cannot load them. */
#define GGUF_WRITER_MAX_NAME 63
/* Version 3, alignment from general.alignment when set, else 32. Written to
 * path.tmp and renamed, so a failed write leaves no partial file. */
int gguf_writer_write(gguf_writer *w, const char *path, memra_err *err);

#endif
