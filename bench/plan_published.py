#!/usr/bin/env python3
"""kiln plan against published training throughput (docs/guides/plan.md,
"Published runs"): for each row of the table below, a Kiln model file of
the same architecture (a GPT of the row's width, layers and heads,
vocabulary 50,368, learned positions, no biases in the matmuls: the MPT
models of llm-foundry; the file's param count is printed beside the
row's NumParams), one `kiln plan --json` of the row's layout (8 GPUs,
shard zero3 for FSDP's FULL_SHARD, bf16, the row's micro-batch and
accumulation, no recomputation asked for), and the predicted tokens/s
against the published one. The GPU efficiencies are kiln plan's defaults
(tools/cluster.c), not fitted to these rows.

Source of the rows: mosaicml/llm-foundry, scripts/train/benchmarking/
README.md ("MPT Training Benchmarks"), tables "A100 80GB with 1600 Gbps
node-node interconnect (RoCE)" and "H100 80GB BF16": rows on 8 GPUs
without activation checkpointing, at sequence lengths 512 to 2048
(Throughput (T/s) column). A row whose Kiln plan does not fit in 80 GB
is shown dropped, with the prediction it would have with the memory
raised beside it (not counted).

Also the per-GPU memory of each chosen layout's params, gradients and
optimizer state against ZeRO's formula for its stage (zero3:
(2 + 2 + K) Psi / N, K = 12), from the plan's zero_memory.

    python3 bench/plan_published.py [KILN] [OUT]
"""
import json
import os
import re
import subprocess
import sys

# name, width, layers, heads, context, cluster, micro, accumulate, global
# batch, published tokens/s, published NumParams
ROWS = [
    ("125m", 768, 12, 12, 2048, "a100x8", 32, 2, 512, 1133901, 125311488),
    ("125m", 768, 12, 12, 1024, "a100x8", 64, 2, 1024, 1251751, 124525056),
    ("125m", 768, 12, 12, 512, "a100x8", 128, 2, 2048, 1325455, 124131840),
    ("350m", 1024, 24, 16, 2048, "a100x8", 32, 2, 512, 470263, 355985408),
    ("760m", 1536, 24, 12, 2048, "a100x8", 24, 2, 384, 259472, 760470528),
    ("1b", 2048, 24, 16, 2048, "a100x8", 14, 4, 448, 164109, 1315950592),
    ("1b", 2048, 24, 16, 1024, "a100x8", 18, 4, 576, 176898, 1313853440),
    ("1b", 2048, 24, 16, 512, "a100x8", 56, 4, 1792, 185186, 1312804864),
    ("3b", 2560, 32, 20, 2048, "a100x8", 10, 2, 160, 86491, 2651837440),
    ("7b", 4096, 32, 32, 2048, "a100x8", 6, 2, 96, 37130, 6658859008),
    ("760m", 1536, 24, 12, 2048, "h100x8", 24, 2, 384, 505177, 760470528),
    ("1b", 2048, 24, 16, 2048, "h100x8", 14, 1, 112, 363645, 1315950592),
    ("1b", 2048, 24, 16, 1024, "h100x8", 18, 4, 576, 391287, 1313853440),
    ("1b", 2048, 24, 16, 512, "h100x8", 56, 4, 1792, 418201, 1312804864),
    ("7b", 4096, 32, 32, 2048, "h100x8", 6, 1, 48, 85144, 6658859008),
]
VOCAB = 50368

MODEL = """# A GPT of {name}'s size (bench/plan_published.py): width {width}, {layers} layers,
# {heads} heads, vocabulary {vocab}, context {context}, learned positions, no
# biases in the matmuls, tied embeddings.
def dense(x: f32[..., k], units) {{
  param w : [k, units] init = normal(0, 0.02)
  return x @ w
}}

def norm(x: f32[..., c]) {{
  param g : [c] init = ones, decay = 0
  param b : [c] init = zeros, decay = 0
  return layernorm(x, g, b)
}}

def split_heads(x: f32[b, t, c], heads, d) {{
  return permute(reshape(x, [b, t, heads, d]), [0, 2, 1, 3])
}}

def block(x: f32[b, t, c], heads, d) {{
  h = norm(x)
  q = split_heads(dense(h, c), heads, d)
  k = split_heads(dense(h, c), heads, d)
  v = split_heads(dense(h, c), heads, d)
  a = reshape(permute(attention(q, k, v), [0, 2, 1, 3]), [b, t, c])
  x = x + dense(a, c)
  return x + dense(gelu(dense(norm(x), 4 * c)), c)
}}

def gpt(tokens: i32[b, t], vocab, width, heads) {{
  param wte : [vocab, width] init = normal(0, 0.02)
  param wpe : [t, width] init = normal(0, 0.01)
  x = embedding(tokens, wte) + embedding(arange(t, dtype = i32), wpe)
  d = width / heads
  x = {blocks}
  return norm(x) @ transpose(wte)
}}

model gpt_{name} {{
  input tokens : i32[batch, {context}]
  input targets : i32[batch, {context}]
  loss = cross_entropy(gpt(tokens, vocab = {vocab}, width = {width}, heads = {heads}), targets)
}}

train {{
  data       = tokens("data/train.tok", context = {context})
  batch      = 8
  optimizer  = adamw(lr = 6e-4, beta2 = 0.95, weight_decay = 0.1)
  precision  = bf16
}}
"""


