/* memra-census: what is in a checkpoint. Argument parsing and output only;
 * the binding and byte accounting are lib/model/contract.c. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/cli.h"
#include "core/hash.h"
#include "core/rng.h"
#include "model/checkpoint.h"
#include "model/contract.h"

static const char usage[] =
    "usage: memra-census MODEL [--json] [--bandwidth GB/s] [--no-tensors] [--checksum]\n"
    "\n"
    "Binds every tensor of MODEL (a GGUF file, an HF checkpoint dir, or hf:owner/repo[:file])\n"
    "to its family's tensor contract and reports the family, the normalized config, every\n"
    "tensor, totals by dtype and role, and the decode bytes per token and ceiling.\n"
    "\n"
    "  --json            one JSON object instead of tables\n"
    "  --bandwidth GB/s  memory bandwidth for the decode ceiling (default 4500, H200;\n"
    "                    env MEMRA_BANDWIDTH)\n"
    "  --no-tensors      leave out the per-tensor list\n"
    "  --checksum        add an FNV-1a 64 checksum of each tensor's bytes\n"
    "  -h, --help        this text\n"
    "\n"
    "Exit status: 0 ok, 1 failure (names the tensor that does not bind), 2 bad usage.\n";

typedef struct {
    const char *model;
    int json, no_tensors, checksum;
    double bandwidth_gbs;
} census_opts;

static json_t *config_json(const model_config *c)
{
    json_t *j = json_object();
    json_object_set_new(j, "family", json_string(family_name(c->family)));
    if (c->hf_architecture[0])
        json_object_set_new(j, "architecture", json_string(c->hf_architecture));
    json_object_set_new(j, "n_vocab", json_integer(c->n_vocab));
    json_object_set_new(j, "dim", json_integer(c->dim));
    json_object_set_new(j, "n_layers", json_integer(c->n_layers));
    json_object_set_new(j, "n_heads", json_integer(c->n_heads));
    json_object_set_new(j, "n_kv_heads", json_integer(c->n_kv_heads));
    json_object_set_new(j, "head_dim", json_integer(c->head_dim));
    json_object_set_new(j, "ffn_dim", json_integer(c->ffn_dim));
    json_object_set_new(j, "n_ctx_train", json_integer(c->n_ctx_train));
    json_object_set_new(j, "norm_eps", json_real(c->norm_eps));
    json_object_set_new(j, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(j, "tie_embeddings", json_boolean(c->tie_embeddings));
    if (config_is_assistant(c))
        json_object_set_new(j, "assistant_of_dim", json_integer(c->backbone_dim));
    json_object_set_new(j, "attn_bias", json_boolean(c->attn_bias));
    json_object_set_new(j, "qk_norm", json_boolean(c->qk_norm));
    static const char *scaling[] = {"none", "linear", "llama3", "yarn"};
    json_t *rs = json_object();
    json_object_set_new(rs, "type", json_string(scaling[c->rope_scaling.kind]));
    if (c->rope_scaling.kind != ROPE_SCALING_NONE) {
        json_object_set_new(rs, "factor", json_real(c->rope_scaling.factor));
        json_object_set_new(rs, "original_ctx", json_integer(c->rope_scaling.original_ctx));
    }
    json_object_set_new(j, "rope_scaling", rs);
    if (c->n_experts > 0) {
        json_object_set_new(j, "n_experts", json_integer(c->n_experts));
        json_object_set_new(j, "n_experts_used", json_integer(c->n_experts_used));
        json_object_set_new(j, "moe_ffn_dim", json_integer(c->moe_ffn_dim));
        json_object_set_new(j, "norm_topk_prob", json_boolean(c->norm_topk_prob));
        if (c->shared_ffn_dim > 0)
            json_object_set_new(j, "shared_ffn_dim", json_integer(c->shared_ffn_dim));
    }
    if (c->family == FAMILY_GEMMA4) {
        json_object_set_new(j, "head_dim_full", json_integer(c->head_dim_full));
        json_object_set_new(j, "n_kv_heads_full",
                            json_integer(config_layer_kv_heads(c, c->n_layers - 1)));
        json_object_set_new(j, "attn_k_eq_v", json_boolean(c->attn_k_eq_v));
        json_object_set_new(j, "n_kv_shared_layers", json_integer(c->n_kv_shared));
        json_object_set_new(j, "double_wide_ffn", json_boolean(c->double_wide_ffn));
        json_object_set_new(j, "ple_dim", json_integer(c->ple_dim));
        json_object_set_new(j, "rope_full_angles", json_integer(c->rope_full_angles));
        json_object_set_new(j, "rope_local_theta", json_real(c->rope_local_theta));
        json_object_set_new(j, "sliding_window", json_integer(c->sliding_window));
        json_object_set_new(j, "sliding_window_pattern", json_integer(c->sliding_window_pattern));
        json_object_set_new(j, "final_softcap", json_real(c->final_softcap));
    }
    if (c->family == FAMILY_GEMMA3) {
        json_object_set_new(j, "rope_local_theta", json_real(c->rope_local_theta));
        json_object_set_new(j, "sliding_window", json_integer(c->sliding_window));
        json_object_set_new(j, "sliding_window_pattern", json_integer(c->sliding_window_pattern));
        json_object_set_new(j, "query_pre_attn_scalar", json_real(c->query_pre_attn_scalar));
        json_object_set_new(j, "attn_softcap", json_real(c->attn_softcap));
        json_object_set_new(j, "final_softcap", json_real(c->final_softcap));
    }
    json_object_set_new(j, "bos_id", json_integer(c->bos_id));
    json_object_set_new(j, "eos_id", json_integer(c->eos_id));
    return j;
}

/* What a sequence holds besides the weights: K and V per token (bf16, the
 * default; f32, cpu-ref's, is twice it) in the attention layers that
 * keep their own (config_kv_layout: gemma4's shared layers keep none, and
 * every row is as wide as the widest layer's), and
 * the recurrent state (f32) of the DeltaNet layers, whatever its length. */
