/* The prompts memra-trim-ranks generates from. The built-in pack mixes the
 * three kinds of traffic a drafter meets (source code, chat turns and
 * prose) so the ranks are not those of one register only; a deployment
 * with its own traffic should pass a sample of it with --prompts. */
#include "prompt_pack.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/json.h"
#include "core/mapfile.h"

static const char *const code_prompts[] = {
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "#include <stdio.h>\n\nint main(int argc, char **argv)\n{\n",
    "function debounce(fn, wait) {\n  let timer = null;\n  return function (...args) {\n",
    "SELECT customer_id, SUM(amount) AS total\nFROM orders\nWHERE created_at >= '2024-01-01'\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "fn parse_line(line: &str) -> Option<(String, u32)> {\n    let mut parts = line.split(',');\n",
    "#!/usr/bin/env bash\nset -euo pipefail\n\nfor f in *.log; do\n",
    "import json\n\nwith open(\"config.json\") as f:\n    config = json.load(f)\n\n",
};

static const char *const chat_prompts[] = {
    "What is the difference between a list and a tuple in Python?",
    "Write a short note thanking a colleague for their help with the report.",
    "Explain how a bill becomes a law, in three sentences.",
    "Can you summarize the causes of the War of 1812?",
    "I have a meeting at 3pm and another at 4:30. How long is the gap between them?",
    "Give me three tips for writing clear documentation.",
    "What should I pack for a week of sailing?",
    "Translate 'good morning, how are you?' into French.",
};

static const char *const prose_prompts[] = {
    "The committee met on Tuesday to consider the annual budget, and after a long debate",
    "It was late in the afternoon when the ship finally came within sight of the harbour.",
    "The history of the railway begins in the early years of the nineteenth century,",
    "In the message I have the honor to transmit to Congress,",
    "The old captain stood at the rail, looking out over the grey water, and said",
    "Among the many questions which will come before you at this session,",
    "She opened the letter slowly, knowing already what it would say:",
    "The price of wheat rose sharply during the winter, and the farmers",
};

static void add(trim_prompts *ps, char *text, json_t *messages, char *where)
{
    ps->p = xrealloc(ps->p, (ps->n + 1) * sizeof *ps->p);
    ps->p[ps->n++] = (trim_prompt){text, messages, where};
}

static char *where_of(const char *kind, size_t i)
{
    char buf[64];
    snprintf(buf, sizeof buf, "builtin:%s/%zu", kind, i + 1);
    return xstrdup(buf);
}

void prompt_pack_builtin(trim_prompts *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof code_prompts / sizeof *code_prompts; i++)
        add(out, xstrdup(code_prompts[i]), NULL, where_of("code", i));
    for (size_t i = 0; i < sizeof chat_prompts / sizeof *chat_prompts; i++)
        add(out, NULL, json_pack("[{s:s,s:s}]", "role", "user", "content", chat_prompts[i]),
            where_of("chat", i));
    for (size_t i = 0; i < sizeof prose_prompts / sizeof *prose_prompts; i++)
        add(out, xstrdup(prose_prompts[i]), NULL, where_of("prose", i));
}

void prompt_pack_free(trim_prompts *ps)
{
    for (size_t i = 0; i < ps->n; i++) {
        free(ps->p[i].text);
        if (ps->p[i].messages)
            json_decref(ps->p[i].messages);
        free(ps->p[i].where);
    }
    free(ps->p);
    memset(ps, 0, sizeof *ps);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int load_jsonl(const char *path, trim_prompts *out, memra_err *err)
{
    char *buf;
    size_t len;
    if (read_small_file(path, 256u << 20, &buf, &len, err) != 0)
        return -1;
    int rc = 0;
    size_t line = 0;
    for (char *p = buf, *nl; rc == 0 && p < buf + len; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(buf + len - p));
        if (!nl)
            nl = buf + len;
        line++;
        size_t n = (size_t)(nl - p);
        size_t blank = strspn(p, " \t\r");
        if (blank >= n)
            continue;
        char where[1100];
        snprintf(where, sizeof where, "%s:%zu", path, line);
        json_t *o = json_parse_buf(p, n, where, err);
        if (!o) {
            rc = -1;
            break;
        }
        json_t *prompt = json_object_get(o, "prompt"), *text = json_object_get(o, "text"),
               *msgs = json_object_get(o, "messages");
        if (!json_is_object(o) || !!prompt + !!text + !!msgs != 1)
            rc = memra_fail(err, "%s: want an object with one of \"prompt\", \"text\" and "
                            "\"messages\"", where);
        else if (msgs && (!json_is_array(msgs) || json_array_size(msgs) == 0))
            rc = memra_fail(err, "%s: \"messages\" must be a non-empty array", where);
        else if (!msgs && !json_is_string(prompt ? prompt : text))
            rc = memra_fail(err, "%s: \"%s\" must be a string", where, prompt ? "prompt" : "text");
        else if (msgs)
            add(out, NULL, json_incref(msgs), xstrdup(where));
        else
            add(out, xstrdup(json_string_value(prompt ? prompt : text)), NULL, xstrdup(where));
        json_decref(o);
    }
    free(buf);
    return rc;
}

static int load_text(const char *path, trim_prompts *out, memra_err *err)
{
    char *buf;
    size_t len;
    if (read_small_file(path, 64u << 20, &buf, &len, err) != 0)
        return -1;
    if (len == 0) {
        free(buf);
        return memra_fail(err, "%s: the prompt file is empty", path);
    }
    add(out, buf, NULL, xstrdup(path));
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_dir(const char *path, trim_prompts *out, memra_err *err)
{
    DIR *dir = opendir(path);
    if (!dir)
        return memra_fail(err, "%s: cannot open the directory", path);
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *de; (de = readdir(dir));) {
        if (de->d_name[0] == '.')
            continue;
        size_t len = strlen(path) + strlen(de->d_name) + 2;
        char *full = xmalloc(len);
        snprintf(full, len, "%s/%s", path, de->d_name);
        struct stat st;
        if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            names = xrealloc(names, (n + 1) * sizeof *names);
            names[n++] = full;
        } else {
            free(full);
        }
    }
    closedir(dir);
    qsort(names, n, sizeof *names, by_name);
    int rc = n ? 0 : memra_fail(err, "%s: the directory holds no prompt files", path);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0)
            rc = ends_with(names[i], ".jsonl") ? load_jsonl(names[i], out, err)
                                               : load_text(names[i], out, err);
        free(names[i]);
    }
    free(names);
    return rc;
}

int prompt_pack_load(const char *path, trim_prompts *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    int rc;
    if (stat(path, &st) != 0)
        rc = memra_fail(err, "%s: no such file or directory", path);
    else if (S_ISDIR(st.st_mode))
        rc = load_dir(path, out, err);
    else if (ends_with(path, ".jsonl"))
        rc = load_jsonl(path, out, err);
    else
        rc = load_text(path, out, err);
    if (rc == 0 && out->n == 0)
        rc = memra_fail(err, "%s: no prompts in it", path);
    if (rc != 0)
        prompt_pack_free(out);
    return rc;
}
