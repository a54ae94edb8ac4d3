#!/usr/bin/env python3
"""A scalar plain-Qwen3 forward pass in pure Python (no torch, no numpy), for a cross-check.

Not transformers: written from a reading of transformers' Qwen3 modelling code, in fp64 from the
checkpoint's bf16 weights, one token at a time with a KV cache (plain RMSNorm, q/k norm per head,
whole-head NeoX RoPE, GQA softmax attention, no output gate, SwiGLU, tied or untied LM head).
It checks our implementation against that reading where transformers cannot run; the reference
that counts is tools/reference/qwen3_hybrid_reference.py.

Usage: qwen3_scalar_check.py MODEL_DIR PROMPT_IDS.json GREEDY_TOKENS
Prints {"argmax": [...], "greedy": [...], "last_logits_top5": [[logit, id]...]}, to compare with
  cairn-run --model MODEL_DIR --prompt-ids PROMPT_IDS.json --greedy N --logits-at P --top 5 --json
Only small models (the qwen3 preset runs 40 tokens in about two seconds).
"""
import json
import math
import struct
import sys

d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); base = 8 + n
def T(name):
    h = hdr[name]; a, b = h["data_offsets"]; assert h["dtype"] == "BF16"
    vals = struct.unpack("<%dH" % ((b - a) // 2), raw[base + a:base + b])
    f = [struct.unpack("<f", struct.pack("<I", v << 16))[0] for v in vals]
    shp = h["shape"]
    if len(shp) == 1: return f
    c = shp[-1]; return [f[i * c:(i + 1) * c] for i in range(len(f) // c)]
H, KV, D, L = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["num_hidden_layers"]
eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
E = T("model.embed_tokens.weight"); normf = T("model.norm.weight")
lm = E if cfg["tie_word_embeddings"] else T("lm_head.weight")
P = "model.layers.%d."
W = [{k: T(P % i + k) for k in ["input_layernorm.weight", "post_attention_layernorm.weight",
      "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
      "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
      "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]} for i in range(L)]
def mv(M, x): return [sum(a * b for a, b in zip(r, x)) for r in M]
def rms(x, w):
    s = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps); return [w[i] * x[i] * s for i in range(len(x))]
inv = [1.0 / theta ** (2 * i / D) for i in range(D // 2)]
def rope(x, pos):
    h = D // 2; out = list(x)
    for i in range(h):
        c, s = math.cos(pos * inv[i]), math.sin(pos * inv[i])
        out[i] = x[i] * c - x[i + h] * s; out[i + h] = x[i + h] * c + x[i] * s
    return out
cache = [([], []) for _ in range(L)]
def step(tok, pos):
    h = list(E[tok])
    for l in range(L):
        w = W[l]; x = rms(h, w["input_layernorm.weight"])
        q = mv(w["self_attn.q_proj.weight"], x); k = mv(w["self_attn.k_proj.weight"], x); v = mv(w["self_attn.v_proj.weight"], x)
        qs = [rope(rms(q[j*D:(j+1)*D], w["self_attn.q_norm.weight"]), pos) for j in range(H)]
        ks = [rope(rms(k[j*D:(j+1)*D], w["self_attn.k_norm.weight"]), pos) for j in range(KV)]
        vs = [v[j*D:(j+1)*D] for j in range(KV)]
        cache[l][0].append(ks); cache[l][1].append(vs)
        o = []
        for j in range(H):
            g = j // (H // KV)
            sc = [sum(a * b for a, b in zip(qs[j], kk[g])) / math.sqrt(D) for kk in cache[l][0]]
            m = max(sc); e = [math.exp(s - m) for s in sc]; z = sum(e)
            o += [sum(e[t] * cache[l][1][t][g][i] for t in range(len(e))) / z for i in range(D)]
        a = mv(w["self_attn.o_proj.weight"], o); h = [h[i] + a[i] for i in range(len(h))]
        x = rms(h, w["post_attention_layernorm.weight"])
        gt = mv(w["mlp.gate_proj.weight"], x); up = mv(w["mlp.up_proj.weight"], x)
        act = [gg / (1 + math.exp(-gg)) * u for gg, u in zip(gt, up)]
        m2 = mv(w["mlp.down_proj.weight"], act); h = [h[i] + m2[i] for i in range(len(h))]
    return mv(lm, rms(h, normf))
prompt = json.load(open(sys.argv[2])); greedy = int(sys.argv[3])
out = {"argmax": [], "greedy": []}
for p, t in enumerate(prompt):
    lg = step(t, p); out["argmax"].append(max(range(len(lg)), key=lg.__getitem__))
out["last_logits_top5"] = sorted(((v, i) for i, v in enumerate(lg)), reverse=True)[:5]
pos = len(prompt)
for _ in range(greedy):
    t = max(range(len(lg)), key=lg.__getitem__); out["greedy"].append(t); lg = step(t, pos); pos += 1
print(json.dumps(out))