static json_t *memory_json(const model_config *c)
{
    int64_t attn = 0, rec = 0;
    for (int64_t l = 0; l < c->n_layers; l++)
        config_layer_recurrent(c, l) ? rec++ : attn++;
    int64_t kv_layers, kv_dim;
    config_kv_layout(c, &kv_layers, &kv_dim);
    json_t *j = json_object();
    json_object_set_new(j, "attention_layers", json_integer(attn));
    json_object_set_new(j, "kv_layers", json_integer(kv_layers));
    json_object_set_new(j, "kv_bytes_per_token_bf16", json_integer(2 * kv_layers * kv_dim * 2));
    json_object_set_new(j, "recurrent_layers", json_integer(rec));
    size_t per = rec ? bk_delta_state_floats((int)c->lin_n_k_heads, (int)c->lin_n_v_heads,
                                             (int)c->lin_k_dim, (int)c->lin_v_dim,
                                             (int)c->lin_conv_k)
                     : 0;
    json_object_set_new(j, "recurrent_state_bytes_per_sequence",
                        json_integer((json_int_t)((uint64_t)rec * per * 4)));
    return j;
}

static json_t *shape_json(const tensor_view *v)
{
    json_t *a = json_array();
    for (int d = 0; d < v->n_dims; d++)
        json_array_append_new(a, json_integer(v->shape[d]));
    return a;
}

static void shape_str(const tensor_view *v, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < v->n_dims && len < n; d++)
        len += (size_t)snprintf(out + len, n - len, "%s%" PRId64, d ? ", " : "", v->shape[d]);
    if (len < n)
        snprintf(out + len, n - len, "]");
}

/* obj[key] += n (bytes). */
static void add_bytes(json_t *obj, const char *key, uint64_t n)
{
    json_t *cur = json_object_get(obj, key);
    json_object_set_new(obj, key, json_integer((cur ? json_integer_value(cur) : 0) + (json_int_t)n));
}

/* The contract entry a view is bound to (for role and layer), or NULL. */
static const contract_entry *entry_of(const contract_binding *b, const tensor_view *v)
{
    for (int i = 0; i < b->contract.n; i++)
        if (b->bound[i] == v)
            return &b->contract.entries[i];
    return NULL;
}

static json_t *tokenizer_json(const checkpoint *c)
{
    json_t *j = json_object();
    const char *model = NULL;
    if (gguf_get_str(&c->gguf, "tokenizer.ggml.model", &model, NULL) == 0)
        json_object_set_new(j, "model", json_string(model));
    const gguf_kv *kv = gguf_find_kv(&c->gguf, "tokenizer.ggml.tokens");
    if (kv && kv->value.type == GGUF_ARRAY)
        json_object_set_new(j, "n_tokens", json_integer((json_int_t)kv->value.v.arr.n));
    const char *pre = NULL;
    if (gguf_get_str(&c->gguf, "tokenizer.ggml.pre", &pre, NULL) == 0)
        json_object_set_new(j, "pre", json_string(pre));
    json_object_set_new(j, "chat_template",
                        json_boolean(gguf_find_kv(&c->gguf, "tokenizer.chat_template") != NULL));
    return j;
}

