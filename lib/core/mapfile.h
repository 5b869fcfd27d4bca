/* Read-only memory maps of whole files: checkpoints are mmapped and weights
 * are views into the map, never copies. */
#ifndef MEMRA_CORE_MAPFILE_H
#define MEMRA_CORE_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
    char *path;
} mapped_file;

int map_file(const char *path, mapped_file *out, memra_err *err);
void unmap_file(mapped_file *mf);

/* Read a whole (small) file into a NUL-terminated heap buffer. Files larger
 * than max_bytes are refused rather than truncated. */
int read_small_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                    memra_err *err);

/* Write a buffer to path atomically (write to path.tmp, then rename). */
int write_file_atomic(const char *path, const void *data, size_t len, memra_err *err);

#endif
