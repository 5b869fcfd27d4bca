/* Importance matrices: per input column, how much activation enters each
 * weight matrix, collected by `memra-parity MODEL --imatrix OUT -f TEXT` and
 * used by the quantizers to weight their squared error.
 *
 * An entry is keyed by the GGUF tensor name of the weight
 * ("blk.3.attn_q.weight"). values[c] is the mean over calls of x[c]^2, the
 * square of the activation entering input column c, which is what llama.cpp's
 * imatrix stores. Stacked MoE experts ("blk.N.ffn_up_exps.weight") hold
 * n_experts * cols values, expert-major. n_calls is the number of activation
 * rows (tokens) that were accumulated; for a stacked-expert entry it is the
 * largest count over the experts.
 *
 * Files are interoperable with llama.cpp:
 *   - written as the GGUF imatrix format that llama-quantize reads today:
 *     general.type = "imatrix", imatrix.datasets (string array),
 *     imatrix.chunk_count and imatrix.chunk_size (u32); per entry two F32
 *     tensors "<name>.in_sum2" (sum of squares, ne = [n_values, 1]) and
 *     "<name>.counts" (ne = [1, 1]). Sums are values * n_calls, so a reader
 *     dividing in_sum2 by counts gets the mean back.
 *   - read in that format (in_sum2 with one row per expert and one count per
 *     expert, as llama-imatrix writes for MoE; an expert that never received
 *     a token gets importance 1.0, as llama-quantize does) and in the legacy
 *     binary `.dat` format (i32 n_entries; per entry i32 name length, name,
 *     i32 ncall, i32 nval, f32[nval] holding mean * ncall; optionally i32
 *     chunk count, i32 dataset length, dataset name).
 * Every count, size, name and value is validated on read: a bad file is a
 * one-line error naming the file and the entry. */
#ifndef MEMRA_QUANT_IMATRIX_H
#define MEMRA_QUANT_IMATRIX_H

#include <stdint.h>

#include "core/err.h"

typedef struct {
    char *name;       /* GGUF tensor name of the weight */
    int64_t n_values; /* input columns (times experts for stacked experts) */
    float *values;    /* mean of the squared input, per column */
    int32_t n_calls;  /* activation rows accumulated */
} imatrix_entry;

typedef struct {
    imatrix_entry *entries;
    int n_entries;
    int32_t n_chunks; /* text chunks the statistics were collected on */
    char *dataset;    /* name of the text (may be NULL) */
} imatrix;

/* Read either format (detected by the GGUF magic). On failure *out is left
 * zeroed and err names the file and what is wrong with it. */
int imatrix_read(const char *path, imatrix *out, memra_err *err);
/* Write the GGUF imatrix format, atomically (path.tmp, then rename). Refuses
 * an empty matrix, duplicate or empty names, entries without calls and
 * values that are negative or not finite. */
int imatrix_write(const char *path, const imatrix *m, memra_err *err);
/* Frees what imatrix_read allocated (or a matrix built the same way: every
 * name, values array, the entries array and the dataset on the heap); safe
 * on a zeroed struct. Leaves *m zeroed. */
void imatrix_free(imatrix *m);
/* The entry for a GGUF tensor name, or NULL. */
const imatrix_entry *imatrix_find(const imatrix *m, const char *gguf_tensor_name);

#endif
