#!/usr/bin/env python3
"""examples/gpt.kl in PyTorch, from Kiln's exported weights.

The same model as the example: token and position embeddings, pre-norm
blocks (layer norm, causal multi-head attention, a GELU MLP of 4x the
width, residuals), a final layer norm and logits through the token
embedding transposed; the size (layers, heads) is read from the weights'
names and shapes. Weights come from a safetensors file `kiln export`
wrote (Kiln's names: gpt.1.block.N.dense.M.w, stored [in, out]).

    gpt_torch.py loss WEIGHTS TOKENS CONTEXT HEADS
        prints the mean cross-entropy of the window TOKENS[0 : CONTEXT + 1]
        (inputs and next-token targets) in float32, as JSON
    gpt_torch.py speed WEIGHTS TOKENS CONTEXT HEADS BATCH STEPS THREADS MODE
        trains STEPS steps (AdamW as the example's train block) on random
        windows of the token file and prints tokens/s over the steps after
        the warm-up (and the process's CPU time per step), as JSON; MODE
        eager or compile (torch.compile)
    gpt_torch.py profile WEIGHTS TOKENS CONTEXT HEADS BATCH STEPS THREADS
        the same eager steps under torch.profiler after the warm-up: a
        table of operators by self CPU time

PRECISION=bf16 in the environment runs the forward (and so the
backward's matching GEMMs) under CPU autocast to bf16, with fp32
parameters and optimizer, as Kiln's precision = bf16 keeps fp32 masters;
WARM=N sets the warm-up steps (default max(3, STEPS / 10)).

GELU=tanh in the environment selects GELU's tanh form (GPT-2's,
F.gelu(approximate="tanh"), as `gelu(x, approximate = "tanh")` in Kiln);
the exact erf form otherwise.

Used by bench/gpt_torch.sh, bench/gpt_tanh.sh and the test
gpt.torch_first_loss.
"""
import json
import math
import os
import re
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

GELU = "tanh" if os.environ.get("GELU") == "tanh" else "none"
AUTOCAST = os.environ.get("PRECISION") == "bf16"

ST_DTYPES = {"F32": np.float32}


def read_safetensors(path):
    """The safetensors layout: an 8-byte little-endian header length, a
    JSON header (name -> dtype, shape, data_offsets), then the data."""
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        arr = np.frombuffer(data, dtype=ST_DTYPES[t["dtype"]], count=(b - a) // 4, offset=8 + n + a)
        out[name] = torch.from_numpy(arr.reshape(t["shape"]).copy())
    return out


def read_tokens(path):
    """Kiln's token file (runtime/data/tokens.h): a 48-byte header, then the tokens."""
    data = open(path, "rb").read()
    assert data[:8] == b"KILNTOK\0", "not a kiln token file: %s" % path
    version, dtype, count = struct.unpack_from("<IIQ", data, 8)
    kind = {1: np.uint8, 2: np.uint16, 3: np.uint32}[dtype]
    return np.frombuffer(data, dtype=kind, count=count, offset=48)


class Gpt(torch.nn.Module):
    def __init__(self, w, heads):
        super().__init__()
        self.heads = heads
        self.p = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(v.clone()) for k, v in w.items()})
        # The blocks' name prefixes in the order they run: gpt.1.block.N.
        # (examples/gpt.kl) or gpt.1.blocks4.M.block.N. (gpt2_small.kl,
        # three calls of four blocks); a call's number counts the calls in
        # the order they run, so sorting the numbers gives the order.
        found = [re.match(r"^gpt\.1\.((?:blocks4\.\d+\.)?block\.\d+\.)norm\.1\.g$", k) for k in w]
        self.blocks = sorted((m.group(1) for m in found if m), key=lambda p: [int(n) for n in re.findall(r"\d+", p)])

    def w(self, name):
        return self.p[name.replace(".", "_")]

    def dense(self, x, name):
        return x @ self.w(name + ".w") + self.w(name + ".b")

    def norm(self, x, name):
        return F.layer_norm(x, x.shape[-1:], self.w(name + ".g"), self.w(name + ".b"), eps=1e-5)

    def block(self, x, prefix):
        b, t, c = x.shape
        d = c // self.heads
        pre = "gpt.1." + prefix
        h = self.norm(x, pre + "norm.1")

        def split(y):
            return y.reshape(b, t, self.heads, d).permute(0, 2, 1, 3)

        q, k, v = (split(self.dense(h, pre + "dense.%d" % i)) for i in (1, 2, 3))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.dense(a.permute(0, 2, 1, 3).reshape(b, t, c), pre + "dense.4")
        h = F.gelu(self.dense(self.norm(x, pre + "norm.2"), pre + "dense.5"), approximate=GELU)
        return x + self.dense(h, pre + "dense.6")

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        wte = self.w("gpt.1.wte")
        x = wte[tokens] + self.w("gpt.1.wpe")[torch.arange(t)]
        for prefix in self.blocks:
            x = self.block(x, prefix)
        logits = self.norm(x, "gpt.1.norm.1") @ wte.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def first_loss(weights, tokens, context, heads):
    net = Gpt(read_safetensors(weights), heads)
    window = torch.from_numpy(read_tokens(tokens)[: context + 1].astype(np.int64))
    with torch.no_grad():
        loss = net(window[None, :context], window[None, 1:])
    print(json.dumps({"loss": loss.item()}))


