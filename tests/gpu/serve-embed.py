#!/usr/bin/env python3
"""memra-serve's /v1/embeddings and /v1/rerank against transformers'
reference (tests/fixtures/embed/tiny-qwen3-embed.json), for a server that
runs the fixture's model on any backend (tests/gpu/run.sh: CUDA). Checks:
each vector's cosine with the reference >= 0.999 and unit norm, usage =
the reference's token count, the rerank order equal and each score within
1e-3, and the same request again gives the same bytes (packed steps cut by
the request alone). Standard library only.

  serve-embed.py URL FIXTURE [EMBED-ALIAS RERANK-ALIAS]"""
import json
import math
import sys
import urllib.request


def post(url, path, body):
    req = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def main():
    url, fix = sys.argv[1], json.load(open(sys.argv[2]))
    emb, rr = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else ("emb", "rr")
    bad = []
    inputs = fix["embed"]["inputs"]
    body = {"model": emb, "input": [i["text"] for i in inputs]}
    a, b = post(url, "/v1/embeddings", body), post(url, "/v1/embeddings", body)
    if a["usage"]["prompt_tokens"] != sum(len(i["ids"]) for i in inputs):
        bad.append("usage %s" % a["usage"])
    for d, ref in zip(a["data"], inputs):
        v, w = d["embedding"], ref["last"]
        dot = sum(x * y for x, y in zip(v, w))
        cos = dot / math.sqrt(sum(x * x for x in v) * sum(y * y for y in w))
        norm = math.sqrt(sum(x * x for x in v))
        print("embedding %d: cosine %.6f, norm %.7f" % (d["index"], cos, norm))
        if cos < 0.999 or abs(norm - 1) > 1e-5 or len(v) != len(w):
            bad.append("embedding %d: cosine %.6f norm %.7f" % (d["index"], cos, norm))
    if [d["embedding"] for d in a["data"]] != [d["embedding"] for d in b["data"]]:
        bad.append("the same request twice gave different vectors")
    r = post(url, "/v1/rerank", {"model": rr, "query": fix["rerank"]["query"],
                                 "documents": fix["rerank"]["documents"]})
    want = fix["rerank"]["scores"]
    got = {x["index"]: x["relevance_score"] for x in r["results"]}
    order = [x["index"] for x in r["results"]]
    ref_order = sorted(range(len(want)), key=lambda i: (-want[i], i))
    print("rerank: order %s (reference %s), scores %s (reference %s)" %
          (order, ref_order, [round(got[i], 6) for i in range(len(want))],
           [round(s, 6) for s in want]))
    if order != ref_order:
        bad.append("rerank order %s, reference %s" % (order, ref_order))
    for i, s in enumerate(want):
        if abs(got[i] - s) > 1e-3:
            bad.append("rerank document %d: %.6f, reference %.6f" % (i, got[i], s))
    for m in bad:
        print("FAIL " + m)
    sys.exit(1 if bad else 0)


main()
