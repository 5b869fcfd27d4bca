/* memra-quantize's pipeline (quantize_model.h): the plan, then each tensor
 * row-parallel, then the GGUF. */
#include "model/quantize_model.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/pool.h"
#include "format/gguf.h"
#include "tok/hf_tokenizer.h"
#include "quant/quantize.h"
#include "format/tensor_cast.h"
#include "model/contract.h"
#include "model/family.h"

/* Values per row chunk handed to one task: enough work to amortize the
 * hand-out, small enough that a 4096-row matrix still spreads over cores. */
#define QM_TASK_VALUES ((int64_t)1 << 18)

static int64_t entry_elements(const contract_entry *e)
{
    int64_t n = 1;
    for (int d = 0; d < e->n_dims; d++)
        n *= e->shape[d];
    return n;
}

static int64_t entry_cols(const contract_entry *e) { return e->shape[e->n_dims - 1]; }

/* The source view of destination entry e (GGUF naming): HF names each
 * expert's matrix, GGUF stacks them. */
static const tensor_view *src_view(const contract_binding *b, const contract_entry *e, int expert)
{
    if (b->contract.naming == CKPT_HF && role_is_expert(e->role))
        return contract_get(b, e->role, e->layer, expert);
    return contract_get(b, e->role, e->layer, -1);
}

/* Which destination entries are written: generated rope_freqs where the
 * family writes it (as memra-convert does); an optional entry (the
 * untied output head) when the source has it, or, without a source, when
 * the config does not tie it. */
static int entry_wanted(const model_config *c, const contract_binding *src, const contract_entry *e)
{
    if (e->generated)
        return family_rope_freqs(c, NULL);
    if (e->optional)
        return src ? src_view(src, e, 0) != NULL : !c->tie_embeddings;
    return 1;
}

static int source_is_float(dtype t)
{
    return t == DT_F32 || t == DT_F16 || t == DT_BF16 || t == DT_F64;
}

int quantize_plan_build(const model_config *c, const contract_binding *src, quant_recipe *r,
                        quantize_plan *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (contract_build(c, CKPT_GGUF, &out->contract, err) != 0)
        return -1;
    out->entries = xcalloc((size_t)out->contract.n + 1, sizeof *out->entries);
    for (int i = 0; i < out->contract.n; i++) {
        const contract_entry *e = &out->contract.entries[i];
        if (!entry_wanted(c, src, e))
            continue;
        quantize_plan_entry *pe = &out->entries[out->n];
        pe->e = e;
        pe->src_type = DT_INVALID;
        pe->n_elements = entry_elements(e);
        if (src && !e->generated) {
            const int n_parts =
                src->contract.naming == CKPT_HF && role_is_expert(e->role) ? (int)e->shape[0] : 1;
            for (int p = 0; p < n_parts; p++) {
                const tensor_view *v = src_view(src, e, p);
                if (!v) {
                    quantize_plan_free(out);
                    return memra_fail(err, "tensor '%s': no source tensor", e->name);
                }
                if (!source_is_float(v->type) && !r->allow_requantize) {
                    const char *tn = dtype_get(v->type) ? dtype_get(v->type)->name : "unknown";
                    quantize_plan_free(out);
                    return memra_fail(err, "tensor '%s': the source is already quantized (%s); "
                                           "quantize from an F32, F16 or BF16 checkpoint "
                                           "(or --allow-requantize)",
                                      v->name, tn);
                }
                pe->src_type = v->type;
            }
        }
        if (quant_recipe_type(r, c, e, &pe->type, &pe->why, err) != 0) {
            quantize_plan_free(out);
            return -1;
        }
        pe->nbytes = (uint64_t)dtype_row_bytes(pe->type, pe->n_elements);
        out->total_bytes += pe->nbytes;
        out->total_elements += (uint64_t)pe->n_elements;
        if (strcmp(pe->why, "not a matrix") != 0) {
            out->matrix_bytes += pe->nbytes;
            out->matrix_elements += (uint64_t)pe->n_elements;
        }
        out->n++;
    }
    return 0;
}

