/* A Jinja interpreter for chat templates.
 *
 * It covers the part of the Jinja language that the official chat templates
 * use and renders it as Hugging Face does: Python's jinja2 in an immutable
 * sandbox with trim_blocks, lstrip_blocks, the loopcontrols extension, the
 * default Undefined, a `tojson` filter that keeps non-ASCII text and HTML
 * characters as they are, and the globals raise_exception(msg) and
 * strftime_now(fmt). Values print as Python prints them (True, None, 1.0,
 * ['a', 1]).
 *
 * Input data arrive as JSON (jansson): a JSON object key that is absent is
 * an undefined variable, a JSON null is None.
 *
 * strftime_now reads the clock, unless MEMRA_FIXED_DATE is set to
 * "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SS": then that local time is "now"
 * (reproducible renders for tests and goldens).
 *
 * Every failure (syntax error, raise_exception, a runtime type error, an
 * undefined value used where jinja2 would raise, a resource limit) returns
 * -1 with one line "template line N: what". */
#ifndef MEMRA_JINJA_JINJA_H
#define MEMRA_JINJA_JINJA_H

#include <jansson.h>
#include <stddef.h>

#include "core/err.h"

typedef struct jinja_template jinja_template;

/* A named input variable of a render. */
typedef struct {
    const char *name;
    const json_t *value;
} jinja_var;

/* Parse a template (UTF-8, `len` bytes). NULL with a message on a syntax
 * error or invalid UTF-8. */
jinja_template *jinja_parse(const char *src, size_t len, memra_err *err);
void jinja_free(jinja_template *t);

/* Render with the given variables (later entries win over earlier ones of
 * the same name). *out is a NUL-terminated string the caller frees. */
int jinja_render_vars(const jinja_template *t, const jinja_var *vars, size_t n_vars, char **out,
                      memra_err *err);

/* Parse and render in one call; `context` is a JSON object whose keys are
 * the variables (NULL: no variables). */
int jinja_render(const char *tmpl, const json_t *context, char **out, memra_err *err);

#endif