def main():
    kiln = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "build/kiln")
    out = os.path.realpath(sys.argv[2] if len(sys.argv) > 2 else "/tmp/kiln-plan-published")
    os.makedirs(out, exist_ok=True)
    rows = []
    for name, width, layers, heads, context, cluster, micro, acc, gb, tps, nparams in ROWS:
        blocks = "x"
        for _ in range(layers):
            blocks = f"block({blocks}, heads, d)"
        path = os.path.join(out, f"gpt_{name}_{context}.kl")
        with open(path, "w") as f:
            f.write(MODEL.format(name=name, width=width, layers=layers, heads=heads, vocab=VOCAB, context=context,
                                 blocks=blocks))
        cmd = [kiln, "plan", path, "--cluster", cluster, "--global-batch", str(gb), "--micro", str(micro),
               "--shard", "zero3", "--precision", "bf16", "--tensor-parallel", "1", "--pipeline", "1", "--json"]

        def plan(extra):
            p = subprocess.run(cmd + extra, capture_output=True, text=True)
            try:
                d = json.loads(p.stdout)
            except json.JSONDecodeError:
                print(f"{name} on {cluster}: kiln plan failed: {p.stderr.strip()}", file=sys.stderr)
                return None
            lay = [l for l in d["layouts"] if l["micro"] == micro and l["accumulate"] == acc]
            return lay[0] if lay else None

        l = plan([])
        if not l:
            continue
        # A layout whose plan does not fit the GPU: its prediction with the
        # memory raised, shown apart (not a layout kiln plan would print).
        big = plan(["--memory", "1TB"]) if not l.get("fits") else None
        zm = l.get("zero_memory", "")
        m = re.search(r"Psi = (\d+) params", zm)
        psi = int(m.group(1)) if m else 0
        m = re.search(r"total ([0-9.]+) MB", zm)
        held = float(m.group(1)) * 1e6 if m else 0
        formula = 16 * psi / 8  # ZeRO-3 on N = 8: (2 + 2 + 12) Psi / N
        rows.append(dict(name=name, context=context, cluster=cluster, micro=micro, acc=acc, gb=gb, tps=tps,
                         nparams=nparams, psi=psi, big=big["tokens_s"] if big and big.get("fits") else 0,
                         fits=l.get("fits", False), why=l.get("why", ""), pred=l.get("tokens_s", 0),
                         step=l.get("step_s", 0), mfu=l.get("mfu", 0), bound=l.get("bound", ""),
                         mem=l.get("memory", 0), rec=l.get("recompute", False), held=held, formula=formula))
    print("| model | context | GPUs | layout | params: Kiln / published | published tokens/s | predicted tokens/s | "
          "predicted / published | predicted step s, MFU, bound | memory a GPU: the plan; params + grads + state "
          "against ZeRO-3's 16 Psi / N |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    within = fit = 0
    for r in rows:
        head = (f"| MPT-{r['name']} | {r['context']} | 8 x {r['cluster'][:4].upper()} | zero3 bf16 {r['micro']} x "
                f"{r['acc']}{' recompute' if r['rec'] else ''} | {r['psi']:,} / {r['nparams']:,} | {r['tps']:,} |")
        if not r["fits"]:
            mb = re.search(r"needs ([0-9.]+) MB", r["why"])
            need = f"{float(mb.group(1)) / 1e3:.1f} GB" if mb else r["why"]
            print(f"{head} - (as if it fit: {r['big']:,.0f}, {r['big'] / r['tps']:.2f}) | - | dropped: the plan "
                  f"needs {need} a GPU (recompute = auto too), over 80 GB | - |")
            continue
        fit += 1
        ratio = r["pred"] / r["tps"]
        within += abs(ratio - 1) <= 0.25
        print(f"{head} {r['pred']:,.0f} | {ratio:.2f} | {r['step']:.3f}, {100 * r['mfu']:.1f}%, {r['bound']} | "
              f"{r['mem'] / 1e9:.1f} GB; {r['held'] / 1e9:.2f} / {r['formula'] / 1e9:.2f} GB = "
              f"{r['held'] / r['formula'] if r['formula'] else 0:.3f} |")
    print()
    print(f"{len(rows)} rows, {fit} whose plan fits the GPU: predicted within 25% of the published tokens/s for "
          f"{within} of {fit}")


if __name__ == "__main__":
    main()