void quantize_plan_free(quantize_plan *p)
{
    free(p->entries);
    contract_free(&p->contract);
    memset(p, 0, sizeof *p);
}

/* ---- producing one tensor ---- */

typedef struct {
    const quantize_plan_entry *pe;
    const contract_binding *src;
    int64_t rows, cols;
    int64_t rows_per_part; /* HF experts: rows of one expert's matrix */
    int hf_parts;          /* rows come from per-expert HF views */
    const float *vals;     /* whole tensor precomputed, or NULL */
    const float *imp;      /* importance, NULL or cols (x parts when imp_parts) values */
    int imp_parts;
    uint8_t *out;
    size_t out_row_bytes;
    int64_t rows_per_task;
    pthread_mutex_t mu;
    int failed;
    memra_err err;
} tensor_job;

static void job_fail(tensor_job *j, const memra_err *e)
{
    pthread_mutex_lock(&j->mu);
    if (!j->failed) {
        j->failed = 1;
        j->err = *e;
    }
    pthread_mutex_unlock(&j->mu);
}

/* The f32 values of row r into buf (or a pointer into the precomputed ones). */
static const float *row_values(tensor_job *j, int64_t r, float *buf, memra_err *err)
{
    if (j->vals)
        return j->vals + r * j->cols;
    const int part = j->hf_parts ? (int)(r / j->rows_per_part) : 0;
    const int64_t local = j->hf_parts ? r % j->rows_per_part : r;
    const tensor_view *v = src_view(j->src, j->pe->e, part);
    const int64_t rb = dtype_row_bytes(v->type, j->cols);
    if (cast_to_f32(v->type, v->data + (size_t)local * (size_t)rb, buf, j->cols, err) != 0)
        return NULL;
    return buf;
}

static void tensor_task(void *ctx, int task, int thread)
{
    (void)thread;
    tensor_job *j = ctx;
    if (__atomic_load_n(&j->failed, __ATOMIC_RELAXED))
        return;
    const int64_t r0 = (int64_t)task * j->rows_per_task;
    const int64_t r1 = r0 + j->rows_per_task < j->rows ? r0 + j->rows_per_task : j->rows;
    float *buf = xmalloc((size_t)j->cols * sizeof(float));
    memra_err err;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = row_values(j, r, buf, &err);
        uint8_t *dst = j->out + (size_t)r * j->out_row_bytes;
        int rc;
        if (!x)
            rc = -1;
        else if (cast_is_float_target(j->pe->type))
            rc = cast_from_f32(x, j->pe->type, dst, j->cols, &err);
        else {
            const float *imp = j->imp;
            if (imp && j->imp_parts)
                imp += (r / (j->rows / j->imp_parts)) * j->cols;
            rc = quantize_row(j->pe->type, x, dst, j->cols, imp, &err);
            if (rc != 0)
                memra_wrap(&err, "row %" PRId64, r);
        }
        if (rc != 0) {
            job_fail(j, &err);
            break;
        }
    }
    free(buf);
}

/* The importance values of a tensor, checked against its shape. */
static int tensor_importance(quantize_opts *o, const quantize_plan_entry *pe,
                             const float **imp, int *parts, memra_err *err)
{
    *imp = NULL;
    *parts = 0;
    if (!o->importance || cast_is_float_target(pe->type))
        return 0;
    const imatrix_entry *ie = imatrix_find(o->importance, pe->e->name);
    if (!ie) {
        o->n_without_importance++;
        return 0;
    }
    const int64_t cols = entry_cols(pe->e);
    const int stacked = role_is_expert(pe->e->role) && pe->e->n_dims == 3;
    if (ie->n_values == cols && !stacked) {
        *imp = ie->values;
        return 0;
    }
    if (stacked && ie->n_values == pe->e->shape[0] * cols) {
        *imp = ie->values;
        *parts = (int)pe->e->shape[0];
        return 0;
    }
    return memra_fail(err, "tensor '%s': the importance matrix has %" PRId64 " values for it, "
                           "expected %" PRId64,
                      pe->e->name, ie->n_values, stacked ? pe->e->shape[0] * cols : cols);
}

