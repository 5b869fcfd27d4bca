#!/usr/bin/env python3
"""Trains memra-tiny or memra-tiny-draft: a Qwen3-architecture model of a
few million parameters, on the corpus of scripts/fetch-corpus.sh, with the
tokenizer of train_tokenizer.py. Runs on one CUDA GPU (torch +
transformers + tokenizers; no internet needed).

  train_model.py --size memra-tiny --corpus DIR --tokenizer DIR --out DIR
                 [--minutes 3 | --steps N] [--seed 1] [--batch 128] [--ctx 512]
                 [--lr 2e-3] [--teacher DIR [--distill 1.0]]

Writes into --out a standard Hugging Face checkpoint (config.json,
generation_config.json, model.safetensors in bfloat16, tied embeddings;
tokenizer.json + tokenizer_config.json copied from --tokenizer) and
results.json: the configuration, parameter count, training log, held-out
perplexities, greedy samples and, with --teacher, the draft/target
agreement.

Training. Seeded (torch.manual_seed(seed) before the weights are made, a
CPU generator seeded with seed + 1 draws the batches). The training text is
each document of train.txt (split on "\\n\\n\\n") tokenized without special
tokens and followed by <|endoftext|>, all concatenated; every step draws
--batch windows of ctx + 1 tokens at uniformly random offsets. AdamW
(betas 0.9/0.95, weight decay 0.1 on matrices and embeddings, none on
norms), gradient clipping at 1.0, linear warm-up for 100 steps, then cosine
decay to a tenth of the peak at the last step, bf16 autocast with float32
master weights. With --minutes the number of steps is fixed after step 40
from the measured step time so that training fits the budget, at most
--max-epochs (50) passes over the training tokens; results.json
records it, and --steps N repeats a run with the same schedule (same
batches; GPU kernels are not bitwise deterministic). The whole held-out
text is evaluated ten times during training and the weights of the best
evaluation are kept (with a tenth-of-the-run granularity this is plain
early stopping; the final figures below are then measured afresh).

With --teacher DIR (the trained memra-tiny), the model is trained by
distillation: loss = distill * KL(teacher || model) + (1 - distill) * CE,
the teacher's next-token distribution taken in bf16 at temperature 1; and
the greedy agreement with the teacher is measured at the end.

Held-out perplexity, exactly as memra computes it (the procedure the C side
reproduces):
  1. text = the file's bytes decoded as UTF-8, unchanged (heldout.txt and
     heldout-sample.txt end with one "\\n"; the documents of heldout.txt
     are separated by "\\n\\n\\n").
  2. ids = the tokenizer's encoding of the whole text, no BOS, no EOS,
     nothing added (tokenizer.json's post-processor adds nothing).
  3. Windows: ids[0:C], ids[C:2C], ... with C = 512 (the context length);
     the last window may be shorter and is dropped if it has fewer than 2
     tokens. Each window is run from an empty cache (position 0).
  4. In a window of L tokens, positions 0..L-2 each predict the next token
     of the window: NLL = -log softmax(logits at that position)[next id].
     The last position of a window predicts nothing.
  5. mean NLL = sum of all NLLs / number of predictions (N - number of
     windows when no window is dropped); perplexity = exp(mean NLL).
  The figures come from the saved bfloat16 weights, upcast to float32 and
  run in float32 (TF32 off), i.e. the numbers memra should reach with the
  converted GGUF up to float rounding. Greedy agreement: over the same
  positions, the fraction where argmax of the draft's logits equals argmax
  of the target's."""
import argparse
import inspect
import json
import math
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F
import tokenizers
import transformers
from tokenizers import Tokenizer
from transformers import Qwen3Config, Qwen3ForCausalLM