static json_t *census_json(const checkpoint *c, const contract_binding *b, const census_opts *o)
{
    json_t *j = json_object();
    json_object_set_new(j, "path", json_string(c->path));
    json_object_set_new(j, "format", json_string(c->format == CKPT_GGUF ? "gguf" : "hf"));
    json_object_set_new(j, "vocab_only", json_boolean(c->vocab_only));
    if (c->format == CKPT_GGUF) {
        json_object_set_new(j, "gguf_version", json_integer(c->gguf.version));
        if (gguf_find_kv(&c->gguf, "tokenizer.ggml.tokens"))
            json_object_set_new(j, "tokenizer", tokenizer_json(c));
    }
    if (c->vocab_only)
        return j;
    json_object_set_new(j, "family", json_string(family_name(c->config.family)));
    json_object_set_new(j, "config", config_json(&c->config));

    /* One set of role names: a tensor's "role" is its contract role, and
     * totals.by_role sums bytes by that same name; "group" (embed, norms,
     * attention, ffn, ...) is the coarser sum, in both places too. */
    json_t *by_dtype = json_object(), *by_role = json_object(), *by_group = json_object();
    json_t *tensors = json_array();
    uint64_t total = 0;
    for (int i = 0; i < c->n_tensors; i++) {
        const tensor_view *v = &c->tensors[i];
        const contract_entry *e = entry_of(b, v);
        const char *dt = dtype_get(v->type)->name;
        /* an MTP block's layer counts as the block, not as attention / ffn */
        const char *group = !e ? "ignored"
                            : e->layer >= c->config.n_layers ? "mtp"
                                                              : role_group(e->role);
        const char *role = e ? role_name(e->role) : "ignored";
        add_bytes(by_dtype, dt, v->nbytes);
        add_bytes(by_role, role, v->nbytes);
        add_bytes(by_group, group, v->nbytes);
        total += v->nbytes;
        if (o->no_tensors)
            continue;
        json_t *t = json_object();
        json_object_set_new(t, "name", json_string(v->name));
        json_object_set_new(t, "dtype", json_string(dt));
        json_object_set_new(t, "shape", shape_json(v));
        json_object_set_new(t, "bytes", json_integer((json_int_t)v->nbytes));
        json_object_set_new(t, "role", json_string(role));
        json_object_set_new(t, "group", json_string(group));
        json_object_set_new(t, "layer", json_integer(e ? e->layer : -1));
        if (o->checksum) {
            char hex[17];
            snprintf(hex, sizeof hex, "%016" PRIx64, hash_fnv1a64(v->data, (size_t)v->nbytes));
            json_object_set_new(t, "fnv1a64", json_string(hex));
        }
        json_array_append_new(tensors, t);
    }
    if (!o->no_tensors)
        json_object_set_new(j, "tensors", tensors);
    else
        json_decref(tensors);
    int n_bound = 0;
    for (int i = 0; i < b->contract.n; i++)
        n_bound += b->bound[i] != NULL;
    json_object_set_new(j, "n_tensors", json_integer(c->n_tensors));
    json_object_set_new(j, "n_bound", json_integer(n_bound));
    json_object_set_new(j, "n_ignored", json_integer(b->n_ignored));
    json_t *totals = json_object();
    json_object_set_new(totals, "bytes", json_integer((json_int_t)total));
    json_object_set_new(totals, "by_dtype", by_dtype);
    json_object_set_new(totals, "by_role", by_role);
    json_object_set_new(totals, "by_group", by_group);
    json_object_set_new(j, "totals", totals);
    contract_bytes cb;
    contract_bytes_of(b, &c->config, &cb);
    json_t *dec = json_object();
    json_object_set_new(dec, "bytes_per_token", json_integer((json_int_t)cb.per_token));
    json_object_set_new(dec, "bandwidth_gbs", json_real(o->bandwidth_gbs));
    json_object_set_new(dec, "ceiling_tok_s",
                        json_real(cb.per_token ? o->bandwidth_gbs * 1e9 / (double)cb.per_token : 0));
    json_object_set_new(j, "decode", dec);
    json_object_set_new(j, "memory", memory_json(&c->config));
    return j;
}