/* Precompute the values of a generated tensor or one the HF -> GGUF
 * conversion transforms. Returns NULL (no error) when rows can be read
 * straight from the source. */
static int precompute(const model_config *c, const contract_binding *src,
                      const quantize_plan_entry *pe, float **out, memra_err *err)
{
    const contract_entry *e = pe->e;
    *out = NULL;
    const int64_t n = pe->n_elements;
    if (e->generated) {
        *out = xmalloc((size_t)n * sizeof(float));
        family_rope_freqs(c, *out);
        return 0;
    }
    if (!contract_entry_transforms(e) || src->contract.naming == CKPT_GGUF)
        return 0;
    const tensor_view *v = src_view(src, e, 0);
    float *vals = xmalloc((size_t)n * sizeof(float)), *tmp = xmalloc((size_t)n * sizeof(float));
    int rc = cast_to_f32(v->type, v->data, tmp, n, err);
    if (rc == 0)
        rc = contract_transform(e, 1, tmp, vals, n, err);
    free(tmp);
    if (rc != 0) {
        free(vals);
        return memra_wrap(err, "tensor '%s'", e->name);
    }
    *out = vals;
    return 0;
}

/* Produce one tensor's bytes: a view of the source when nothing changes,
 * else freshly quantized / cast rows in *owned. */
static int produce(const model_config *c, const contract_binding *src, thread_pool *pool,
                   const float *imp, int imp_parts, const quantize_plan_entry *pe,
                   const void **data, void **owned, memra_err *err)
{
    const contract_entry *e = pe->e;
    *owned = NULL;
    const int hf_parts = src->contract.naming == CKPT_HF && role_is_expert(e->role);
    if (!e->generated && !hf_parts && pe->type == pe->src_type &&
        (!contract_entry_transforms(e) || src->contract.naming == CKPT_GGUF)) {
        *data = src_view(src, e, 0)->data;
        return 0;
    }
    tensor_job j;
    memset(&j, 0, sizeof j);
    j.pe = pe;
    j.src = src;
    j.cols = entry_cols(e);
    j.rows = pe->n_elements / j.cols;
    j.hf_parts = hf_parts;
    j.rows_per_part = hf_parts ? j.rows / e->shape[0] : j.rows;
    j.out_row_bytes = (size_t)dtype_row_bytes(pe->type, j.cols);
    j.imp = imp;
    j.imp_parts = imp_parts;
    float *vals;
    if (precompute(c, src, pe, &vals, err) != 0)
        return -1;
    j.vals = vals;
    j.rows_per_task = QM_TASK_VALUES / j.cols > 0 ? QM_TASK_VALUES / j.cols : 1;
    j.out = xmalloc(pe->nbytes ? pe->nbytes : 1);
    pthread_mutex_init(&j.mu, NULL);
    pool_run(pool, (int)((j.rows + j.rows_per_task - 1) / j.rows_per_task), tensor_task, &j);
    pthread_mutex_destroy(&j.mu);
    free(vals);
    if (j.failed) {
        free(j.out);
        *err = j.err;
        return memra_wrap(err, "tensor '%s' (%s)", e->name, dtype_get(pe->type)->name);
    }
    *data = j.out;
    *owned = j.out;
    return 0;
}

/* ---- the GGUF ---- */

/* Source metadata that describes the source's encoding, not the model:
 * replaced, not copied. */