# Sizes. Parameters (vocabulary 4096, tied embeddings): memra-tiny 4,001,792
# (8.0 MB in bf16), memra-tiny-draft 967,936 (1.9 MB): 9.9 MB together. The
# draft has 6.7 times fewer non-embedding parameters; three layers rather
# than two for a better chance at >= 50% greedy agreement with the target.
SIZES = {
    "memra-tiny": dict(
        hidden_size=256,
        intermediate_size=384,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
    ),
    "memra-tiny-draft": dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
    ),
}
ROPE_THETA = 10000.0
WARMUP = 100
CALIBRATE_AT = 40


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def make_config(size, vocab, ctx, eot):
    cfg = dict(
        architectures=["Qwen3ForCausalLM"],
        vocab_size=vocab,
        max_position_embeddings=ctx,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        attention_dropout=0.0,
        use_sliding_window=False,
        hidden_act="silu",
        initializer_range=0.02,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        **SIZES[size],
    )
    cfg["max_window_layers"] = cfg["num_hidden_layers"]
    # transformers v5 takes the RoPE base in rope_parameters, v4 as rope_theta.
    if "rope_parameters" in inspect.signature(Qwen3Config.__init__).parameters:
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": ROPE_THETA}
    else:
        cfg["rope_theta"] = ROPE_THETA
    return Qwen3Config(**cfg)


def check_rope(model, head_dim):
    """The RoPE base must be the one asked for, not a silent default."""
    inv = None
    for mod in model.modules():
        if hasattr(mod, "inv_freq") and torch.is_tensor(mod.inv_freq):
            inv = mod.inv_freq.float().cpu()
            break
    if inv is None:
        log("warning: no rotary inv_freq buffer found; RoPE base not checked")
        return
    want = ROPE_THETA ** (-2.0 / head_dim)
    if abs(inv[1].item() - want) > 1e-6 * max(1.0, want):
        sys.exit("train_model: RoPE inv_freq[1] = %g, expected %g (rope_theta %g not applied)" % (inv[1].item(), want, ROPE_THETA))


def load_model(path, dtype, dev):
    try:
        m = Qwen3ForCausalLM.from_pretrained(path, dtype=dtype)
    except TypeError:
        m = Qwen3ForCausalLM.from_pretrained(path, torch_dtype=dtype)
    return m.to(device=dev, dtype=dtype).eval()


def windows(ids, ctx, batch):
    """Non-overlapping windows of ctx tokens from 0 (the last may be shorter;
    one under 2 tokens is dropped), grouped into batches of equal length."""
    n = ids.numel()
    full = [s for s in range(0, n - ctx + 1, ctx)]
    for i in range(0, len(full), batch):
        yield torch.stack([ids[s : s + ctx] for s in full[i : i + batch]])
    rest = n - len(full) * ctx
    if rest >= 2:
        yield ids[n - rest :].unsqueeze(0)


