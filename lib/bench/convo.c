#include "bench/convo.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "core/strbuf.h"

/* Common English words, each one token (with its leading space) in the
 * usual BPE vocabularies, so the tokens per word stay near one and vary
 * little from text to text. */
static const char *const words[] = {
    "the",    "of",     "and",    "to",     "in",     "is",     "you",    "that",   "it",
    "he",     "was",    "for",    "on",     "are",    "as",     "with",   "his",    "they",
    "at",     "be",     "this",   "have",   "from",   "or",     "one",    "had",    "by",
    "word",   "but",    "not",    "what",   "all",    "were",   "we",     "when",   "your",
    "can",    "said",   "there",  "use",    "an",     "each",   "which",  "she",    "do",
    "how",    "their",  "if",     "will",   "up",     "other",  "about",  "out",    "many",
    "then",   "them",   "these",  "so",     "some",   "her",    "would",  "make",   "like",
    "him",    "into",   "time",   "has",    "look",   "two",    "more",   "write",  "go",
    "see",    "number", "no",     "way",    "could",  "people", "my",     "than",   "first",
    "water",  "been",   "call",   "who",    "oil",    "its",    "now",    "find",   "long",
    "down",   "day",    "did",    "get",    "come",   "made",   "may",    "part",   "over",
    "new",    "sound",  "take",   "only",   "little", "work",   "know",   "place",  "year",
    "live",   "me",     "back",   "give",   "most",   "very",   "after",  "thing",  "our",
    "just",   "name",   "good",   "man",    "think",  "say",    "great",  "where",  "help",
    "through", "much",  "before", "line",   "right",  "too",    "mean",   "old",    "any",
    "same",   "tell",   "boy",    "follow", "came",   "want",   "show",   "also",   "around",
    "form",   "three",  "small",  "set",    "put",    "end",    "does",   "another", "well",
    "large",  "must",   "big",    "even",   "such",   "because", "turn",  "here",   "why",
    "ask",    "went",   "men",    "read",   "need",   "land",   "different", "home", "us",
    "move",   "try",    "kind",   "hand",   "picture", "again", "change", "off",    "play",
};

char *convo_filler(uint64_t seed, uint64_t stream, size_t n_words)
{
    rng_state r;
    rng_seed(&r, seed, stream);
    strbuf b;
    sb_init(&b);
    size_t left_in_sentence = 0;
    for (size_t i = 0; i < n_words; i++) {
        uint64_t x = rng_next_u64(&r);
        const char *w = words[x % MEMRA_ARRAY_LEN(words)];
        if (left_in_sentence == 0) {
            left_in_sentence = 6 + (size_t)((x >> 32) % 9); /* 6 to 14 words */
            if (i)
                sb_putc(&b, ' ');
            sb_putc(&b, (char)toupper((unsigned char)w[0]));
            sb_puts(&b, w + 1);
        } else {
            sb_putc(&b, ' ');
            sb_puts(&b, w);
        }
        if (--left_in_sentence == 0 || i + 1 == n_words)
            sb_putc(&b, '.');
    }
    if (!b.data)
        return xstrdup("");
    return sb_take(&b);
}

struct convo {
    json_t *messages; /* the history, as the API takes it */
    uint64_t seed, id;
    size_t turn_words;
    int turns;
    int awaiting;     /* a body was made and its reply not yet given */
};

static json_t *message(const char *role, json_t *content)
{
    return json_pack("{s:s,s:o}", "role", role, "content", content);
}

convo *convo_new(const char *system, uint64_t seed, uint64_t id, size_t turn_words)
{
    convo *cv = xcalloc(1, sizeof *cv);
    cv->messages = json_array();
    json_array_append_new(cv->messages, message("system", json_string(system)));
    cv->seed = seed;
    cv->id = id;
    cv->turn_words = turn_words;
    return cv;
}

void convo_free(convo *cv)
{
    if (!cv)
        return;
    json_decref(cv->messages);
    free(cv);
}

int convo_turns(const convo *cv) { return cv->turns; }

char *convo_next_body(convo *cv, const char *model, int max_tokens)
{
    MEMRA_ASSERT(!cv->awaiting);
    /* streams 0 and up are conversations' turns; the system prompt and the
     * calibration texts take theirs from the top of the range */
    char *user = convo_filler(cv->seed, (cv->id << 16) | (uint64_t)cv->turns, cv->turn_words);
    json_array_append_new(cv->messages, message("user", json_string(user)));
    free(user);
    cv->turns++;
    cv->awaiting = 1;
    json_t *body = json_pack("{s:s,s:O,s:i,s:i,s:b,s:b,s:{s:b}}", "model", model, "messages",
                             cv->messages, "max_tokens", max_tokens, "temperature", 0,
                             "ignore_eos", 1, "stream", 1, "stream_options", "include_usage", 1);
    char *s = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(body);
    MEMRA_ASSERT(s);
    return s;
}

void convo_reply(convo *cv, const char *text, size_t len)
{
    MEMRA_ASSERT(cv->awaiting);
    json_t *t = json_stringn(text, len);
    json_array_append_new(cv->messages, message("assistant", t ? t : json_string("")));
    cv->awaiting = 0;
}
