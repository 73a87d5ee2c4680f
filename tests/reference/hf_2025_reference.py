#!/usr/bin/env python3
"""`moerun convert` + `moerun infer` against transformers 5.x for Qwen3-MoE, gpt-oss, DeepSeek-V2/V3,
GLM-4.5, MiniMax-M2, Qwen3-Next and Qwen3.5-MoE.

Needs a current transformers (and torch 2.x), which the project's CI venv does not carry
(docs/NOTES.md: 5.6 GB); `launch/reference-2025.sh` makes that venv and runs this script, whose
output is committed as docs/data/DATE-COMMIT-hf_2025_reference.txt. CI checks the same families against
tests/reference/numpy_reference.py instead.

For each family: a tiny random model made with transformers' own class (eager attention, seeded,
weights scaled so routing is not decided by ties), saved with save_pretrained as several
safetensors shards, converted, and run. Every step's logits must agree with the Hugging Face
model's (max |a-b| / max |b| <= 1e-4) and the greedy tokens must be equal, for prompts longer
than the sliding window; against the same model in float64 every step's logits must be within
1e-5, or three times what moving every weight by half a float32 ulp moves that step
(reference_common.step_bars), and transformers' own float32 distance under that bar is printed
beside moerun's. Qwen3-Next and Qwen3.5-MoE also run without a shared expert (size 0, as
transformers saves it) under the same checks, and from a bf16 checkpoint (logits within twice
transformers' bf16 forward's own error). The same run with mpirun -np 3 (1 router, 2 expert ranks,
flat and hier), with the expert cache (L1 at 25% plus L2) and with the prefix cache gives the same
bytes. gpt-oss
is also converted from an MXFP4 checkpoint (blocks and scales as shipped; the reference model's
weights are transformers' own convert_moe_packed_tensors of them): kept in MXFP4 (the default)
within 1e-4 and np 3 bit for bit, and dequantized (--quantize none) bit for bit with the fused
float32 checkpoint. `inspect` counts the parameters
transformers does. Bad checkpoints fail with exit 3 naming the file and the tensor or field.

usage: hf_2025_reference.py MOERUN_BIN WORKDIR [FAMILY,...] [SEED]
"""
import copy
import json
import os
import shutil
import sys

import numpy as np
import torch
from reference_common import (FLOAT32_TOL, FLOOR_FACTOR, FLOOR_SEEDS, conditioned_worst, convert_refused, half_ulp_factors, hf_greedy,
                              infer_against, inspect_total, read_logits, relative_error, run, step_bars, write_requests)
from safetensors.torch import load_file, save_file
from reference_common import dequant_fp8, quantize_fp8
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM, GptOssConfig,
                          GptOssForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)
from transformers.integrations.mxfp4 import convert_moe_packed_tensors
import transformers

REL_TOL = 1e-4
STEPS = 6
PROMPTS = [[1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45], [3, 100, 7], [2] + list(range(60, 80))]
COMMON = dict(vocab_size=128, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=127, tie_word_embeddings=False)
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
# DeepSeek's tiny shape: MLA with a latent of 32, nope 16, rope 8, values 16; 8 experts of 32 (whole groups of 32
# for fp8-block), top-2; dense layers of 96; 3 layers.
DEEPSEEK = dict(vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, rms_norm_eps=1e-5,
                bos_token_id=1, eos_token_id=127, tie_word_embeddings=False, intermediate_size=96, moe_intermediate_size=32,
                n_routed_experts=8, num_experts_per_tok=2, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                max_position_embeddings=512)


