#include "model/convert.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/json.h"
#include "core/log.h"
#include "core/mapfile.h"
#include "core/pool.h"
#include "core/rng.h"
#include "format/gguf.h"
#include "tok/hf_tokenizer.h"
#include "format/safetensors.h"
#include "format/tensor_cast.h"
#include "model/contract.h"
#include "model/family.h"
#include "quant/quantize.h"

/* dir/name into out; a path that does not fit is an error, never a
 * silently shortened name. */
static int join_path(char *out, size_t n, const char *dir, const char *name, memra_err *err)
{
    int len = snprintf(out, n, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= n)
        return memra_fail(err, "%s/%s: path too long", dir, name);
    return 0;
}

int convert_dst_is_gguf(const char *dst)
{
    size_t n = strlen(dst);
    return n >= 5 && !strcasecmp(dst + n - 5, ".gguf");
}

/* One destination tensor: where its bytes come from and, once produced,
 * the bytes themselves (owned when `owned`, else a view into the source). */
typedef struct {
    const contract_entry *e;
    dtype type;
    int64_t n_elements;
    uint64_t nbytes;
    const void *data;
    int owned;
} out_tensor;

typedef struct {
    const model_config *cfg;
    const contract_binding *src;   /* NULL for random */
    checkpoint_format src_naming;
    checkpoint_format dst_naming;
    const tensor_contract *dst;
    out_tensor *out;
    uint64_t seed;
    /* the first failure; tasks stop producing once it is set */
    memra_err err;
    int failed;
    pthread_mutex_t mu;
} produce_ctx;

static int64_t entry_elements(const contract_entry *e)
{
    int64_t n = 1;
    for (int d = 0; d < e->n_dims; d++)
        n *= e->shape[d];
    return n;
}

/* The source view(s) for a destination entry: one, or n_experts when HF
 * per-expert tensors are stacked into a GGUF merged one. */
static const tensor_view *source_view(const produce_ctx *c, const contract_entry *e, int expert)
{
    /* HF per-expert entries carry e->expert; merged entries are asked per
     * expert by the caller; a merged source serves every HF expert entry. */
    if (c->src_naming == CKPT_HF)
        return contract_get(c->src, e->role, e->layer, role_is_expert(e->role) ? expert : -1);
    return contract_get(c->src, e->role, e->layer, -1);
}