@torch.no_grad()
def evaluate(models, ids, ctx, dev, batch=64, autocast=False):
    """Mean next-token NLL (float64 sum), top-1 accuracy of each model over
    the windows of `ids`; with two models, also how often their argmaxes
    agree. models: list of (name, model)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    stats = {name: {"nll_sum": 0.0, "correct": 0} for name, _ in models}
    count, agree, nwin = 0, 0, 0
    for w in windows(ids, ctx, batch):
        w = w.to(dev)
        tgt = w[:, 1:]
        argmaxes = []
        for name, m in models:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = m(input_ids=w, use_cache=False).logits
            logits = logits[:, :-1].float()
            logp = torch.log_softmax(logits, dim=-1)
            nll = -logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
            am = logits.argmax(dim=-1)
            stats[name]["nll_sum"] += nll.double().sum().item()
            stats[name]["correct"] += (am == tgt).sum().item()
            argmaxes.append(am)
        if len(argmaxes) == 2:
            agree += (argmaxes[0] == argmaxes[1]).sum().item()
        count += tgt.numel()
        nwin += w.shape[0]
    out = {}
    for name, s in stats.items():
        mean = s["nll_sum"] / count
        out[name] = {
            "tokens": ids.numel(),
            "windows": nwin,
            "predictions": count,
            "mean_nll": mean,
            "perplexity": math.exp(mean),
            "top1_accuracy": s["correct"] / count,
        }
    if len(models) == 2:
        out["agreement"] = agree / count
    return out


@torch.no_grad()
def greedy(model, tok, ids, n_new, eot, ctx, dev):
    """Greedy continuation without a KV cache (the whole prefix each step):
    slow but with no cache logic to get wrong."""
    ids = list(ids)
    new = []
    for _ in range(n_new):
        x = torch.tensor([ids[-ctx:]], dtype=torch.long, device=dev)
        nxt = int(model(input_ids=x, use_cache=False).logits[0, -1].float().argmax())
        new.append(nxt)
        ids.append(nxt)
        if nxt == eot:
            break
    return new


def lr_at(step, total, peak):
    if step < WARMUP:
        return peak * (step + 1) / WARMUP
    if total is None:
        return peak
    p = min(1.0, (step - WARMUP) / max(1, total - WARMUP))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * p)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=sorted(SIZES), required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=3.0, help="training time budget")
    ap.add_argument("--steps", type=int, default=0, help="fixed number of steps (overrides --minutes)")
    ap.add_argument("--max-epochs", type=float, default=50.0, help="cap on passes over the training tokens")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--teacher", default=None, help="trained target model dir: distill from it, measure agreement")
    ap.add_argument("--distill", type=float, default=1.0, help="weight of the KL term when --teacher is given")
    a = ap.parse_args()

    if not torch.cuda.is_available():
        sys.exit("train_model: no CUDA device")
    dev = torch.device("cuda")
    # Exact float32 (no TF32) for the evaluations; training runs under bf16 autocast.
    torch.set_float32_matmul_precision("highest")
    t_start = time.time()
    log("%s: torch %s, transformers %s, tokenizers %s, %s" % (a.size, torch.__version__, transformers.__version__, tokenizers.__version__, torch.cuda.get_device_name(0)))

    # ---- data
    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eot = tok.token_to_id("<|endoftext|>")
    if eot is None:
        sys.exit("train_model: the tokenizer has no <|endoftext|>")
    docs = [d for d in read_text(os.path.join(a.corpus, "train.txt")).rstrip("\n").split("\n\n\n") if d]
    train_ids = []
    for e in tok.encode_batch(docs, add_special_tokens=False):
        train_ids.extend(e.ids)
        train_ids.append(eot)
    train = torch.tensor(train_ids, dtype=torch.long)
    evals = {}
    for key, fname in (("heldout", "heldout.txt"), ("heldout_sample", "heldout-sample.txt")):
        text = read_text(os.path.join(a.corpus, fname))
        evals[key] = (torch.tensor(tok.encode(text, add_special_tokens=False).ids, dtype=torch.long), len(text.encode("utf-8")))
    heldout = evals["heldout"][0]
    log("data: %d train documents, %d train tokens, %d held-out tokens, vocab %d" % (len(docs), train.numel(), heldout.numel(), vocab))
    if train.numel() < 10 * (a.ctx + 1):
        sys.exit("train_model: only %d training tokens" % train.numel())
    train_gpu = train.to(dev)

    # ---- model
    torch.manual_seed(a.seed)
    torch.cuda.manual_seed_all(a.seed)
    config = make_config(a.size, vocab, a.ctx, eot)
    model = Qwen3ForCausalLM(config).float().to(dev)
    check_rope(model, SIZES[a.size]["head_dim"])
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        sys.exit("train_model: lm_head is not tied to embed_tokens")
    n_params = sum(p.numel() for p in model.parameters())
    log("model: %s, %d parameters (%.2f M, %.2f MB in bf16)" % (json.dumps(SIZES[a.size]), n_params, n_params / 1e6, n_params * 2 / 1e6))

    teacher = None
    if a.teacher:
        teacher = load_model(a.teacher, torch.bfloat16, dev)
        if teacher.config.vocab_size != vocab:
            sys.exit("train_model: teacher vocab %d, tokenizer %d" % (teacher.config.vocab_size, vocab))
        log("teacher: %s (%d parameters), distill weight %g" % (a.teacher, sum(p.numel() for p in teacher.parameters()), a.distill))

    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    gen = torch.Generator().manual_seed(a.seed + 1)
    span = torch.arange(a.ctx + 1)
    tokens_per_step = a.batch * a.ctx
    max_steps_epochs = max(WARMUP + 1, int(a.max_epochs * train.numel() / tokens_per_step))
    total = min(a.steps, max_steps_epochs) if a.steps > 0 else None
    budget = a.minutes * 60.0
    eval_every = max(1, total // 10) if total else None

    def train_eval():
        model.eval()
        r = evaluate([("m", model)], heldout, a.ctx, dev, autocast=True)["m"]
        model.train()
        return r["mean_nll"]

    model.train()
    history, evals_log = [], []
    best = (float("inf"), -1, None)
    loss_acc = torch.zeros((), device=dev)
    ce_acc = torch.zeros((), device=dev)
    acc_n = 0
    step = 0
    t0 = time.time()
    t_cal = None
    while total is None or step < total:
        lr = lr_at(step, total, a.lr)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, train.numel() - a.ctx, (a.batch,), generator=gen)
        batch = train_gpu[(starts[:, None] + span).to(dev)]
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x, use_cache=False).logits
        logits = logits.float()
        ce = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        loss = ce
        if teacher is not None and a.distill > 0:
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                tl = teacher(input_ids=x, use_cache=False).logits
            kl = F.kl_div(
                F.log_softmax(logits, -1).reshape(-1, vocab),
                F.log_softmax(tl.float(), -1).reshape(-1, vocab),
                log_target=True,
                reduction="batchmean",
            )
            loss = a.distill * kl + (1.0 - a.distill) * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_acc += loss.detach()
        ce_acc += ce.detach()
        acc_n += 1
        step += 1

        if total is None and step == 10:
            torch.cuda.synchronize()
            t_cal = time.time()
        if total is None and step == CALIBRATE_AT:
            torch.cuda.synchronize()
            per_step = (time.time() - t_cal) / (CALIBRATE_AT - 10)
            left = budget - (time.time() - t0)
            # 4% of the budget is kept for the ten evaluations.
            total = min(max_steps_epochs, CALIBRATE_AT + max(0, int(0.96 * left / per_step)))
            total = max(total, WARMUP + 1)
            eval_every = max(1, total // 10)
            log("calibrated: %.1f ms/step -> %d steps (%.2f epochs of %d tokens)" % (per_step * 1e3, total, total * tokens_per_step / train.numel(), train.numel()))
        if step % 50 == 0 or step == total:
            entry = {"step": step, "seconds": round(time.time() - t0, 2), "lr": lr, "loss": (loss_acc / acc_n).item(), "ce": (ce_acc / acc_n).item()}
            history.append(entry)
            loss_acc.zero_()
            ce_acc.zero_()
            acc_n = 0
            log("step %d/%s  loss %.4f  ce %.4f  lr %.2e  %.0fs" % (step, total, entry["loss"], entry["ce"], lr, entry["seconds"]))
            if not math.isfinite(entry["loss"]):
                sys.exit("train_model: loss is not finite at step %d" % step)
        if eval_every and (step % eval_every == 0 or step == total):
            nll = train_eval()
            evals_log.append({"step": step, "heldout_nll_bf16": nll, "heldout_ppl_bf16": math.exp(nll)})
            log("eval step %d: held-out ppl %.3f (bf16 autocast)" % (step, math.exp(nll)))
            if nll < best[0]:
                best = (nll, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
    torch.cuda.synchronize()
    train_seconds = time.time() - t0
    best_step = best[1]
    log("trained %d steps in %.1f s; best held-out at step %d" % (step, train_seconds, best_step))
    if best[2] is not None:
        model.load_state_dict(best[2])

    # ---- save (bf16), then reload the saved files for every figure below
    os.makedirs(a.out, exist_ok=True)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(a.out)  # safetensors: the default since transformers 4.35
    st = os.path.join(a.out, "model.safetensors")
    if not os.path.isfile(st):
        sys.exit("train_model: %s was not written (files: %s)" % (st, sorted(os.listdir(a.out))))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(a.tokenizer, f), os.path.join(a.out, f))
    saved_cfg = json.load(open(os.path.join(a.out, "config.json")))
    theta = saved_cfg.get("rope_theta", (saved_cfg.get("rope_parameters") or {}).get("rope_theta"))
    if theta is None or abs(float(theta) - ROPE_THETA) > 1e-3:
        sys.exit("train_model: config.json has rope theta %r, expected %g" % (theta, ROPE_THETA))
    del model, opt, best
    torch.cuda.empty_cache()

    m32 = load_model(a.out, torch.float32, dev)
    results = {
        "name": a.size,
        "command": " ".join(sys.argv),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
        "device": torch.cuda.get_device_name(0),
        "architecture": dict(SIZES[a.size], vocab_size=vocab, context_length=a.ctx, rope_theta=ROPE_THETA, tie_word_embeddings=True, rms_norm_eps=1e-6),
        "parameters": n_params,
        "bf16_bytes": os.path.getsize(st),
        "training": {
            "seed": a.seed,
            "batch": a.batch,
            "tokens_per_step": tokens_per_step,
            "steps": step,
            "best_step": best_step,
            "tokens_seen": step * tokens_per_step,
            "epochs": step * tokens_per_step / train.numel(),
            "train_tokens": train.numel(),
            "train_documents": len(docs),
            "peak_lr": a.lr,
            "warmup_steps": WARMUP,
            "seconds": round(train_seconds, 1),
            "minutes_budget": a.minutes if a.steps <= 0 else None,
            "teacher": a.teacher,
            "distill": a.distill if a.teacher else None,
            "final_train_loss": history[-1]["loss"] if history else None,
            "final_train_ce": history[-1]["ce"] if history else None,
            "log": history,
            "evals": evals_log,
        },
    }

    # ---- figures, float32 from the saved bf16 weights
    for key, (ids, nbytes) in evals.items():
        r = evaluate([("m", m32)], ids, a.ctx, dev)["m"]
        r["bytes"] = nbytes
        r["bits_per_byte"] = r["mean_nll"] * r["predictions"] / math.log(2) / nbytes
        results[key] = r
        log("%s: %d tokens, %d windows, perplexity %.4f (mean NLL %.5f), top-1 %.3f" % (key, r["tokens"], r["windows"], r["perplexity"], r["mean_nll"], r["top1_accuracy"]))
    tp = train[: heldout.numel()]
    results["train_prefix"] = evaluate([("m", m32)], tp, a.ctx, dev)["m"]
    log("train prefix (%d tokens): perplexity %.4f" % (tp.numel(), results["train_prefix"]["perplexity"]))

    if a.teacher:
        t32 = load_model(a.teacher, torch.float32, dev)
        r = evaluate([("target", t32), ("draft", m32)], heldout, a.ctx, dev)
        results["agreement"] = {
            "heldout_positions": r["draft"]["predictions"],
            "greedy_agreement": r["agreement"],
            "target_top1_accuracy": r["target"]["top1_accuracy"],
            "draft_top1_accuracy": r["draft"]["top1_accuracy"],
            "target_perplexity": r["target"]["perplexity"],
            "teacher": a.teacher,
        }
        log("draft/target greedy next-token agreement on %d held-out positions: %.4f" % (r["draft"]["predictions"], r["agreement"]))
        del t32

    sample_ids = evals["heldout_sample"][0]
    prompts = [
        ("moby-dick", "Call me Ishmael."),
        ("whale", "The whale"),
        ("sotu-opening", "Fellow-Citizens of the Senate and House of Representatives:"),
        ("sotu-union", "The state of the Union is"),
        ("heldout", tok.decode(sample_ids[:32].tolist())),
    ]
    samples = []
    for name, text in prompts:
        ids = tok.encode(text, add_special_tokens=False).ids
        new = greedy(m32, tok, ids, 48, eot, a.ctx, dev)
        samples.append({"name": name, "prompt": text, "prompt_ids": ids, "greedy_ids": new, "greedy_text": tok.decode(new)})
        log("sample %s: %r -> %r" % (name, text, tok.decode(new)))
    results["samples"] = samples
    results["wall_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, ensure_ascii=False)
        f.write("\n")
    log("wrote %s (%.1f s in all)" % (a.out, results["wall_seconds"]))


if __name__ == "__main__":
    main()
