#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers, for memra-parity.

Runs on the GPU machine (torch + transformers). Loads an HF checkpoint dir
(any, including ones memra-convert --random writes), runs one forward pass
over the given token ids in float64 on the CPU with eager attention (the
most exact reference transformers offers; float32 where a kernel has no
float64 path, e.g. grouped MoE experts: the metadata says which), and writes a safetensors dump:

  tokens  I32 [n]                 the input ids
  logits  F32 [n, vocab]          logits at every position
  hidden  F32 [n_layers + 1, n, dim]
          hidden states: [0] the scaled embeddings, [i] the output of layer i
          (HF convention: the last entry has the final norm applied)

metadata: model_type, transformers version, dtype "float64", and the
command's --note.

A checkpoint whose safetensors carry a Qwen3.5 MTP ("NextN") block
(mtp.fc, mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden, mtp.norm and one
full-attention decoder layer mtp.layers.0.*, which transformers does not load)
also gets, in the same dtype as the main model:

  mtp_logits  F32 [n - 1, vocab]  row q: the MTP block's logits from h_q and x_{q+1}
  mtp_hidden  F32 [n - 1, dim]    row q: its hidden state after mtp.norm

with h the main model's last hidden state (after its final norm) and, as vLLM's
Qwen3-Next MTP, u_q = fc(concat(norm_e(embed(x_{q+1})), norm_h(h_q))) (the
embedding half first), then the decoder layer over u_0..u_{n-2} at positions
0..n-2 (causal, the model's RoPE), mtp.norm and the model's lm_head. The layer,
norm and head run as transformers' own one-layer model of the same family
(layer_types ["full_attention"]) loaded from the mtp.* tensors, fed
inputs_embeds = u; the two pre-fc norms are the model's own RMSNorm class.
The metadata then also holds "mtp" (that recipe in one line).

With --assistant DIR (a gemma4_assistant checkpoint drafting for the Gemma 4
model CHECKPOINT_DIR), in the same dtype:

  assistant_logits  F32 [n - 1, vocab]     row q: the assistant's logits
  assistant_hidden  F32 [n - 1, backbone]  row q: its post_projection output

each from transformers' own Gemma4AssistantForCausalLM called as its
assisted generation calls it: inputs_embeds = [the model's scaled embedding
of x_{q+1} | the model's hidden[-1] at q], position_ids [[q + 1]], and the
model's shared_kv_states (the K/V of its last full and last sliding layer
that compute any) cut to positions 0..q. The metadata then holds
"assistant" (that recipe in one line).

  hf_reference.py CHECKPOINT_DIR OUT.safetensors [--ids 1,2,3 | --n 24 --seed 0] [--note TEXT]
                  [--assistant ASSISTANT_DIR]

Without --ids, n ids are drawn with a fixed formula (i * 37 + 11) % vocab,
mixed with the seed, so a dump is reproducible without a tokenizer."""
import argparse
import glob
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--ids", default=None)
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--note", default="")
    ap.add_argument("--assistant", default=None)
    a = ap.parse_args()

    cfg = json.load(open(os.path.join(a.ckpt, "config.json")))
    vocab = cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size")
    if a.ids:
        ids = [int(x) for x in a.ids.split(",")]
    else:
        ids = [((i * 37 + 11) + a.seed * 101) % vocab for i in range(a.n)]
    x = torch.tensor([ids], dtype=torch.long)
    # float64 where transformers can (some MoE expert kernels are f32/bf16 only).
    for dtype in (torch.float64, torch.float32):
        model = AutoModelForCausalLM.from_pretrained(a.ckpt, torch_dtype=dtype, attn_implementation="eager")
        model.eval()
        try:
            with torch.no_grad():
                out = model(x, output_hidden_states=True, use_cache=False)
            break
        except RuntimeError as e:
            if dtype != torch.float64:
                raise
            print(f"float64 forward failed ({str(e)[:80]}); using float32", file=sys.stderr)
    logits = out.logits[0].to(torch.float32).contiguous()
    hidden = torch.stack([h[0] for h in out.hidden_states]).to(torch.float32).contiguous()
    meta = {
        "model_type": str(cfg.get("model_type")),
        "transformers": transformers.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "note": a.note,
    }
    tensors = {"tokens": torch.tensor(ids, dtype=torch.int32), "logits": logits, "hidden": hidden}
    mtp = mtp_tensors(a.ckpt)
    if mtp:
        mtp_logits, mtp_hidden = mtp_reference(a.ckpt, cfg, model, out, x, mtp, dtype)
        tensors["mtp_logits"] = mtp_logits.to(torch.float32).contiguous()
        tensors["mtp_hidden"] = mtp_hidden.to(torch.float32).contiguous()
        meta["mtp"] = ("u_q = fc(concat(pre_fc_norm_embedding(embed(x[q+1])), pre_fc_norm_hidden(h[q]))), "
                       "h = hidden[-1]; mtp.layers.0 over u at positions 0..n-2; mtp.norm; lm_head")
    if a.assistant:
        al, ah = assistant_reference(a.assistant, model, out, x, dtype)
        tensors["assistant_logits"] = al.to(torch.float32).contiguous()
        tensors["assistant_hidden"] = ah.to(torch.float32).contiguous()
        meta["assistant"] = ("row q: Gemma4AssistantForCausalLM(inputs_embeds=[embed(x[q+1]) | hidden[-1][q]], "
                             "position_ids=[[q+1]], shared_kv_states cut to positions 0..q); logits and "
                             "post_projection output")
        print(f"{a.out}: assistant_logits {list(al.shape)}, argmax {al.argmax(-1).tolist()[:8]}...")
    save_file(tensors, a.out, metadata=meta)
    top = logits.argmax(-1).tolist()
    print(f"{a.out}: {len(ids)} positions, vocab {logits.shape[1]}, {hidden.shape[0]} hidden states, argmax {top[:8]}...")
    if mtp:
        print(f"{a.out}: mtp_logits {list(tensors['mtp_logits'].shape)}, mtp_hidden {list(tensors['mtp_hidden'].shape)}, "
              f"max |mtp_logits| {tensors['mtp_logits'].abs().max().item():.4f}, "
              f"argmax {tensors['mtp_logits'].argmax(-1).tolist()[:8]}...")


def mtp_tensors(ckpt):
    """The checkpoint's mtp.* tensors (name -> tensor), empty without an MTP block."""
    found = {}
    for f in sorted(glob.glob(os.path.join(ckpt, "*.safetensors"))):
        with safe_open(f, framework="pt") as g:
            for k in g.keys():
                if k.startswith("mtp."):
                    found[k] = g.get_tensor(k)
    return found


def mtp_reference(ckpt, cfg, model, out, x, mtp, dtype):
    """The MTP block's logits [n-1, vocab] and hidden states (after mtp.norm) [n-1, dim]."""
    if "mtp.layers.0.input_layernorm.weight" not in mtp or any(k.startswith("mtp.layers.1.") for k in mtp):
        raise SystemExit("hf_reference: only a one-layer MTP block (mtp.layers.0.*) is supported")
    base = model.model
    h = out.hidden_states[-1][:, :-1]                      # after the final norm, positions 0..n-2
    e = base.embed_tokens(x[:, 1:])                        # the next token's embedding (no scaling in Qwen3.5)
    dim = h.shape[-1]
    eps = base.norm.variance_epsilon if hasattr(base.norm, "variance_epsilon") else base.norm.eps
    norm_cls = type(base.norm)

    def norm(name):
        m = norm_cls(dim, eps=eps)
        m.weight.data.copy_(mtp[name].to(torch.float32))
        return m.to(dtype).eval()

    with torch.no_grad():
        cat = torch.cat([norm("mtp.pre_fc_norm_embedding.weight")(e), norm("mtp.pre_fc_norm_hidden.weight")(h)], dim=-1)
        u = torch.nn.functional.linear(cat, mtp["mtp.fc.weight"].to(dtype))
    # A one-layer model of the same family: layer 0 = mtp.layers.0 (full attention), norm = mtp.norm,
    # lm_head = the main model's. Written as a checkpoint so transformers' own loading (e.g. fusing
    # per-expert tensors) applies to it as to the main model.
    mcfg = dict(cfg)
    mcfg["num_hidden_layers"] = 1
    mcfg["layer_types"] = ["full_attention"]
    for k in ("mtp_num_hidden_layers", "full_attention_interval"):
        mcfg.pop(k, None)
    sd = {"model." + k[len("mtp."):]: v for k, v in mtp.items() if k.startswith("mtp.layers.0.")}
    sd["model.norm.weight"] = mtp["mtp.norm.weight"]
    sd["model.embed_tokens.weight"] = base.embed_tokens.weight.detach().to(torch.float32)
    if not mcfg.get("tie_word_embeddings", False):
        sd["lm_head.weight"] = model.lm_head.weight.detach().to(torch.float32)
    tmp = tempfile.mkdtemp(prefix="hf-mtp-")
    try:
        json.dump(mcfg, open(os.path.join(tmp, "config.json"), "w"))
        save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(tmp, "model.safetensors"),
                  metadata={"format": "pt"})
        m = AutoModelForCausalLM.from_pretrained(tmp, torch_dtype=dtype, attn_implementation="eager")
    finally:
        shutil.rmtree(tmp)
    m.eval()
    if list(m.config.layer_types) != ["full_attention"]:
        raise SystemExit(f"hf_reference: MTP model got layer types {m.config.layer_types}")
    with torch.no_grad():
        mo = m(inputs_embeds=u, output_hidden_states=True, use_cache=False)
    return mo.logits[0], mo.hidden_states[-1][0]


