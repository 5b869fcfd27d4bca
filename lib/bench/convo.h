/* memra-bench --server --turns: one conversation of a multi-turn run, and
 * the filler text its messages are made of.
 *
 * A conversation is a chat as an agent or a chat client sends it: a
 * system prompt (one text every conversation of the run shares), then
 * turns, each resending the whole history (the system prompt, every
 * earlier user message and the assistant reply it got) plus a new user
 * message. The server sees each turn's prompt start with the last turn's,
 * which is what a prefix cache is for.
 *
 * The text is filler: words from a fixed list of common English words,
 * picked by a generator seeded per (seed, stream), in sentences. The
 * client has no tokenizer, so a text is sized in words and the words per
 * token measured against the server (loadgen_calibrate); common words in
 * plain sentences keep that ratio steady across a text. The same seed,
 * stream and length always give the same bytes. */
#ifndef MEMRA_BENCH_CONVO_H
#define MEMRA_BENCH_CONVO_H

#include <stddef.h>
#include <stdint.h>

/* n_words words of filler (NUL-terminated, malloc'ed; "" for 0). */
char *convo_filler(uint64_t seed, uint64_t stream, size_t n_words);

typedef struct convo convo;

/* Conversation `id` of a run: the shared system prompt (copied), user
 * messages of turn_words words each from (seed, id, turn). */
convo *convo_new(const char *system, uint64_t seed, uint64_t id, size_t turn_words);
void convo_free(convo *cv);

/* The next turn: a new user message appended to the history, and the
 * /v1/chat/completions body that sends it all (streamed, with usage;
 * greedy, max_tokens and ignore_eos as memra-bench's single-turn requests).
 * malloc'ed. Each call must be answered by convo_reply before the next. */
char *convo_next_body(convo *cv, const char *model, int max_tokens);
/* The assistant's reply to the last user message (its content as it
 * streamed; may be empty), kept in the history. */
void convo_reply(convo *cv, const char *text, size_t len);
/* Turns sent so far (1 after the first convo_next_body). */
int convo_turns(const convo *cv);

#endif