def families():
    out = {
        # head_dim 32 != hidden / heads (16): the explicit head_dim; per-head q/k norms.
        "qwen3_moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig(**COMMON, head_dim=32, intermediate_size=96, moe_intermediate_size=48,
                                                          num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                                                          max_position_embeddings=256,
                                                          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
        # Long-context Qwen3: yarn (truncated correction range) and a sliding window on every layer.
        "qwen3_moe_yarn": (Qwen3MoeForCausalLM, Qwen3MoeConfig(**COMMON, head_dim=16, intermediate_size=96, moe_intermediate_size=48,
                                                               num_experts=6, num_experts_per_tok=2, norm_topk_prob=False,
                                                               max_position_embeddings=512, use_sliding_window=True,
                                                               sliding_window=7,
                                                               rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                                                                "factor": 4.0,
                                                                                "original_max_position_embeddings": 128})),
        # Dense MLP layers: decoder_sparse_step 2 makes layers 1, 3, 5 MoE, mlp_only_layers takes 3 back: the
        # experts of decoder layers 1 and 5 are MoE layers 0 and 1 of the moe-hdf5 file.
        "qwen3_moe_dense": (Qwen3MoeForCausalLM, Qwen3MoeConfig(**dict(COMMON, num_hidden_layers=6), head_dim=16, intermediate_size=80,
                                                                moe_intermediate_size=48, num_experts=6, num_experts_per_tok=2,
                                                                norm_topk_prob=True, max_position_embeddings=256,
                                                                decoder_sparse_step=2, mlp_only_layers=[3])),
        # gpt-oss: sliding and full layers alternating (window 5), sinks, biases, yarn as its config has it.
        "gpt_oss": (GptOssForCausalLM, GptOssConfig(**COMMON, head_dim=16, intermediate_size=64, num_local_experts=6,
                                                    num_experts_per_tok=2, sliding_window=5, max_position_embeddings=4096)),
        # DeepSeek-V2 (V2-Lite's shape: no q_lora, greedy top-k, 2 shared experts, a dense first layer).
        "deepseek_v2": (DeepseekV2ForCausalLM, DeepseekV2Config(**DEEPSEEK, q_lora_rank=None, n_shared_experts=2, topk_method="greedy",
                                                                first_k_dense_replace=1, routed_scaling_factor=1.0)),
        # DeepSeek-V2 with q_lora and group_limited_greedy (4 groups, 2 kept, each by its best expert), scaled weights.
        "deepseek_v2_group": (DeepseekV2ForCausalLM, DeepseekV2Config(**DEEPSEEK, q_lora_rank=48, n_shared_experts=1,
                                                                      topk_method="group_limited_greedy", n_group=4, topk_group=2,
                                                                      first_k_dense_replace=0, routed_scaling_factor=2.0)),
        # DeepSeek-V3: sigmoid scores, a nonzero correction bias (make_model), 4 groups by their best two, a dense
        # first layer, a shared expert; the second with YaRN (mscale and mscale_all_dim, DeepSeek's form).
        "deepseek_v3": (DeepseekV3ForCausalLM, DeepseekV3Config(**DEEPSEEK, q_lora_rank=48, n_shared_experts=1, n_group=4, topk_group=2,
                                                                first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5)),
        "deepseek_v3_yarn": (DeepseekV3ForCausalLM, DeepseekV3Config(**DEEPSEEK, q_lora_rank=None, n_shared_experts=1, n_group=2,
                                                                     topk_group=1, first_k_dense_replace=1, norm_topk_prob=False,
                                                                     routed_scaling_factor=1.5,
                                                                     rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                                                                      "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                                                                      "beta_fast": 32, "beta_slow": 1,
                                                                                      "original_max_position_embeddings": 64})),
    }
    # GLM-4.5 and MiniMax-M2 (transformers 5.x only): partial RoPE on a quarter of each head (8 of 32 dims),
    # which 5.x saves inside rope_parameters; GLM with q/k/v biases, per-head q/k norms, a dense first
    # layer, V3's grouped sigmoid router and a shared expert; MiniMax with q/k norms over the projection.
    glm = dict(COMMON, num_hidden_layers=3)
    newer = {
        "glm4_moe": ("Glm4MoeForCausalLM", "Glm4MoeConfig",
                     dict(glm, head_dim=32, partial_rotary_factor=0.25, intermediate_size=96, moe_intermediate_size=32,
                          n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
                          first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True, use_qk_norm=True,
                          attention_bias=True, max_position_embeddings=512)),
        "minimax_m2": ("MiniMaxM2ForCausalLM", "MiniMaxM2Config",
                       dict(glm, head_dim=32, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2,
                            max_position_embeddings=512,
                            rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.25})),
        # Qwen3-Next: Gated DeltaNet in layers 0-2 (2 key heads, 4 value heads), gated attention in 3,
        # layer 1 a dense MLP, a gated shared expert; prompts past the DeltaNet chunk of 64 are not needed
        # for the rule (chunked and recurrent agree), the 21-token prompt runs chunked then recurrent.
        "qwen3_next": ("Qwen3NextForCausalLM", "Qwen3NextConfig",
                       dict(glm, num_hidden_layers=4, head_dim=32, intermediate_size=96, moe_intermediate_size=32,
                            shared_expert_intermediate_size=48, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                            decoder_sparse_step=1, mlp_only_layers=[1], linear_num_key_heads=2, linear_num_value_heads=4,
                            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                            layer_types=["linear_attention"] * 3 + ["full_attention"], max_position_embeddings=512,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})),
        # Qwen3.5-MoE's text model (the text-only class: model_type qwen3_5_moe_text): separate DeltaNet
        # projections, every layer MoE, the multimodal RoPE's sections on text positions.
        "qwen3_5_moe": ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig",
                        dict(glm, num_hidden_layers=4, head_dim=32, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                             num_experts=8, num_experts_per_tok=2, linear_num_key_heads=2, linear_num_value_heads=4,
                             linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                             layer_types=["linear_attention"] * 3 + ["full_attention"], max_position_embeddings=512,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                              "mrope_section": [2, 1, 1], "mrope_interleaved": True})),
        # DeepSeek Sparse Attention: 4 positions a query (the longer prompts attend sparsely), 8 index heads; V3.2's
        # indexer ropes rotate_half, GLM-5's interleaved pairs, and its layer 2 shares layer 1's choice.
        "deepseek_v32": ("DeepseekV32ForCausalLM", "DeepseekV32Config",
                         dict(DEEPSEEK, q_lora_rank=48, n_shared_experts=1, n_group=4, topk_group=2, first_k_dense_replace=1,
                              norm_topk_prob=True, routed_scaling_factor=2.5, index_n_heads=8, index_head_dim=16, index_topk=4)),
        "glm_moe_dsa": ("GlmMoeDsaForCausalLM", "GlmMoeDsaConfig",
                        dict(DEEPSEEK, q_lora_rank=48, n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1,
                             norm_topk_prob=True, routed_scaling_factor=2.5, index_n_heads=8, index_head_dim=16, index_topk=4,
                             indexer_types=["full", "full", "shared"])),
    }
    for fam, (model_cls, config_cls, fields) in newer.items():
        if hasattr(transformers, model_cls):
            out[fam] = (getattr(transformers, model_cls), getattr(transformers, config_cls)(**fields))
        else:
            out[fam] = (None, f"transformers {transformers.__version__} has no {model_cls}")
    return out