static void print_table(const checkpoint *c, json_t *j, const census_opts *o)
{
    printf("%s: %s", c->path, c->format == CKPT_GGUF ? "GGUF" : "HF safetensors");
    if (c->format == CKPT_GGUF)
        printf(" v%u", c->gguf.version);
    json_t *tok = json_object_get(j, "tokenizer");
    if (c->vocab_only) {
        printf(", vocab only (no tensors)\n");
        if (tok)
            printf("tokenizer: %s, %" JSON_INTEGER_FORMAT " tokens%s%s\n",
                   json_string_value(json_object_get(tok, "model")) ?: "?",
                   json_integer_value(json_object_get(tok, "n_tokens")),
                   json_object_get(tok, "pre") ? ", pre " : "",
                   json_object_get(tok, "pre") ? json_string_value(json_object_get(tok, "pre")) : "");
        return;
    }
    const model_config *m = &c->config;
    printf(", family %s\n", family_name(m->family));
    printf("config: vocab %" PRId64 ", dim %" PRId64 ", layers %" PRId64 ", heads %" PRId64
           " (kv %" PRId64 ", head_dim %" PRId64 "), ffn %" PRId64 ", ctx %" PRId64
           ", rope theta %g, norm eps %g, tied %s\n",
           m->n_vocab, m->dim, m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim, m->ffn_dim,
           m->n_ctx_train, m->rope_theta, m->norm_eps, m->tie_embeddings ? "yes" : "no");
    if (m->mtp_layers > 0)
        printf("mtp: %" PRId64 " MTP block after the layers (a drafter: memra-spec --mtp, "
               "memra-serve --mtp)\n", m->mtp_layers);
    if (config_is_assistant(m))
        printf("assistant: drafts for a %s model of hidden size %" PRId64 ", reading its K/V and "
               "hidden state (memra-spec / memra-serve --draft)%s\n", family_name(m->family),
               m->backbone_dim,
               m->ordered_embeddings ? "; its centroid head is not run (the whole head is)" : "");
    if (m->family == FAMILY_GEMMA4) {
        int64_t full = 0;
        for (int64_t l = 0; l < m->n_layers; l++)
            full += config_layer_full(m, l);
        printf("layers: %" PRId64 " full (head_dim %" PRId64 ", kv %" PRId64 "%s, %" PRId64
               " of %" PRId64 " rope pairs turn), %" PRId64 " sliding (window %" PRId64 ")",
               full, config_layer_head_dim(m, m->n_layers - 1),
               config_layer_kv_heads(m, m->n_layers - 1), m->attn_k_eq_v ? ", V = K" : "",
               m->rope_full_angles, config_layer_head_dim(m, m->n_layers - 1) / 2,
               m->n_layers - full, m->sliding_window);
        if (m->n_kv_shared > 0)
            printf("; the last %" PRId64 " share K/V%s", m->n_kv_shared,
                   m->double_wide_ffn ? " (ffn doubled)" : "");
        if (m->ple_dim > 0)
            printf("; per-layer embeddings of %" PRId64, m->ple_dim);
        printf("\n");
    }
    if (m->n_experts > 0) {
        printf("experts: %" PRId64 ", %" PRId64 " used per token, expert ffn %" PRId64, m->n_experts,
               m->n_experts_used, m->moe_ffn_dim);
        if (m->shared_ffn_dim > 0)
            printf(", a shared expert of ffn %" PRId64, m->shared_ffn_dim);
        printf("\n");
    }
    if (tok)
        printf("tokenizer: %s, %" JSON_INTEGER_FORMAT " tokens\n",
               json_string_value(json_object_get(tok, "model")) ?: "?",
               json_integer_value(json_object_get(tok, "n_tokens")));
    if (!o->no_tensors) {
        printf("\n%-48s %-8s %-22s %14s  %s\n", "tensor", "dtype", "shape", "bytes", "role");
        json_t *t;
        size_t i;
        json_array_foreach(json_object_get(j, "tensors"), i, t)
        {
            char shape[64];
            shape_str(&c->tensors[i], shape, sizeof shape);
            printf("%-48s %-8s %-22s %14" JSON_INTEGER_FORMAT "  %s", json_string_value(json_object_get(t, "name")),
                   json_string_value(json_object_get(t, "dtype")), shape,
                   json_integer_value(json_object_get(t, "bytes")),
                   json_string_value(json_object_get(t, "role")));
            json_t *ck = json_object_get(t, "fnv1a64");
            if (ck)
                printf("  %s", json_string_value(ck));
            printf("\n");
        }
    }
    printf("\n%" JSON_INTEGER_FORMAT " tensors, %" JSON_INTEGER_FORMAT " bound to the %s contract\n",
           json_integer_value(json_object_get(j, "n_tensors")),
           json_integer_value(json_object_get(j, "n_bound")), family_name(m->family));
    json_t *totals = json_object_get(j, "totals");
    const char *k;
    json_t *v;
    char hb[32];
    printf("\nby dtype:\n");
    json_object_foreach(json_object_get(totals, "by_dtype"), k, v)
    {
        cli_human_bytes((uint64_t)json_integer_value(v), hb, sizeof hb);
        printf("  %-12s %12s\n", k, hb);
    }
    printf("by group:\n");
    json_object_foreach(json_object_get(totals, "by_group"), k, v)
    {
        cli_human_bytes((uint64_t)json_integer_value(v), hb, sizeof hb);
        printf("  %-12s %12s\n", k, hb);
    }
    cli_human_bytes((uint64_t)json_integer_value(json_object_get(totals, "bytes")), hb, sizeof hb);
    printf("  %-12s %12s\n", "total", hb);
    json_t *dec = json_object_get(j, "decode");
    cli_human_bytes((uint64_t)json_integer_value(json_object_get(dec, "bytes_per_token")), hb, sizeof hb);
    printf("\ndecode: %s streamed per token; ceiling %.1f tok/s at %g GB/s\n", hb,
           json_real_value(json_object_get(dec, "ceiling_tok_s")), o->bandwidth_gbs);
    json_t *mem = json_object_get(j, "memory");
    cli_human_bytes((uint64_t)json_integer_value(json_object_get(mem, "kv_bytes_per_token_bf16")),
                    hb, sizeof hb);
    json_int_t attn = json_integer_value(json_object_get(mem, "attention_layers"));
    json_int_t kvl = json_integer_value(json_object_get(mem, "kv_layers"));
    printf("per sequence: KV %s per token (bf16; %" JSON_INTEGER_FORMAT " of %" PRId64
           " layers attend", hb, attn, m->n_layers);
    if (kvl != attn)
        printf(", %" JSON_INTEGER_FORMAT " keep K/V", kvl);
    printf(")");
    json_int_t rec = json_integer_value(json_object_get(mem, "recurrent_layers"));
    if (rec) {
        cli_human_bytes(
            (uint64_t)json_integer_value(json_object_get(mem, "recurrent_state_bytes_per_sequence")),
            hb, sizeof hb);
        printf(", recurrent state %s (%" JSON_INTEGER_FORMAT " DeltaNet layers, f32, any length)",
               hb, rec);
    }
    printf("\n");
}