def speed(weights, tokens, context, heads, batch, steps, threads, mode, profile=False):
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # as Kiln's CPU backend does
    torch.manual_seed(0)
    net = Gpt(read_safetensors(weights), heads)
    # The example's train block: AdamW (lr 2e-3, beta2 0.99, weight decay
    # 0.1 on matrices only), clipping at norm 1; the learning rate's
    # schedule costs nothing and is left out.
    decay = [p for n, p in net.p.items() if p.dim() == 2]
    rest = [p for n, p in net.p.items() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=2e-3, betas=(0.9, 0.99), eps=1e-8)
    data = torch.from_numpy(read_tokens(tokens).astype(np.int64))
    gen = torch.Generator().manual_seed(1)

    def loss_of(x, y):
        if AUTOCAST:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return net(x, y)
        return net(x, y)

    fn = torch.compile(loss_of) if mode == "compile" else loss_of

    def step():
        starts = torch.randint(0, len(data) - context - 1, (batch,), generator=gen)
        win = torch.stack([data[s : s + context + 1] for s in starts.tolist()])
        opt.zero_grad(set_to_none=True)
        loss = fn(win[:, :-1], win[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        return loss.item()

    warm = int(os.environ.get("WARM", max(3, steps // 10)))
    t_compile = time.perf_counter()
    for _ in range(warm):
        step()
    if profile:
        # Where an eager step's time goes, by operator (self CPU time):
        # to set beside Kiln's `kiln bench` table.
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        return
    t0, c0 = time.perf_counter(), time.process_time()
    each = []
    for _ in range(steps):
        t1 = time.perf_counter()
        last = step()
        each.append(time.perf_counter() - t1)
    secs, cpu_secs = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"framework": "pytorch %s" % torch.__version__, "mode": mode, "threads": threads,
                      "cpu": torch.backends.cpu.get_cpu_capability(), "steps": steps, "warmup_steps": warm,
                      "warmup_s": t0 - t_compile, "ms_per_step": 1e3 * secs / steps,
                      "cpu_ms_per_step": 1e3 * cpu_secs / steps,
                      "median_ms_per_step": 1e3 * sorted(each)[len(each) // 2],
                      "precision": "bf16 autocast" if AUTOCAST else "fp32",
                      "tokens_per_s": steps * batch * context / secs, "last_loss": last}))


def main():
    a = sys.argv[1:]
    if a and a[0] == "loss" and len(a) == 5:
        first_loss(a[1], a[2], int(a[3]), int(a[4]))
    elif a and a[0] == "speed" and len(a) == 9 and a[8] in ("eager", "compile"):
        speed(a[1], a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6]), int(a[7]), a[8])
    elif a and a[0] == "profile" and len(a) == 8:
        speed(a[1], a[2], int(a[3]), int(a[4]), int(a[5]), int(a[6]), int(a[7]), "eager", profile=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
