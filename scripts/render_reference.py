#!/usr/bin/env python3
"""Expected chat-template renders, made with Python's jinja2 the way Hugging
Face transformers renders chat templates, for the C tests to compare against
byte for byte (the tests run no Python).

transformers (utils/chat_template_utils.py, _compile_jinja_template and
render_jinja_template) renders with:
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[AssistantTracker, loopcontrols])
  filters["tojson"]  = json.dumps(x, ensure_ascii=False, indent=indent,
                                  separators=separators, sort_keys=sort_keys)
  globals["raise_exception"] = raise jinja2.exceptions.TemplateError(message)
  globals["strftime_now"]    = datetime.now().strftime(format)
  template.render(messages=..., tools=..., documents=...,
                  add_generation_prompt=..., **special_tokens, **kwargs)
with tools and documents None when not given. strftime_now is pinned to
FIXED_DATE here; the C side reads the same date from MEMRA_FIXED_DATE.

Writes, under tests/fixtures/chat/:
  expected/<template>/<conversation>.txt    the render, or
  expected/<template>/<conversation>.error  why it raised ("raise_exception:
                                             <message>" for the template's own
                                             raise_exception, else "error: ...")
  expected/manifest.json                     every pair, the date, jinja2's version
  jinja_cases.json                           fills in "expect" for each case

Usage (from the project root):
  python3 scripts/render_reference.py [--templates build/test-data/templates]
"""
import argparse
import datetime
import glob
import json
import os
import shutil
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_DATE = "2025-06-15T09:30:00"  # keep in step with tests/unit/test_chat_template.c
FIXTURES = os.path.join("tests", "fixtures", "chat")


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} tag; its body renders as it is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    fixed = datetime.datetime.fromisoformat(FIXED_DATE)

    def strftime_now(fmt):
        return fixed.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    """('output', text) or ('raise', message) or ('error', description)."""
    try:
        return "output", env.from_string(source).render(**context)
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception raises the base class
            return "raise", str(e)
        return "error", f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - any failure is an expected error
        return "error", f"{type(e).__name__}: {e}"


def one_line(s):
    return " ".join(s.split("\n"))


def chat_context(conv, tokens):
    ctx = dict(tokens)
    ctx.update(conv.get("extra", {}))
    ctx.update(messages=conv["messages"], tools=conv.get("tools"), documents=conv.get("documents"),
               add_generation_prompt=conv["add_generation_prompt"])
    return ctx


def templates_goldens(env, template_dir):
    tokens = json.load(open(os.path.join(FIXTURES, "special_tokens.json"), encoding="utf-8"))
    convs = sorted(glob.glob(os.path.join(FIXTURES, "conversations", "*.json")))
    out_dir = os.path.join(FIXTURES, "expected")
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    manifest = {"fixed_date": FIXED_DATE, "jinja2": jinja2.__version__, "cases": []}
    for tpath in sorted(glob.glob(os.path.join(template_dir, "*.jinja"))):
        name = os.path.basename(tpath)[: -len(".jinja")]
        if name not in tokens:
            sys.exit(f"{name}: no entry in special_tokens.json")
        with open(tpath, encoding="utf-8", newline="") as f:
            source = f.read()
        os.makedirs(os.path.join(out_dir, name))
        for cpath in convs:
            cname = os.path.basename(cpath)[: -len(".json")]
            conv = json.load(open(cpath, encoding="utf-8"))
            kind, text = render(env, source, chat_context(conv, tokens[name]))
            rel = os.path.join(name, cname + (".txt" if kind == "output" else ".error"))
            with open(os.path.join(out_dir, rel), "w", encoding="utf-8", newline="") as f:
                if kind == "output":
                    f.write(text)
                else:
                    f.write(("raise_exception: " if kind == "raise" else "error: ") + one_line(text) + "\n")
            entry = {"template": name, "conversation": cname, "kind": kind, "file": rel}
            if kind == "raise":
                entry["message"] = text
            manifest["cases"].append(entry)
    with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    kinds = [c["kind"] for c in manifest["cases"]]
    print(f"{len(kinds)} template/conversation pairs: {kinds.count('output')} renders, "
          f"{kinds.count('raise')} raise_exception, {kinds.count('error')} other errors")


def jinja_cases(env):
    path = os.path.join(FIXTURES, "jinja_cases.json")
    cases = json.load(open(path, encoding="utf-8"))
    for c in cases:
        kind, text = render(env, c["template"], c.get("context", {}))
        if kind == "output":
            c["expect"] = {"output": text}
        elif kind == "raise":
            c["expect"] = {"raise": text}
        else:
            c["expect"] = {"error": one_line(text)}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cases, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} jinja cases")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--templates", default=os.path.join("build", "test-data", "templates"))
    args = ap.parse_args()
    if not os.path.isdir(FIXTURES):
        sys.exit("run from the project root")
    env = make_env()
    templates_goldens(env, args.templates)
    jinja_cases(env)


if __name__ == "__main__":
    main()