/* The HF-semantics f32 values of one (entry, expert) slice from the source. */
static int source_values(produce_ctx *c, const contract_entry *e, int expert, float *dst,
                         int64_t n, memra_err *err)
{
    const tensor_view *v = source_view(c, e, expert);
    if (!v)
        return memra_fail(err, "tensor '%s': no source tensor", e->name);
    const uint8_t *bytes = v->data;
    if (c->src_naming == CKPT_GGUF && role_is_expert(e->role)) {
        /* a slice of the merged [n_experts, rows, cols] tensor */
        int64_t per = v->n_elements / v->shape[0];
        int64_t row_bytes = dtype_row_bytes(v->type, per);
        if (per != n || row_bytes < 0)
            return memra_fail(err, "tensor '%s': expert slice of %lld elements does not fit",
                              v->name, (long long)n);
        bytes += (uint64_t)row_bytes * (uint64_t)expert;
    } else if (v->n_elements != n) {
        return memra_fail(err, "tensor '%s': %lld elements, expected %lld", v->name,
                          (long long)v->n_elements, (long long)n);
    }
    if (cast_to_f32(v->type, bytes, dst, n, err) != 0)
        return memra_wrap(err, "tensor '%s'", v->name);
    if (c->src_naming == CKPT_GGUF && contract_entry_transforms(e)) {
        /* undo what HF -> GGUF did; the source's entry has the transform */
        int si = contract_index(&c->src->contract, e->role, e->layer, -1);
        if (si < 0)
            return memra_fail(err, "tensor '%s': no source contract entry", e->name);
        const contract_entry *se = &c->src->contract.entries[si];
        float *tmp = xmalloc((size_t)n * sizeof(float));
        int rc = contract_transform(se, 0, dst, tmp, n, err);
        memcpy(dst, tmp, (size_t)n * sizeof(float));
        free(tmp);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static void random_values(const produce_ctx *c, const contract_entry *e, int expert, float *dst,
                          int64_t n)
{
    tensor_role r = e->role;
    int is_norm = r == ROLE_OUTPUT_NORM || r == ROLE_ATTN_NORM || r == ROLE_FFN_NORM ||
                  r == ROLE_ATTN_Q_NORM || r == ROLE_ATTN_K_NORM || r == ROLE_ATTN_POST_NORM ||
                  r == ROLE_FFN_POST_NORM || r == ROLE_PLE_PROJ_NORM || r == ROLE_PLE_POST_NORM ||
                  r == ROLE_FFN_PRE_NORM_2 || r == ROLE_FFN_POST_NORM_1 ||
                  r == ROLE_FFN_POST_NORM_2;
    int is_bias = r == ROLE_ATTN_Q_BIAS || r == ROLE_ATTN_K_BIAS || r == ROLE_ATTN_V_BIAS ||
                  r == ROLE_ATTN_O_BIAS;
    if (is_norm || is_bias || r == ROLE_SSM_NORM) {
        /* A norm that adds 1 to its weight (gemma3) is neutral at 0; the
         * DeltaNet's gated norm is a plain one whatever the family. */
        float v = is_bias ? 0.0f
                          : (family_desc(c->cfg->family)->norm_adds_one && r != ROLE_SSM_NORM)
                                ? 0.0f
                                : 1.0f;
        for (int64_t i = 0; i < n; i++)
            dst[i] = v;
        return;
    }
    /* The stream is keyed on the HF name of the slice, so random -> HF and
     * random -> GGUF hold the same values. */
    char key[CONTRACT_NAME_MAX + 32];
    snprintf(key, sizeof key, "%d/%d/%d", (int)e->role, e->layer, expert);
    rng_state rng;
    rng_seed(&rng, c->seed, rng_hash_str(key));
    /* a depthwise conv has a few taps a channel: weights as large as
     * transformers' default init gives them (kaiming, ~ 1 / sqrt(taps)) */
    float sd = r == ROLE_SSM_CONV ? 0.3f : 0.02f;
    /* a layer's output scale (gemma4): trained ones are below 1; the
     * router's input and per-expert scales: around 1 */
    int around_one = r == ROLE_MOE_ROUTER_SCALE || r == ROLE_MOE_EXPERT_SCALE;
    float mean = r == ROLE_LAYER_SCALE ? 0.8f : around_one ? 1.0f : 0.0f;
    if (r == ROLE_LAYER_SCALE || around_one)
        sd = 0.1f;
    for (int64_t i = 0; i < n; i++)
        dst[i] = mean + sd * rng_normal(&rng);
}

/* Whether an entry can be written straight from the source bytes. */
static const tensor_view *passthrough_view(const produce_ctx *c, const contract_entry *e,
                                           dtype type)
{
    if (!c->src || e->generated)
        return NULL;
    if (contract_entry_transforms(e) && c->src_naming != c->dst_naming)
        return NULL;
    if (role_is_expert(e->role) && c->src_naming != c->dst_naming)
        return NULL;
    const tensor_view *v = source_view(c, e, e->expert);
    return v && v->type == type ? v : NULL;
}

static int produce_one(produce_ctx *c, out_tensor *o, memra_err *err)
{
    const contract_entry *e = o->e;
    const tensor_view *pv = passthrough_view(c, e, o->type);
    if (pv) {
        o->data = pv->data;
        o->owned = 0;
        return 0;
    }
    int64_t n = o->n_elements;
    float *vals = xmalloc((size_t)n * sizeof(float));
    int rc = 0;
    if (e->generated) {
        family_rope_freqs(c->cfg, vals);
    } else {
        /* HF-semantics values, expert by expert when stacking */
        int stacked = role_is_expert(e->role) && c->dst_naming == CKPT_GGUF;
        int n_parts = stacked ? (int)e->shape[0] : 1;
        int64_t per = n / n_parts;
        for (int p = 0; p < n_parts && rc == 0; p++) {
            int expert = stacked ? p : e->expert;
            if (c->src)
                rc = source_values(c, e, expert, vals + per * p, per, err);
            else
                random_values(c, e, expert, vals + per * p, per);
        }
        if (rc == 0 && c->dst_naming == CKPT_GGUF && contract_entry_transforms(e)) {
            float *tmp = xmalloc((size_t)n * sizeof(float));
            rc = contract_transform(e, 1, vals, tmp, n, err);
            free(vals);
            vals = tmp;
        }
    }
    if (rc == 0) {
        void *bytes = xmalloc(o->nbytes ? o->nbytes : 1);
        /* a quantized outtype (Q8_0): plain squared error, rows of whole blocks */
        rc = cast_is_float_target(o->type) ? cast_from_f32(vals, o->type, bytes, n, err)
             : e->shape[e->n_dims - 1] % dtype_get(o->type)->block_size != 0
                 ? memra_fail(err, "rows of %lld values are not whole %s blocks",
                              (long long)e->shape[e->n_dims - 1], dtype_get(o->type)->name)
                 : quantize_row(o->type, vals, bytes, n, NULL, err);
        o->data = bytes;
        o->owned = 1;
    }
    free(vals);
    if (rc != 0)
        memra_wrap(err, "tensor '%s'", e->name);
    return rc;
}

static void produce_task(void *ctx, int i, int thread)
{
    (void)thread;
    produce_ctx *c = ctx;
    if (c->failed)
        return;
    memra_err err;
    if (produce_one(c, &c->out[i], &err) != 0) {
        pthread_mutex_lock(&c->mu);
        if (!c->failed) {
            c->failed = 1;
            c->err = err;
        }
        pthread_mutex_unlock(&c->mu);
    }
}

/* The float type of a checkpoint: that of its first matrix, bf16 when the
 * matrices are quantized. */
static dtype checkpoint_float_type(const checkpoint *src)
{
    for (int i = 0; src && i < src->n_tensors; i++) {
        const tensor_view *v = &src->tensors[i];
        if (v->n_dims >= 2)
            return cast_is_float_target(v->type) ? v->type : DT_BF16;
    }
    return DT_BF16;
}

/* The type a destination entry is written in. */
static dtype output_type(const produce_ctx *c, const contract_entry *e, const convert_opts *o,
                         dtype ckpt_float)
{
    /* ggml keeps norms and biases in f32, and the DeltaNet conv (its
     * ssm_conv op reads f32 taps only) */
    if (c->dst_naming == CKPT_GGUF && (e->n_dims == 1 || e->role == ROLE_SSM_CONV))
        return DT_F32;
    if (e->generated)
        return DT_F32;
    if (o->outtype != DT_INVALID)
        return o->outtype;
    if (c->dst_naming == CKPT_HF)
        return ckpt_float;
    const tensor_view *v = c->src ? source_view(c, e, role_is_expert(e->role) ? 0 : e->expert)
                                  : NULL;
    if (!v)
        return DT_BF16;
    /* GGUF destination: keep quantized bytes when nothing transforms them */
    if (!cast_is_float_target(v->type) && passthrough_view(c, e, v->type))
        return v->type;
    return cast_is_float_target(v->type) ? v->type : ckpt_float;
}

/* mkdir -p: parents are created as save_pretrained does. */
static int mkdir_p(const char *dir, memra_err *err)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return memra_fail(err, "%s: bad directory name", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return memra_fail(err, "%s: cannot create directory: %s", path, strerror(errno));
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return memra_fail(err, "%s: exists and is not a directory", path);
        path[i] = saved;
    }
    return 0;
}

static int copy_file(const char *src, const char *dst, memra_err *err)
{
    char *buf;
    size_t len;
    if (read_small_file(src, 1u << 30, &buf, &len, err) != 0)
        return -1;
    int rc = write_file_atomic(dst, buf, len, err);
    free(buf);
    return rc;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The tokenizer files an HF checkpoint carries along unchanged. */
static const char *const tokenizer_files[] = {
    "tokenizer.json",      "tokenizer_config.json", "special_tokens_map.json",
    "generation_config.json", "chat_template.jinja", "chat_template.json", "added_tokens.json",
};

static int copy_tokenizer_files(const char *src_dir, const char *dst_dir, memra_err *err)
{
    char a[4096], b[4096];
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(tokenizer_files); i++) {
        if (join_path(a, sizeof a, src_dir, tokenizer_files[i], err) != 0 ||
            join_path(b, sizeof b, dst_dir, tokenizer_files[i], err) != 0)
            return -1;
        if (file_exists(a) && copy_file(a, b, err) != 0)
            return -1;
    }
    return 0;
}

static const char *torch_dtype_name(dtype t)
{
    return t == DT_F32 ? "float32" : t == DT_F16 ? "float16" : "bfloat16";
}

static int write_hf_config(const produce_ctx *c, const checkpoint *src, const char *config_path,
                           const char *dst, dtype float_type, memra_err *err)
{
    json_t *cfg = NULL;
    if (src && src->hf_config)
        cfg = json_deep_copy(src->hf_config);
    else if (config_path)
        cfg = json_load_path(config_path, 16u << 20, err);
    else
        cfg = config_to_hf(c->cfg);
    if (!cfg)
        return -1;
    json_object_set_new(cfg, "torch_dtype", json_string(torch_dtype_name(float_type)));
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(cfg);
    char path[4096];
    if (join_path(path, sizeof path, dst, "config.json", err) != 0) {
        free(text);
        return -1;
    }
    size_t len = strlen(text);
    text = xrealloc(text, len + 2);
    text[len] = '\n';
    int rc = write_file_atomic(path, text, len + 1, err);
    free(text);
    return rc;
}

/* The parent dir of a file path, created like mkdir -p. */
static int mkdir_parent(const char *path, memra_err *err)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return 0;
    char dir[4096];
    if ((size_t)(slash - path) >= sizeof dir)
        return memra_fail(err, "%s: path too long", path);
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    return mkdir_p(dir, err);
}