def assistant_reference(path, model, out, x, dtype):
    """A gemma4_assistant's logits [n-1, vocab] and next hidden states [n-1, backbone]."""
    asst = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, attn_implementation="eager")
    asst.eval()
    base = model.model
    with torch.no_grad():
        tout = base(input_ids=x, use_cache=True, return_shared_kv_states=True)
    shared = getattr(tout, "shared_kv_states", None)
    if not shared:
        raise SystemExit("hf_reference: the model returned no shared_kv_states "
                         f"(transformers {transformers.__version__})")
    n = x.shape[1]
    for kind, (k, v) in shared.items():
        if k.shape[-2] != n or v.shape[-2] != n:
            raise SystemExit(f"hf_reference: shared_kv_states[{kind}] holds {k.shape[-2]} positions, not {n}")
    h = out.hidden_states[-1]                       # after the model's final norm
    e = model.get_input_embeddings()(x)             # the model's scaled embedding
    logits, hidden = [], []
    with torch.no_grad():
        for q in range(n - 1):
            inp = torch.cat([e[:, q + 1:q + 2], h[:, q:q + 1]], dim=-1)
            kv = {kind: (k[:, :, :q + 1], v[:, :, :q + 1]) for kind, (k, v) in shared.items()}
            o = asst(inputs_embeds=inp, position_ids=torch.tensor([[q + 1]]), shared_kv_states=kv,
                     attention_mask=None)
            logits.append(o.logits[0, 0])
            hidden.append(o.last_hidden_state[0, 0])
    return torch.stack(logits), torch.stack(hidden)


if __name__ == "__main__":
    sys.exit(main())