def make_model(cls, cfg, seed):
    torch.manual_seed(seed)
    model = cls._from_config(cfg, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() == 0:  # a shared expert of size 0
                continue
            if p.dim() == 2:  # 1/sqrt(fan_in): activations O(1), gate logits well apart
                p.normal_(0.0, 1.0 / np.sqrt(p.shape[1]))
            elif p.dim() == 3:  # fused experts: [E, in, out] (gpt-oss), [E, out, in] (DeepSeek)
                fused_out_in = "deepseek" in cfg.model_type or cfg.model_type in ("glm4_moe", "glm_moe_dsa", "minimax_m2", "qwen3_next", "qwen3_5_moe_text")
                p.normal_(0.0, 1.0 / np.sqrt(p.shape[2] if fused_out_in else p.shape[1]))
            elif "sinks" in name:
                p.copy_(torch.randn_like(p))
            else:  # norms and biases: near their defaults, but not equal to them
                p.copy_((1.0 if ("norm" in name or "layernorm" in name) and not name.endswith(".bias") else 0.0) + 0.1 * torch.randn_like(p))
            # DSA's head weights positive: a position scores 0 only when every head's relu is 0, so no
            # two positions tie at the top-k boundary (torch.topk breaks such ties arbitrarily, and
            # its cached and uncached paths differently: an implementation detail, not the model's).
            if name.endswith("indexer.weights_proj.weight"):
                p.abs_()
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek-V3: large enough to change some choices
                b.copy_(0.05 * torch.randn_like(b))
    return model


def float64_steps(model, prompts, reference):
    """Per prompt, the model's step logits in float64 along the prompt and the float32 reference's
    greedy tokens (one causal forward), and each step's bar (reference_common.step_bars) from
    FLOOR_SEEDS float64 copies with every weight moved by half a float32 ulp."""
    m64 = copy.deepcopy(model).double()
    if hasattr(m64, "set_experts_implementation"):
        m64.set_experts_implementation("eager")  # torch's grouped_mm has no float64

    def steps(m, prompt, tokens):
        ids = list(prompt) + list(tokens)
        with torch.no_grad():
            return list(m(torch.tensor([ids[:-1]])).logits[0, len(prompt) - 1:].numpy())

    base = [steps(m64, p, toks) for p, (toks, _) in zip(prompts, reference)]
    moved = [[] for _ in prompts]
    for seed in range(FLOOR_SEEDS):
        mp, rng = copy.deepcopy(m64), np.random.default_rng(seed)
        with torch.no_grad():
            for _, w in mp.named_parameters():
                w.mul_(torch.from_numpy(half_ulp_factors(tuple(w.shape), rng)))
        for i, (p, (toks, _)) in enumerate(zip(prompts, reference)):
            moved[i].append(steps(mp, p, toks))
    return base, [step_bars(b, m) for b, m in zip(base, moved)]


def against_float64(check, tag, ours, model, reference):
    """moerun's step logits against transformers in float64, under each step's float32 bar; the
    float32 transformers reference's own distance under the same bars is printed beside it."""
    base, bars = float64_steps(model, PROMPTS, reference)
    ids = [f"p{i}" for i in range(len(PROMPTS))]
    us = max(conditioned_worst([relative_error(a, b) for a, b in zip(ours[k], base[i])], bars[i]) for i, k in enumerate(ids))
    hf = max(conditioned_worst([relative_error(a, b) for a, b in zip(reference[i][1], base[i])], bars[i]) for i in range(len(ids)))
    plain = lambda logits: max(relative_error(a, b) for i, k in enumerate(ids) for a, b in zip(logits(i, k), base[i]))
    check(us[0] <= 1.0, f"{tag}: every step's logits within {FLOAT32_TOL} of transformers in float64, or {FLOOR_FACTOR:g}x what "
                        f"half-ulp weight changes move it (worst {us[1]:.2e} against a bar of {us[2]:.2e}, {us[0]:.2f} of it; "
                        f"worst error {plain(lambda i, k: ours[k]):.2e}; transformers in float32: {hf[0]:.2f} of its bar, "
                        f"worst error {plain(lambda i, k: reference[i][1]):.2e})")


def convert_checkpoint(check, moerun, model, hf_dir, out_dir, tag, what):
    """Saves `model` with save_pretrained and converts it; True when convert succeeded."""
    model.save_pretrained(hf_dir)
    r = run([moerun, "convert", "--from-hf", hf_dir, "--out", out_dir, "--shards", "2"])
    check(r.returncode == 0, f"{tag}: convert {what} (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    return r.returncode == 0


def no_shared_expert(check, moerun, work, fam, cls, cfg, seed):
    """The family without a shared expert: transformers saves one of size 0 (zero-element matrices
    and a gate); checked as the family is."""
    no_shared = copy.deepcopy(cfg)
    no_shared.shared_expert_intermediate_size = 0
    model = make_model(cls, no_shared, seed)
    tag = fam + "-no-shared"
    out_dir = os.path.join(work, tag + "-moe")
    if not convert_checkpoint(check, moerun, model, os.path.join(work, tag + "-hf"), out_dir, tag, "a checkpoint with a shared expert of size 0"):
        return
    reference = [hf_greedy(model, p, STEPS) for p in PROMPTS]
    got = infer_against(check, moerun, work, tag, out_dir, PROMPTS, STEPS, reference, REL_TOL)
    if got:
        against_float64(check, tag, read_logits(got[2]), model, reference)


def bf16_checkpoint(check, moerun, work, fam, cls, cfg, seed):
    """The family from a bf16 checkpoint. moerun's bf16 kernels round activations to bf16 as
    transformers' bf16 forward does, which moves these tiny models' logits by 10-80% (both engines;
    docs/NOTES.md), so the bar is that forward's own error: against the same bf16 weights in float64,
    moerun's worst step must be within twice transformers' bf16 forward's (each over the steps whose
    context still equals float32's; one maximum against another varies by about 2x between seeds).
    infer_against's 1e-4 does not apply, hence its own run."""
    model = make_model(cls, cfg, seed).to(torch.bfloat16)
    tag = fam + "-bf16"
    out_dir = os.path.join(work, tag + "-moe")
    if not convert_checkpoint(check, moerun, model, os.path.join(work, tag + "-hf"), out_dir, tag, "a bf16 checkpoint"):
        return
    widened = copy.deepcopy(model).float()
    reference = [hf_greedy(widened, p, STEPS) for p in PROMPTS]
    base, _ = float64_steps(widened, PROMPTS, reference)
    reqs, out, lg = (os.path.join(work, tag + s) for s in ("-reqs.jsonl", "-out.jsonl", "-logits.jsonl"))
    write_requests(reqs, PROMPTS, STEPS)
    r = run([moerun, "infer", "--model", out_dir, "--input", reqs, "--output", out, "--logits-out", lg, "--quiet"])
    check(r.returncode == 0, f"{tag}: infer (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    if r.returncode:
        return
    ours, tokens = read_logits(lg), {json.loads(l)["id"]: json.loads(l)["output_tokens"] for l in open(out)}

    def worst(i, got_tokens, logits):  # steps 0..first token that leaves float32's path
        same = next((s for s, (a, b) in enumerate(zip(got_tokens, reference[i][0])) if a != b), len(got_tokens))
        return max(relative_error(a, b) for a, b in list(zip(logits, base[i]))[:same + 1])
    bf16 = [hf_greedy(model, p, STEPS) for p in PROMPTS]
    us = max(worst(i, tokens[f"p{i}"], ours[f"p{i}"]) for i in range(len(PROMPTS)))
    hf = max(worst(i, bf16[i][0], bf16[i][1]) for i in range(len(PROMPTS)))
    agree = sum(t == r for i in range(len(PROMPTS)) for t, r in zip(tokens[f"p{i}"], reference[i][0]))
    check(us <= 2 * hf, f"{tag}: logits against the bf16 weights in float64 within twice transformers' bf16 forward's error (worst "
                        f"{us:.2e} against {hf:.2e}; {agree} of {len(PROMPTS) * STEPS} greedy tokens as float32's)")


def write_fp8_checkpoint(model, hf_dir, fp8_dir):
    """hf_dir's checkpoint with every attention, expert and dense-MLP matrix in float8 e4m3 and its
    float32 scales per 128 x 128 block (weight_scale_inv), as DeepSeek-V3 ships; the model's weights
    set to their dequantized values (the reference)."""
    shutil.copytree(hf_dir, fp8_dir)
    index_path = os.path.join(fp8_dir, "model.safetensors.index.json")
    index = json.load(open(index_path))
    wm = index["weight_map"]
    deq = {}
    for f in sorted(set(wm.values())):
        path = os.path.join(fp8_dir, f)
        tensors = load_file(path)
        for name in list(tensors):
            if tensors[name].dim() == 2 and (name.endswith("proj.weight") or name.endswith("proj_with_mqa.weight")):
                q, sc = quantize_fp8(tensors[name].float().numpy())
                tensors[name] = torch.from_numpy(np.asarray(q, np.uint8).copy()).view(torch.float8_e4m3fn)
                tensors[name + "_scale_inv"] = torch.from_numpy(sc)
                wm[name + "_scale_inv"] = f
                deq[name] = torch.from_numpy(dequant_fp8(q, sc).astype(np.float32))
        save_file(tensors, path, metadata={"format": "pt"})
    json.dump(index, open(index_path, "w"))
    cfg = json.load(open(os.path.join(fp8_dir, "config.json")))
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    json.dump(cfg, open(os.path.join(fp8_dir, "config.json"), "w"))
    # The model as transformers holds it (its experts fused): load the dequantized checkpoint.
    state = {**load_all(hf_dir), **deq}
    ref_dir = fp8_dir + "-dequantized"
    os.makedirs(ref_dir)
    shutil.copy(os.path.join(hf_dir, "config.json"), ref_dir)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(ref_dir, "model.safetensors"), metadata={"format": "pt"})
    return type(model).from_pretrained(ref_dir, attn_implementation="eager").eval()


def load_all(d):
    out = {}
    for f in os.listdir(d):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


def mxfp4_experts(model, seed):
    """Random MXFP4 blocks and scales for every expert matrix; the model's weights set to their dequantized values."""
    g = torch.Generator().manual_seed(seed)
    packed = {}
    with torch.no_grad():
        for l, layer in enumerate(model.model.layers):
            ex = layer.mlp.experts
            E, d, two_ff = ex.gate_up_proj.shape
            ff = two_ff // 2
            for which, rows, cols in (("gate_up_proj", two_ff, d), ("down_proj", d, ff)):
                blocks = torch.randint(0, 256, (E, rows, cols // 32, 16), dtype=torch.uint8, generator=g)
                # 2^(s-127) with s near 127 - log2(sqrt(cols)) / ... : values O(1/sqrt(cols)) after scaling
                base = 127 - int(np.round(np.log2(np.sqrt(cols)))) - 2
                scales = (base + torch.randint(-1, 2, (E, rows, cols // 32), generator=g)).to(torch.uint8)
                w = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # [E, cols, rows]
                getattr(ex, which).copy_(w)
                packed[f"model.layers.{l}.mlp.experts.{which}_blocks"] = blocks
                packed[f"model.layers.{l}.mlp.experts.{which}_scales"] = scales
    return packed


def write_mxfp4_checkpoint(hf_dir, mx_dir, packed):
    """hf_dir's checkpoint with the fused expert matrices replaced by their MXFP4 blocks and scales."""
    shutil.copytree(hf_dir, mx_dir)
    index_path = os.path.join(mx_dir, "model.safetensors.index.json")
    index = json.load(open(index_path))
    wm = index["weight_map"]
    for f in sorted(set(wm.values())):
        path = os.path.join(mx_dir, f)
        tensors = load_file(path)
        for name in list(tensors):
            if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                del tensors[name]
                del wm[name]
                for suffix in ("_blocks", "_scales"):
                    tensors[name + suffix] = packed[name + suffix].contiguous()
                    wm[name + suffix] = f
        save_file(tensors, path, metadata={"format": "pt"})
    json.dump(index, open(index_path, "w"))


class Checks:
    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            self.failures.append(what)


def records_by_id(path):
    """Lines of a results or logits file, grouped by request id in file order (several routers write
    their requests to PATH, PATH.1, ...)."""
    recs = {}
    for p in [path] + [f"{path}.{i}" for i in range(1, 8)]:
        if os.path.exists(p):
            for line in open(p):
                recs.setdefault(json.loads(line)["id"], []).append(line)
    return recs


def same_bytes_elsewhere(check, moerun, work, tag, model_dir, reqs, out, logits):
    """The distributed runtime, the expert cache and the prefix cache give the single process's bytes."""
    r = run([moerun, "inspect", "--model", model_dir])
    line = next(l for l in r.stdout.splitlines() if l.startswith("bytes per expert"))
    packed = int(line.split("as stored,")[1].split()[0])
    experts = int(next(l for l in r.stdout.splitlines() if l.strip().startswith("experts ")).split("(")[1].split()[0])
    variants = {
        "np3 flat": ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "3", moerun, "infer", "--micro-batches", "1"],
        "np3 hier": ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "3", moerun, "infer", "--micro-batches", "1", "--a2a", "hier"],
        "np4 2 routers": ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4", moerun, "infer", "--micro-batches", "1",
                          "--ranks-per-node", "4", "--routers-per-node", "2"],
        "cache L1 25% + L2": [moerun, "infer", "--l1-bytes", str(experts * packed // 4), "--l2-dir", os.path.join(work, tag + "-l2")],
        "prefix cache": [moerun, "infer", "--prefix-cache-mb", "8", "--prefix-cache-block", "4"],
    }
    for name, cmd in variants.items():
        o, lg = out + "." + name.replace(" ", "_"), logits + "." + name.replace(" ", "_")
        r = run(cmd + ["--model", model_dir, "--input", reqs, "--output", o, "--logits-out", lg, "--quiet"], env=MPI_ENV)
        same = r.returncode == 0 and records_by_id(out) == records_by_id(o)
        if "prefix" in name:  # the prefix cache may batch differently; its tokens must still be equal
            what = "tokens"
        elif "routers" in name and ("dense" in tag or "deepseek" in tag):
            # Each router runs a dense layer's MLP over its own requests' rows: oneDNN's GEMM at another
            # row count rounds differently (docs/NOTES.md), so equal tokens and logits to float rounding.
            worst = max_relative_error(logits, lg) if same else float("inf")
            same, what = same and worst <= 1e-5, f"tokens, logits within 1e-5 ({worst:.1e})"
        else:
            same, what = same and records_by_id(logits) == records_by_id(lg), "tokens and logits, bit for bit"
        check(same, f"{tag}: {name} gives the same {what} {r.stderr.strip()[-200:]}")


def max_relative_error(ref_path, path):
    ref, got = records_by_id(ref_path), records_by_id(path)
    worst = 0.0
    for k, lines in ref.items():
        for a, b in zip(got.get(k, []), lines):
            worst = max(worst, relative_error(np.array(json.loads(a)["logits"]), np.array(json.loads(b)["logits"])))
    return worst if ref.keys() == got.keys() else float("inf")


def bad_cases(check, moerun, work, src_dir, mx_dir):
    def bad_case(name, src, edit, pattern):
        ok, err, rc = convert_refused(moerun, src, os.path.join(work, "bad-" + name.replace(" ", "_")), edit, pattern)
        check(ok, f"bad checkpoint, {name}: exit {rc}: {err}")

    def drop_tensor(tensor):
        def edit(d):
            index_path = os.path.join(d, "model.safetensors.index.json")
            index = json.load(open(index_path))
            f = index["weight_map"].pop(tensor)
            tensors = load_file(os.path.join(d, f))
            del tensors[tensor]
            save_file(tensors, os.path.join(d, f), metadata={"format": "pt"})
            json.dump(index, open(index_path, "w"))
            return tensor
        return edit

    def config_edit(field, value, named):
        def edit(d):
            c = json.load(open(os.path.join(d, "config.json")))
            c[field] = value(c) if callable(value) else value
            json.dump(c, open(os.path.join(d, "config.json"), "w"))
            return named
        return edit

    def fewer_blocks(d):
        index = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
        name = "model.layers.1.mlp.experts.down_proj_blocks"
        path = os.path.join(d, index[name])
        tensors = load_file(path)
        tensors[name] = tensors[name][:, :, :-1, :].contiguous()  # one block of 32 short per row
        save_file(tensors, path, metadata={"format": "pt"})
        return name

    bad_case("a missing sink", src_dir, drop_tensor("model.layers.2.self_attn.sinks"), "the checkpoint has no tensor")
    bad_case("a wrong MXFP4 block count", mx_dir, fewer_blocks, "config.json says")
    bad_case("a layer_types entry of neither kind", src_dir,
             config_edit("layer_types", lambda c: c["layer_types"][:1] + ["chunked_attention"] + c["layer_types"][2:], "layer_types[1]"),
             "expected sliding_attention or full_attention")
    bad_case("rope_scaling of an unknown type", src_dir,
             config_edit("rope_parameters", {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 2.0}, "longrope"),
             "is not supported")


def main():
    moerun, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check = Checks()
    print(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    gpt_dirs = None
    only = sys.argv[3].split(",") if len(sys.argv) > 3 and sys.argv[3] else None  # a subset of the families
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 11  # another random model of each family
    for fam, (cls, cfg) in families().items():
        if only and fam not in only:
            continue
        if cls is None:
            check(False, f"{fam}: {cfg}")
            continue
        model = make_model(cls, cfg, seed=seed)
        packed = mxfp4_experts(model, seed=5) if fam == "gpt_oss" else None
        hf_dir, out_dir = os.path.join(work, fam + "-hf"), os.path.join(work, fam + "-moe")
        model.save_pretrained(hf_dir, max_shard_size="100KB")
        shards = [f for f in os.listdir(hf_dir) if f.endswith(".safetensors")]
        r = run([moerun, "convert", "--from-hf", hf_dir, "--out", out_dir, "--shards", "3"])
        check(r.returncode == 0, f"{fam}: convert {len(shards)} safetensors shards (exit {r.returncode}) {r.stderr.strip()[-300:]}")
        if r.returncode:
            continue
        total = inspect_total(moerun, out_dir)
        hf_total = sum(p.numel() for p in model.parameters())
        check(total == hf_total, f"{fam}: inspect counts {total} parameters, transformers {hf_total}")
        reference = [hf_greedy(model, p, STEPS) for p in PROMPTS]
        got = infer_against(check, moerun, work, fam, out_dir, PROMPTS, STEPS, reference, REL_TOL)
        if got:
            against_float64(check, fam, read_logits(got[2]), model, reference)
            same_bytes_elsewhere(check, moerun, work, fam, out_dir, *got)
        if fam in ("qwen3_next", "qwen3_5_moe"):
            no_shared_expert(check, moerun, work, fam, cls, cfg, seed)
            bf16_checkpoint(check, moerun, work, fam, cls, cfg, seed)
        if packed is not None:
            mx_dir, mx_out = os.path.join(work, fam + "-mxfp4-hf"), os.path.join(work, fam + "-mxfp4-moe")
            write_mxfp4_checkpoint(hf_dir, mx_dir, packed)
            r = run([moerun, "convert", "--from-hf", mx_dir, "--out", mx_out, "--shards", "2"])
            check(r.returncode == 0 and "kept as shipped, MXFP4" in r.stderr,
                  f"{fam}: convert the MXFP4 checkpoint, experts kept in MXFP4 (exit {r.returncode}) {r.stderr.strip()[-300:]}")
            if r.returncode == 0:
                head = run([moerun, "inspect", "--model", mx_out]).stdout.splitlines()[0]
                check("experts mxfp4" in head, f"{fam}: {head}")
                got = infer_against(check, moerun, work, fam + "-mxfp4", mx_out, PROMPTS, STEPS, reference, REL_TOL)
                if got:
                    same_bytes_elsewhere(check, moerun, work, fam + "-mxfp4", mx_out, *got)
            dq_out = os.path.join(work, fam + "-mxfp4-dequantized-moe")
            r = run([moerun, "convert", "--from-hf", mx_dir, "--out", dq_out, "--shards", "2", "--quantize", "none"])
            check(r.returncode == 0 and "MXFP4 dequantized" in r.stderr,
                  f"{fam}: convert the MXFP4 checkpoint with --quantize none (exit {r.returncode}) {r.stderr.strip()[-300:]}")
            if r.returncode == 0:
                infer_against(check, moerun, work, fam + "-mxfp4-dequantized", dq_out, PROMPTS, STEPS, reference, REL_TOL)
                # The same experts in either form: the same tokens and logits, bit for bit.
                ok = open(os.path.join(work, f"{fam}-logits.jsonl")).read() == open(os.path.join(work, f"{fam}-mxfp4-dequantized-logits.jsonl")).read()
                check(ok, f"{fam}: MXFP4 dequantized at convert and the fused float32 checkpoint give the same logits, bit for bit")
            gpt_dirs = (hf_dir, mx_dir)
        if fam == "deepseek_v3":  # the same model as an fp8 checkpoint, as DeepSeek-V3 ships it
            fp8_dir, fp8_out = os.path.join(work, fam + "-fp8-hf"), os.path.join(work, fam + "-fp8-moe")
            fp8_model = write_fp8_checkpoint(model, hf_dir, fp8_dir)
            r = run([moerun, "convert", "--from-hf", fp8_dir, "--out", fp8_out, "--shards", "2"])
            check(r.returncode == 0 and "kept as shipped, fp8" in r.stderr,
                  f"{fam}: convert the fp8 checkpoint, experts kept as fp8-block (exit {r.returncode}) {r.stderr.strip()[-300:]}")
            if r.returncode == 0:
                fp8_ref = [hf_greedy(fp8_model, p, STEPS) for p in PROMPTS]
                got = infer_against(check, moerun, work, fam + "-fp8", fp8_out, PROMPTS, STEPS, fp8_ref, REL_TOL)
                if got:
                    same_bytes_elsewhere(check, moerun, work, fam + "-fp8", fp8_out, *got)
    if gpt_dirs:
        bad_cases(check, moerun, work, *gpt_dirs)
    print(f"{len(check.failures)} failure(s)")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
