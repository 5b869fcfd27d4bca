/* The tokenizer bench: MB/s, tokens/s and bytes/token on one thread. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cli.h"
#include "bench/membw.h"
#include "core/mapfile.h"
#include "bench/bench.h"
#include "model/checkpoint.h"
#include "tok/tokenizer.h"

#include "bench_cli.h"

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int file_exists_in(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

int bench_run_tokenizer(const bench_opts *o)
{
    memra_err err;
    tokenizer *t;
    checkpoint ck;
    int have_ck = 0;
    const char *loaded_from;
    /* A dir with tokenizer.json but no config.json is no checkpoint, yet
     * it is all a tokenizer needs (scripts/fetch-tokenizers.sh makes them). */
    if (is_dir(o->model) && file_exists_in(o->model, "tokenizer.json") &&
        !file_exists_in(o->model, "config.json")) {
        if (tok_load_hf_dir(o->model, &t, &err) != 0)
            cli_fail(&err);
        loaded_from = "tokenizer.json";
    } else {
        if (checkpoint_open(o->model, &ck, &err) != 0)
            cli_fail(&err);
        have_ck = 1;
        if (checkpoint_load_tokenizer(&ck, &t, &err) != 0)
            cli_fail(&err);
        loaded_from = ck.format == CKPT_GGUF ? "GGUF tokenizer.* keys" : "tokenizer.json";
    }
    char *text;
    size_t len;
    const char *text_what;
    if (o->text_file) {
        if (read_small_file(o->text_file, 1u << 30, &text, &len, &err) != 0)
            cli_fail(&err);
        text_what = o->text_file;
    } else {
        text = bench_mixed_text(DEFAULT_TEXT_BYTES, &len);
        text_what = bench_mixed_text_description();
    }
    if (len == 0)
        cli_failf("%s: the text is empty", o->text_file ? o->text_file : "built-in text");
    bench_stats ms;
    size_t n_tokens;
    if (bench_tokenize(t, text, len, o->warmup, o->reps, &ms, &n_tokens, &err) != 0)
        cli_fail(&err);
    double mb_s = len / (ms.median / 1e3) / 1e6;
    double mb_s_min = len / (ms.max / 1e3) / 1e6, mb_s_max = len / (ms.min / 1e3) / 1e6;
    double tokens_s = n_tokens / (ms.median / 1e3);
    double bytes_per_token = n_tokens ? (double)len / n_tokens : 0;
    const char *kind = tok_get_kind(t) == TOK_SPM ? "sentencepiece-bpe" : "byte-level-bpe";
    char date[32];
    membw_utc_now(date, sizeof date);
    json_t *host = bench_host_json();
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "program", json_string("memra-bench"));
        json_object_set_new(j, "mode", json_string("tokenizer"));
        json_object_set_new(j, "date", json_string(date));
        json_object_set_new(j, "host", json_incref(host));
        json_object_set_new(j, "tokenizer",
                            json_pack("{s:s,s:s,s:s,s:I}", "path", o->model, "loaded_from",
                                      loaded_from, "kind", kind, "vocab",
                                      (json_int_t)tok_vocab_size(t)));
        json_object_set_new(j, "text", json_pack("{s:s,s:s,s:I}", "source",
                                                 o->text_file ? "file" : "builtin",
                                                 "description", text_what, "bytes",
                                                 (json_int_t)len));
        json_object_set_new(j, "threads", json_integer(1));
        json_object_set_new(j, "warmup", json_integer(o->warmup));
        json_object_set_new(j, "reps", json_integer(o->reps));
        json_object_set_new(j, "n_tokens", json_integer((json_int_t)n_tokens));
        json_object_set_new(j, "mb_s", json_real(mb_s));
        json_object_set_new(j, "mb_s_min", json_real(mb_s_min));
        json_object_set_new(j, "mb_s_max", json_real(mb_s_max));
        json_object_set_new(j, "tokens_s", json_real(tokens_s));
        json_object_set_new(j, "bytes_per_token", json_real(bytes_per_token));
        json_object_set_new(j, "ms", json_pack("{s:f,s:f,s:f,s:f}", "median", ms.median, "min",
                                               ms.min, "max", ms.max, "mean", ms.mean));
        bench_print_json(j);
        json_decref(j);
    } else {
        printf("memra-bench --tokenizer %s\n", date);
        printf("tokenizer %s: %s, %zu tokens (from %s)\n", o->model, kind, tok_vocab_size(t),
               loaded_from);
        printf("text      %s: %zu bytes\n", text_what, len);
        printf("encode    raw (no BOS/EOS, special-token text not parsed), one thread\n");
        printf("cpu       %s\n", json_string_value(json_object_get(host, "cpu")));
        printf("timing    %d warm-up, median of %d [min, max]; MB = 1e6 bytes\n\n", o->warmup,
               o->reps);
        char mbs[96];
        snprintf(mbs, sizeof mbs, "%.2f [%.2f, %.2f]", mb_s, mb_s_min, mb_s_max);
        printf("| %28s | %12s | %11s | %10s | %12s |\n", "MB/s median [min, max]", "tokens/s",
               "bytes/token", "tokens", "ms/encode");
        printf("|------------------------------|--------------|-------------|------------|"
               "--------------|\n");
        printf("| %28s | %12.0f | %11.3f | %10zu | %12.2f |\n", mbs, tokens_s, bytes_per_token,
               n_tokens, ms.median);
    }
    json_decref(host);
    free(text);
    tok_free(t);
    if (have_ck)
        checkpoint_close(&ck);
    return 0;
}

/* ---- the server bench ---- */
