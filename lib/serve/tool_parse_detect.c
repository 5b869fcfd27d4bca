/* Which tool-call convention a chat template teaches.
 *
 * A template shows the model its own past tool calls: the markup it writes
 * for an assistant message's tool_calls is the markup the model was trained
 * to produce. So detection looks for that markup in the template's source,
 * most specific first: several families share "<tool_call>" (Hermes JSON,
 * Qwen3-Coder XML, GLM key/value), and the distinguishing piece inside it
 * decides. A template that writes no tool calls is TOOLPARSE_NONE (its
 * output is content, with <think> still split off as reasoning). */
#include "serve/tool_parse.h"

#include <string.h>

static const char *const format_names[TOOLPARSE_FORMAT_COUNT] = {
    [TOOLPARSE_NONE] = "none",          [TOOLPARSE_HERMES] = "hermes",
    [TOOLPARSE_QWEN3_CODER] = "qwen3-coder", [TOOLPARSE_LLAMA3] = "llama3",
    [TOOLPARSE_MISTRAL] = "mistral",    [TOOLPARSE_DEEPSEEK] = "deepseek",
    [TOOLPARSE_HARMONY] = "harmony",    [TOOLPARSE_GEMMA4] = "gemma4",
    [TOOLPARSE_KIMI_K2] = "kimi-k2",    [TOOLPARSE_GLM45] = "glm45",
};

const char *toolparse_format_name(toolparse_format f)
{
    return f >= 0 && f < TOOLPARSE_FORMAT_COUNT ? format_names[f] : "unknown";
}

int toolparse_format_from_name(const char *name)
{
    for (int i = 0; i < TOOLPARSE_FORMAT_COUNT; i++)
        if (name && !strcmp(name, format_names[i]))
            return i;
    return -1;
}

static int has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

toolparse_format toolparse_detect(const char *t)
{
    if (!t)
        return TOOLPARSE_NONE;
    /* gpt-oss ends a call's message with <|call|>, in its channel syntax. */
    if (has(t, "<|channel|>") && has(t, "<|call|>"))
        return TOOLPARSE_HARMONY;
    if (has(t, "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin")) /* tool▁call▁begin */
        return TOOLPARSE_DEEPSEEK;
    if (has(t, "<|tool_call_begin|>"))
        return TOOLPARSE_KIMI_K2;
    if (has(t, "<|tool_call>"))
        return TOOLPARSE_GEMMA4;
    if (has(t, "<arg_key>"))
        return TOOLPARSE_GLM45;
    if (has(t, "<function=") && has(t, "<parameter="))
        return TOOLPARSE_QWEN3_CODER;
    if (has(t, "<tool_call>"))
        return TOOLPARSE_HERMES;
    if (has(t, "[TOOL_CALLS]"))
        return TOOLPARSE_MISTRAL;
    /* Llama 3.x writes a call as the whole message, {"name": .., "parameters": ..}. */
    if (has(t, "<|python_tag|>") || (has(t, "<|start_header_id|>") && has(t, "\"parameters\"")))
        return TOOLPARSE_LLAMA3;
    return TOOLPARSE_NONE;
}