static int stale_key(const char *k)
{
    return !strcmp(k, "general.file_type") || !strcmp(k, "general.quantization_version") ||
           !strncmp(k, "quantize.imatrix.", 17) || !strncmp(k, "memra.quantize.", 15);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int write_metadata(const checkpoint *src, const quant_recipe *r, const quantize_opts *o,
                          gguf_writer *w, memra_err *err)
{
    if (src->format == CKPT_GGUF) {
        for (uint64_t i = 0; i < src->gguf.n_kv; i++)
            if (!stale_key(src->gguf.kv[i].key))
                gguf_writer_set(w, src->gguf.kv[i].key, &src->gguf.kv[i].value);
    }
    config_to_gguf(&src->config, w);
    if (src->format == CKPT_HF) {
        char probe[4096];
        snprintf(probe, sizeof probe, "%s/tokenizer.json", src->path);
        if (file_exists(probe) && hf_tokenizer_to_gguf_rows(src->path, src->config.n_vocab, w, err) != 0)
            return -1;
    }
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    const int ftype = quant_recipe_llama_ftype(r);
    if (ftype >= 0)
        gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype);
    gguf_writer_set_str(w, "memra.quantize.type", r->name);
    char *desc = quant_recipe_describe(r);
    gguf_writer_set_str(w, "memra.quantize.recipe", desc);
    free(desc);
    if (o->importance) {
        /* llama.cpp's keys for the importance matrix a file was made with */
        if (o->imatrix_path)
            gguf_writer_set_str(w, "quantize.imatrix.file", o->imatrix_path);
        if (o->importance->dataset)
            gguf_writer_set_str(w, "quantize.imatrix.dataset", o->importance->dataset);
        gguf_writer_set_i32(w, "quantize.imatrix.entries_count", o->importance->n_entries);
        gguf_writer_set_i32(w, "quantize.imatrix.chunks_count", o->importance->n_chunks);
    }
    return 0;
}

int quantize_checkpoint(const checkpoint *src, const char *dst, quant_recipe *r,
                        quantize_opts *o, memra_err *err)
{
    if (src->vocab_only)
        return memra_fail(err, "%s: a vocab-only GGUF has no weights to quantize", src->path);
    contract_binding b;
    if (contract_bind(&src->config, src->format, src->tensors, src->n_tensors, &b, err) != 0)
        return memra_wrap(err, "%s", src->path);
    quantize_plan plan;
    if (quantize_plan_build(&src->config, &b, r, &plan, err) != 0) {
        contract_binding_free(&b);
        return -1;
    }
    o->n_without_importance = 0;
    const void **data = xcalloc((size_t)plan.n + 1, sizeof *data);
    void **owned = xcalloc((size_t)plan.n + 1, sizeof *owned);
    const float **imp = xcalloc((size_t)plan.n + 1, sizeof *imp);
    int *imp_parts = xcalloc((size_t)plan.n + 1, sizeof *imp_parts);
    int rc = 0;
    /* every importance entry checked before any work */
    for (int i = 0; i < plan.n && rc == 0; i++)
        rc = tensor_importance(o, &plan.entries[i], &imp[i], &imp_parts[i], err);
    thread_pool *pool = pool_create(o->n_threads);
    uint64_t done = 0;
    for (int i = 0; i < plan.n && rc == 0; i++) {
        rc = produce(&src->config, &b, pool, imp[i], imp_parts[i], &plan.entries[i], &data[i],
                     &owned[i], err);
        done += (uint64_t)plan.entries[i].n_elements;
        if (rc == 0 && o->progress)
            o->progress(o->progress_ctx, i + 1, plan.n, &plan.entries[i], done,
                        plan.total_elements);
    }
    pool_destroy(pool);
    gguf_writer *w = gguf_writer_new();
    if (rc == 0)
        rc = write_metadata(src, r, o, w, err);
    for (int i = 0; i < plan.n && rc == 0; i++) {
        const quantize_plan_entry *pe = &plan.entries[i];
        int64_t ne[GGUF_MAX_DIMS];
        const int nd = pe->e->n_dims;
        for (int d = 0; d < nd; d++)
            ne[d] = pe->e->shape[nd - 1 - d];
        rc = gguf_writer_add_tensor(w, pe->e->name, pe->type, nd, ne, data[i], pe->nbytes, err);
    }
    if (rc == 0)
        rc = gguf_writer_write(w, dst, err);
    gguf_writer_free(w);
    for (int i = 0; i < plan.n; i++)
        free(owned[i]);
    free(owned);
    free(data);
    free(imp);
    free(imp_parts);
    quantize_plan_free(&plan);
    contract_binding_free(&b);
    return rc;
}
