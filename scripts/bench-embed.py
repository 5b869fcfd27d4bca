#!/usr/bin/env python3
"""Embedding throughput of a running memra-serve (or any OpenAI-compatible
server): REQUESTS POSTs to /v1/embeddings from CONCURRENCY clients, each
with INPUTS texts of about WORDS words (distinct per input, so no prefix is
shared), timed end to end. Prints one JSON object: embeddings/s, prompt
tokens/s (from the server's usage), request latency p50/max. Standard
library only.

  bench-embed.py URL MODEL [--inputs 32] [--words 400] [--requests 16]
                 [--concurrency 4]"""
import argparse
import json
import statistics
import threading
import time
import urllib.request

WORDS = ["whale", "sea", "ship", "harpoon", "captain", "storm", "deck", "sail", "ocean",
         "crew", "rope", "mast", "tide", "gull", "anchor", "lantern"]


def text(seed, n):
    """n words drawn by a generator seeded per input, the seed first: no two
    inputs share a prefix (a prefix cache cannot serve one from another)."""
    x, out = seed * 2654435761 + 1, [str(seed)]
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(WORDS[(x >> 33) % len(WORDS)])
    return " ".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--inputs", type=int, default=32)
    ap.add_argument("--words", type=int, default=400)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args()
    lat, toks, errors = [], [], []
    lock = threading.Lock()
    next_req = [0]

    def worker():
        while True:
            with lock:
                k = next_req[0]
                next_req[0] += 1
            if k >= a.requests:
                return
            body = {"model": a.model, "input": [text(k * a.inputs + i, a.words)
                                                 for i in range(a.inputs)]}
            req = urllib.request.Request(a.url.rstrip("/") + "/v1/embeddings",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=600) as r:
                    j = json.load(r)
                dt = time.perf_counter() - t0
                with lock:
                    lat.append(dt)
                    toks.append(j["usage"]["prompt_tokens"])
            except Exception as e:  # counted, reported
                with lock:
                    errors.append(str(e)[:200])

    t0 = time.perf_counter()
    th = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    n = len(lat) * a.inputs
    print(json.dumps({"requests": a.requests, "ok": len(lat), "errors": len(errors),
                      "first_error": errors[0] if errors else None,
                      "inputs_per_request": a.inputs, "concurrency": a.concurrency,
                      "tokens_per_input": (sum(toks) / n) if n else 0, "wall_s": wall,
                      "embeddings_per_s": n / wall, "prompt_tokens_per_s": sum(toks) / wall,
                      "latency_p50_s": statistics.median(lat) if lat else None,
                      "latency_max_s": max(lat) if lat else None}))


if __name__ == "__main__":
    main()
