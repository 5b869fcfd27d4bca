/* Tensor names: Hugging Face <-> GGUF (llama.cpp conventions).
 *
 *   token_embd.weight        model.embed_tokens.weight
 *   output_norm.weight       model.norm.weight
 *   output.weight            lm_head.weight
 *   rope_freqs.weight        (GGUF only: llama3 rope factors)
 *   blk.N.attn_norm          model.layers.N.input_layernorm
 *   blk.N.attn_q/k/v/output  model.layers.N.self_attn.q/k/v/o_proj   (.weight, .bias)
 *   blk.N.attn_q/k_norm      model.layers.N.self_attn.q/k_norm
 *   blk.N.ffn_gate/up/down   model.layers.N.mlp.gate/up/down_proj
 *
 * The post-attention norm is family-dependent: for llama/qwen the HF
 * post_attention_layernorm is the pre-FFN norm, GGUF ffn_norm; gemma3 has
 * four norms per layer and names them post_attention_norm (HF
 * post_attention_layernorm), ffn_norm (pre_feedforward_layernorm) and
 * post_ffw_norm (post_feedforward_layernorm).
 *
 * qwen3_moe: blk.N.ffn_gate_inp is the router (HF mlp.gate); GGUF merges the
 * experts into blk.N.ffn_{gate,up,down}_exps.weight, outermost dim the
 * expert, while HF keeps model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight. */
#ifndef MEMRA_MODEL_TENSOR_NAMES_H
#define MEMRA_MODEL_TENSOR_NAMES_H

#include <stddef.h>

#include "model/config.h"

/* HF -> GGUF. *expert (may be NULL) gets the expert index of a per-expert
 * HF name (whose GGUF name is the merged tensor), else -1. Returns -1 for a
 * name the family does not have, or when out (n bytes) is too small; the
 * caller reports the name. For gemma3, the multimodal checkpoints' prefixes
 * (language_model.model., model.language_model.) are accepted too. */
int tensor_name_hf_to_gguf(model_family f, const char *hf, char *out, size_t n, int *expert);

/* GGUF -> HF. expert must be >= 0 exactly for the merged expert tensors
 * (giving that expert's HF name) and -1 otherwise. Returns -1 for a name
 * the family does not have, for a GGUF-only tensor (rope_freqs.weight), or
 * when out is too small. */
int tensor_name_gguf_to_hf(model_family f, const char *gguf, int expert, char *out, size_t n);

/* Whether a GGUF name is one of the merged expert tensors (ffn_*_exps;
 * gemma4's are stacked in HF too: contract.h, role_is_expert_stack). */
int tensor_name_gguf_is_experts(const char *gguf);

/* HF tensors that carry no weights a model needs and are skipped when
 * binding: the rotary_emb.inv_freq buffers some older checkpoints saved. */
int tensor_name_hf_is_ignorable(const char *hf);

#endif