static void parse_args(int argc, char **argv, census_opts *o)
{
    memra_err err;
    o->bandwidth_gbs = 4500;
    const char *env = getenv("MEMRA_BANDWIDTH");
    if (env && cli_parse_f64(env, 1, 1e6, &o->bandwidth_gbs, "MEMRA_BANDWIDTH", &err) != 0)
        cli_usage("%s", err.msg);
    static const struct option longs[] = {
        {"json", no_argument, NULL, 'j'},       {"bandwidth", required_argument, NULL, 'b'},
        {"no-tensors", no_argument, NULL, 'T'}, {"checksum", no_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        switch (ch) {
        case 'j': o->json = 1; break;
        case 'T': o->no_tensors = 1; break;
        case 'c': o->checksum = 1; break;
        case 'b':
            if (cli_parse_f64(optarg, 1, 1e6, &o->bandwidth_gbs, "--bandwidth", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case 'h': fputs(usage, stdout); exit(0);
        case ':': cli_usage("%s needs a value", argv[optind - 1]);
        default: cli_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        cli_usage("no MODEL given");
    if (optind + 1 < argc)
        cli_usage("unexpected argument '%s'", argv[optind + 1]);
    o->model = argv[optind];
}

int main(int argc, char **argv)
{
    cli_set_program("memra-census");
    census_opts o = {0};
    parse_args(argc, argv, &o);
    memra_err err;
    checkpoint c;
    if (checkpoint_open(o.model, &c, &err) != 0)
        cli_fail(&err);
    contract_binding b = {0};
    if (!c.vocab_only &&
        contract_bind(&c.config, c.format, c.tensors, c.n_tensors, &b, &err) != 0) {
        memra_wrap(&err, "%s", c.path);
        cli_fail(&err);
    }
    json_t *j = census_json(&c, &b, &o);
    if (o.json) {
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
    } else {
        print_table(&c, j, &o);
    }
    json_decref(j);
    if (!c.vocab_only)
        contract_binding_free(&b);
    checkpoint_close(&c);
    return 0;
}
