#!/usr/bin/env python3
"""Trains examples/mlp.kl or examples/fashion_cnn.kl in PyTorch on the CPU,
from a Kiln checkpoint of the initial weights, with the same batch,
optimizer (AdamW), learning-rate schedule (warmup + cosine) and thread
count, and prints the training throughput.

Used by bench/vs_pytorch.sh, which runs Kiln in the same invocation.

    torch_compare.py MODEL CHECKPOINT DATA_DIR STEPS THREADS [--json FILE] [--compile]
"""
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from idx_data import find, read_idx  # noqa: E402
import torch.nn.functional as F

DTYPES = {6: np.float32, 7: np.float64}  # ir_dtype numbering in ir/ir.h


def read_checkpoint(path):
    """Kiln's checkpoint format (runtime/ckpt/checkpoint.c)."""
    data = open(path, "rb").read()
    assert data[:8] == b"KILNCKPT", "not a kiln checkpoint"
    version, count = struct.unpack_from("<II", data, 8)
    off, out = 16, {}

    def string():
        nonlocal off
        (n,) = struct.unpack_from("<I", data, off)
        off += 4 + n
        return data[off - n : off].decode()

    # version 3: model, precision and kiln version; 5: the --config text
    for _ in range((3 if version >= 3 else 0) + (1 if version >= 5 else 0)):
        string()
    for _ in range(count):
        name = string()
        if version >= 3:
            string()  # the value's role
        dt, rank = struct.unpack_from("<II", data, off)
        off += 8
        dims = struct.unpack_from("<%dq" % rank, data, off)
        off += 8 * rank
        (nbytes,) = struct.unpack_from("<Q", data, off)
        off += 8
        arr = np.frombuffer(data, dtype=DTYPES[dt], count=int(np.prod(dims)) if rank else 1, offset=off)
        out[name] = torch.from_numpy(arr.reshape(dims).copy())
        off += nbytes
    return out


class Mlp(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        # Kiln stores a dense weight as [in, out] (x @ w); Linear wants [out, in].
        self.layers = torch.nn.ModuleList()
        for i in (1, 2, 3):
            lin = torch.nn.Linear(*w["dense.%d.w" % i].shape)
            lin.weight.data = w["dense.%d.w" % i].t().contiguous()
            lin.bias.data = w["dense.%d.b" % i].clone()
            self.layers.append(lin)

    def forward(self, image):
        x = (image.reshape(image.shape[0], -1).float() / 255 - 0.2860) / 0.3530
        x = F.relu(self.layers[0](x))
        x = F.relu(self.layers[1](x))
        return self.layers[2](x)


class Cnn(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.convs, self.bns = torch.nn.ModuleList(), torch.nn.ModuleList()
        for i in (1, 2):
            k = w["conv_bn_relu.%d.k" % i]
            conv = torch.nn.Conv2d(k.shape[1], k.shape[0], 3, padding=1, bias=False)
            conv.weight.data = k.clone()
            bn = torch.nn.BatchNorm2d(k.shape[0], eps=1e-5, momentum=0.1)
            p = "conv_bn_relu.%d.batchnorm.1." % i
            bn.weight.data = w[p + "gamma"].clone()
            bn.bias.data = w[p + "beta"].clone()
            bn.running_mean.data = w[p + "running_mean"].clone()
            bn.running_var.data = w[p + "running_var"].clone()
            self.convs.append(conv)
            self.bns.append(bn)
        self.dense = torch.nn.ModuleList()
        for i in (1, 2):
            lin = torch.nn.Linear(*w["dense.%d.w" % i].shape)
            lin.weight.data = w["dense.%d.w" % i].t().contiguous()
            lin.bias.data = w["dense.%d.b" % i].clone()
            self.dense.append(lin)

    def forward(self, image):
        x = (image.float() / 255 - 0.2860) / 0.3530
        for conv, bn in zip(self.convs, self.bns):
            x = F.max_pool2d(F.relu(bn(conv(x))), 2)
        x = F.relu(self.dense[0](x.flatten(1)))
        return self.dense[1](x)


def main():
    model, ckpt, data_dir, steps, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    rest = sys.argv[6:]
    json_out = rest[rest.index("--json") + 1] if "--json" in rest else None
    compiled = "--compile" in rest
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # as Kiln's CPU backend does
    torch.manual_seed(0)
    w = read_checkpoint(ckpt)
    net = Mlp(w) if model == "mlp" else Cnn(w)
    # torch.compile: the model's forward and backward (the optimizer step stays eager).
    fwd = torch.compile(net) if compiled else net
    images = torch.from_numpy(read_idx(find(data_dir, "train-images-idx3-ubyte")).copy()).unsqueeze(1)
    labels = torch.from_numpy(read_idx(find(data_dir, "train-labels-idx1-ubyte")).astype(np.int64))
    batch, warmup, lr = 128, 200, 1e-3
    opt = torch.optim.AdamW(net.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4)
    # warmup_cosine over the whole run, as kl_schedule_lr does (t is 1-based).
    total = steps

    def lr_at(t):
        if t <= warmup:
            return t / warmup
        p = (t - warmup - 1) / max(1, total - warmup - 1)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, p)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_at(i + 1))
    net.train()
    order = torch.randperm(images.shape[0])
    per_epoch = images.shape[0] // batch
    losses = []

    def step(i):
        idx = order[(i % per_epoch) * batch : (i % per_epoch + 1) * batch]
        opt.zero_grad(set_to_none=True)
        logits = fwd(images[idx])
        loss = F.cross_entropy(logits, labels[idx])
        loss.backward()
        opt.step()
        sched.step()
        return loss.item()

    warm = min(10, steps // 10)
    for i in range(warm):
        losses.append(step(i))
    t0 = time.perf_counter()
    for i in range(warm, steps):
        losses.append(step(i))
    secs = time.perf_counter() - t0
    sps = (steps - warm) * batch / secs
    result = {"framework": "pytorch %s%s" % (torch.__version__, " torch.compile" if compiled else " eager"), "model": model, "threads": threads, "steps": steps,
              "timed_steps": steps - warm, "seconds": secs, "samples_per_s": sps, "ms_per_step": 1e3 * secs / (steps - warm),
              "first_loss": losses[0], "last_loss": sum(losses[-20:]) / len(losses[-20:])}
    print(json.dumps(result))
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
