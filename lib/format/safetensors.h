/* safetensors: read (single file, or sharded with model.safetensors.index.json)
 * and write.
 *
 * A file is: u64 little-endian header length N, N bytes of a JSON object
 * (tensor name -> {"dtype","shape","data_offsets":[begin,end]}, plus an
 * optional "__metadata__" object of string -> string), then the data buffer;
 * offsets are relative to the buffer. Every field is validated: the header
 * length against the file and a 100 MB limit, each dtype known, shape
 * entries non-negative, begin <= end, end within the buffer, end - begin
 * equal to the element count times the dtype size, no two tensors
 * overlapping, no unknown keys in a tensor entry. Shapes are outermost
 * first. */
#ifndef MEMRA_FORMAT_SAFETENSORS_H
#define MEMRA_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/err.h"
#include "core/mapfile.h"
#include "core/utf8.h"
#include "format/dtype.h"

#define ST_MAX_DIMS 8
#define ST_HEADER_MAX (100u * 1024 * 1024)

typedef struct {
    const char *name;
    dtype type;
    int n_dims;
    int64_t shape[ST_MAX_DIMS]; /* outermost first */
    uint64_t nbytes;
    const uint8_t *data; /* into the owning file's map */
    int file_index;      /* which shard */
} st_tensor;

typedef struct {
    const char *key, *value;
} st_meta;

/* One or more files read as one set of tensors. */
typedef struct {
    arena mem;
    int n_files;
    mapped_file *files;
    int n_tensors;
    st_tensor *tensors; /* in header order, shard by shard */
    int n_meta;
    st_meta *meta; /* __metadata__ of the first file */
    int *name_order; /* tensor indices sorted by name, for st_find's binary search */
} st_set;

/* Open a single .safetensors file. */
int st_open_file(const char *path, st_set *out, memra_err *err);
/* Open a checkpoint dir: model.safetensors.index.json (every shard it names,
 * each tensor in the shard the index says) or a single model.safetensors. */
int st_open_dir(const char *dir, st_set *out, memra_err *err);
/* Validate a buffer the caller keeps alive (fuzzing, tests). The set maps
 * no file: n_files is 0 and every tensor's file_index is 0. */
int st_open_buffer(const uint8_t *data, size_t size, const char *what, st_set *out,
                   memra_err *err);
/* Safe on a set that failed to open (the open functions leave it zeroed). */
void st_close(st_set *s);
/* NULL when the set has no tensor of that name. */
const st_tensor *st_find(const st_set *s, const char *name);

/* ---- writing ---- */

typedef struct st_writer st_writer;

st_writer *st_writer_new(void);
void st_writer_free(st_writer *w);
/* A key set twice keeps the last value; "__metadata__" is written first. */
void st_writer_set_meta(st_writer *w, const char *key, const char *value);
/* data is not copied and must stay valid until st_writer_write returns. */
int st_writer_add(st_writer *w, const char *name, dtype type, int n_dims, const int64_t *shape,
                  const void *data, uint64_t nbytes, memra_err *err);
/* One file; tensors in the order added, header padded with spaces to a
 * multiple of 8 as the reference writer does. */
int st_writer_write(st_writer *w, const char *path, memra_err *err);
/* A checkpoint dir: model.safetensors when the total is at most
 * shard_bytes (0: never shard), else model-0000i-of-0000n.safetensors plus
 * model.safetensors.index.json. */
int st_writer_write_dir(st_writer *w, const char *dir, uint64_t shard_bytes, memra_err *err);

#endif