static int write_gguf(const produce_ctx *c, const checkpoint *src, const char *tokenizer_dir,
                      const char *dst, memra_err *err)
{
    if (mkdir_parent(dst, err) != 0)
        return -1;
    gguf_writer *w = gguf_writer_new();
    int rc = 0;
    if (src && src->format == CKPT_GGUF)
        gguf_writer_copy_kv(w, &src->gguf); /* keeps tokenizer, names, template */
    config_to_gguf(c->cfg, w);
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    const char *tok_dir = tokenizer_dir ? tokenizer_dir
                          : (src && src->format == CKPT_HF) ? src->path
                                                             : NULL;
    if (tok_dir) {
        char probe[4096];
        snprintf(probe, sizeof probe, "%s/tokenizer.json", tok_dir);
        if (file_exists(probe))
            rc = hf_tokenizer_to_gguf_rows(tok_dir, c->cfg->n_vocab, w, err);
        else if (tokenizer_dir)
            rc = memra_fail(err, "%s: no tokenizer.json", tokenizer_dir);
    }
    for (int i = 0; rc == 0 && i < c->dst->n; i++) {
        const out_tensor *o = &c->out[i];
        if (!o->data)
            continue;
        int64_t ne[GGUF_MAX_DIMS];
        int nd = o->e->n_dims;
        for (int d = 0; d < nd; d++)
            ne[d] = o->e->shape[nd - 1 - d];
        rc = gguf_writer_add_tensor(w, o->e->name, o->type, nd, ne, o->data, o->nbytes, err);
    }
    if (rc == 0)
        rc = gguf_writer_write(w, dst, err);
    gguf_writer_free(w);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Move the files of a finished staging dir into dst (created when absent),
 * then remove the staging dir. */
static int publish_dir(const char *staging, const char *dst, memra_err *err)
{
    struct stat st;
    if (stat(dst, &st) != 0) {
        if (rename(staging, dst) != 0)
            return memra_fail(err, "%s: cannot rename %s into place: %s", dst, staging,
                              strerror(errno));
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return memra_fail(err, "%s: exists and is not a directory", dst);
    DIR *d = opendir(staging);
    if (!d)
        return memra_fail(err, "%s: cannot list: %s", staging, strerror(errno));
    int rc = 0;
    struct dirent *de;
    char from[4096], to[4096];
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (join_path(from, sizeof from, staging, de->d_name, err) != 0 ||
            join_path(to, sizeof to, dst, de->d_name, err) != 0)
            rc = -1;
        else if (rename(from, to) != 0)
            rc = memra_fail(err, "%s: cannot move into place: %s", to, strerror(errno));
    }
    closedir(d);
    /* a single-file checkpoint must not leave an older shard index behind */
    if (rc == 0 && join_path(from, sizeof from, staging, "model.safetensors.index.json", err) == 0 &&
        join_path(to, sizeof to, dst, "model.safetensors.index.json", err) == 0 &&
        stat(from, &st) != 0)
        unlink(to);
    nftw(staging, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}

static int write_hf_files(const produce_ctx *c, const checkpoint *src, const char *config_path,
                          const char *tokenizer_dir, const char *dst, dtype float_type,
                          uint64_t shard_bytes, memra_err *err);

/* An HF dir is written into a staging dir beside dst and moved into place
 * only when complete, so a failed conversion leaves nothing behind. */
static int write_hf(const produce_ctx *c, const checkpoint *src, const char *config_path,
                    const char *tokenizer_dir, const char *dst, dtype float_type,
                    uint64_t shard_bytes, memra_err *err)
{
    char staging[4096];
    size_t n = strlen(dst);
    while (n > 1 && dst[n - 1] == '/')
        n--;
    if (n + 5 > sizeof staging)
        return memra_fail(err, "%s: path too long", dst);
    snprintf(staging, sizeof staging, "%.*s.tmp", (int)n, dst);
    nftw(staging, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    int rc = write_hf_files(c, src, config_path, tokenizer_dir, staging, float_type, shard_bytes,
                            err);
    if (rc == 0)
        rc = publish_dir(staging, dst, err);
    nftw(staging, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}

static int write_hf_files(const produce_ctx *c, const checkpoint *src, const char *config_path,
                          const char *tokenizer_dir, const char *dst, dtype float_type,
                          uint64_t shard_bytes, memra_err *err)
{
    if (mkdir_p(dst, err) != 0)
        return -1;
    st_writer *w = st_writer_new();
    st_writer_set_meta(w, "format", "pt");
    int rc = 0;
    for (int i = 0; rc == 0 && i < c->dst->n; i++) {
        const out_tensor *o = &c->out[i];
        if (!o->data)
            continue;
        rc = st_writer_add(w, o->e->name, o->type, o->e->n_dims, o->e->shape, o->data, o->nbytes,
                           err);
    }
    if (rc == 0)
        rc = st_writer_write_dir(w, dst, shard_bytes, err);
    st_writer_free(w);
    if (rc == 0)
        rc = write_hf_config(c, src, config_path, dst, float_type, err);
    if (rc == 0) {
        if (tokenizer_dir)
            rc = copy_tokenizer_files(tokenizer_dir, dst, err);
        else if (src && src->format == CKPT_HF)
            rc = copy_tokenizer_files(src->path, dst, err);
        else if (src && src->format == CKPT_GGUF && gguf_find_kv(&src->gguf, "tokenizer.ggml.tokens"))
            rc = gguf_tokenizer_to_hf(&src->gguf, dst, err);
    }
    return rc;
}

/* The shared pipeline: produce every destination tensor, then write. */
static int run_conversion(const model_config *cfg, const checkpoint *src,
                          const contract_binding *bound, const char *config_path, uint64_t seed,
                          const char *dst, const convert_opts *o, memra_err *err)
{
    checkpoint_format dst_naming = convert_dst_is_gguf(dst) ? CKPT_GGUF : CKPT_HF;
    if (o->outtype != DT_INVALID && !cast_is_float_target(o->outtype) &&
        (dst_naming != CKPT_GGUF || !quantize_supported(o->outtype)))
        return memra_fail(err, "%s: a %s outtype needs a GGUF destination", dst,
                          dtype_get(o->outtype)->name);
    tensor_contract dk;
    if (contract_build(cfg, dst_naming, &dk, err) != 0)
        return -1;
    produce_ctx c = {0};
    c.cfg = cfg;
    c.src = bound;
    c.src_naming = src ? src->format : CKPT_HF;
    c.dst_naming = dst_naming;
    c.dst = &dk;
    c.seed = seed;
    pthread_mutex_init(&c.mu, NULL);
    c.out = xcalloc((size_t)dk.n + 1, sizeof *c.out);
    dtype ckpt_float = o->outtype != DT_INVALID ? o->outtype
                       : src                    ? checkpoint_float_type(src)
                                                : DT_BF16;
    int n_out = 0, rc = 0;
    for (int i = 0; i < dk.n; i++) {
        const contract_entry *e = &dk.entries[i];
        /* optional entries: kept when the source has them; rope_freqs is
         * generated for the GGUFs whose family writes it (llama3 scaling,
         * gemma4); random checkpoints tie nothing the config does not tie */
        if (e->generated) {
            if (dst_naming != CKPT_GGUF || !family_rope_freqs(cfg, NULL))
                continue;
        } else if (e->optional) {
            /* (a merged expert entry asks for its first expert's view) */
            int ex = role_is_expert(e->role) && e->expert < 0 ? 0 : e->expert;
            if (src ? !source_view(&c, e, ex) : e->role == ROLE_OUTPUT && cfg->tie_embeddings)
                continue;
        }
        out_tensor *ot = &c.out[n_out++];
        ot->e = e;
        ot->type = output_type(&c, e, o, ckpt_float);
        ot->n_elements = entry_elements(e);
        int64_t nb = dtype_row_bytes(ot->type, ot->n_elements);
        if (nb < 0) {
            rc = memra_fail(err, "tensor '%s': %lld elements do not fit %s blocks", e->name,
                            (long long)ot->n_elements, dtype_get(ot->type)->name);
            break;
        }
        ot->nbytes = (uint64_t)nb;
    }
    if (rc == 0) {
        thread_pool *pool = pool_create(o->n_threads);
        pool_run(pool, n_out, produce_task, &c);
        pool_destroy(pool);
        if (c.failed) {
            *err = c.err;
            rc = -1;
        }
    }
    if (rc == 0) {
        /* write in contract order; the entries left out have no data */
        out_tensor *ordered = xcalloc((size_t)dk.n + 1, sizeof *ordered);
        for (int i = 0; i < n_out; i++)
            ordered[c.out[i].e - dk.entries] = c.out[i];
        free(c.out);
        c.out = ordered;
        n_out = dk.n;
        rc = dst_naming == CKPT_GGUF
                 ? write_gguf(&c, src, o->tokenizer_dir, dst, err)
                 : write_hf(&c, src, config_path, o->tokenizer_dir, dst, ckpt_float,
                            o->shard_bytes, err);
    }
    for (int i = 0; i < n_out; i++)
        if (c.out[i].owned)
            free((void *)c.out[i].data);
    free(c.out);
    pthread_mutex_destroy(&c.mu);
    contract_free(&dk);
    return rc;
}

int convert_checkpoint(const checkpoint *src, const char *dst, const convert_opts *o,
                       memra_err *err)
{
    if (src->vocab_only)
        return memra_fail(err, "%s: a vocab-only GGUF has no weights to convert", src->path);
    contract_binding b;
    if (contract_bind(&src->config, src->format, src->tensors, src->n_tensors, &b, err) != 0)
        return memra_wrap(err, "%s", src->path);
    int rc = run_conversion(&src->config, src, &b, NULL, 0, dst, o, err);
    contract_binding_free(&b);
    return rc;
}

int convert_random(const char *config_path, uint64_t seed, const char *dst,
                   const convert_opts *o, memra_err *err)
{
    json_t *j = json_load_path(config_path, 16u << 20, err);
    if (!j)
        return -1;
    model_config cfg;
    int rc = config_from_hf(j, config_path, &cfg, err);
    json_decref(j);
    if (rc != 0)
        return -1;
    return run_conversion(&cfg, NULL, NULL, config_path, seed, dst, o, err);
}

/* The GGUF architecture of a tokenizer dir: from its config.json's
 * model_type when it names a supported family, else llama (the key only
 * tells readers which metadata prefix to expect; a vocab-only file has none). */
static const char *vocab_arch(const char *hf_dir)
{
    char cfg_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", hf_dir);
    if (!file_exists(cfg_path))
        return "llama";
    memra_err ignored;
    json_t *j = json_load_path(cfg_path, 16u << 20, &ignored);
    model_config cfg;
    const char *arch = "llama";
    if (j && json_object_get(j, "model_type") && config_from_hf(j, cfg_path, &cfg, &ignored) == 0)
        arch = family_gguf_arch(cfg.family);
    if (j)
        json_decref(j);
    return arch;
}

int convert_vocab_only(const char *hf_dir, const char *dst, memra_err *err)
{
    if (mkdir_parent(dst, err) != 0)
        return -1;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", vocab_arch(hf_dir));
    int rc = hf_tokenizer_to_gguf(hf_dir, w, err);
    if (rc == 0)
        rc = gguf_writer_write(w, dst, err);
    gguf_writer_free(w);
    return rc;
}
