#!/usr/bin/env python3
"""The examples in PyTorch on the GPU, eager or torch.compile, from a Kiln
checkpoint of the initial weights, with Kiln's batch, optimizer (AdamW),
schedule and data order rules; prints the training throughput as JSON.
The models are bench/torch_compare.py's.

    torch_gpu.py MODEL CHECKPOINT DATA STEPS eager|compile [--json FILE]

DATA is a folder of Fashion-MNIST IDX files, or synthetic:N (random
images and labels). The data set lives on the GPU; each step reads its
loss (.item()), as Kiln's training loop does.
"""
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_compare import Cnn, Mlp, find, read_checkpoint, read_idx  # noqa: E402


def load_data(data):
    if data.startswith("synthetic:"):
        n = int(data.split(":")[1])
        rng = np.random.default_rng(1)
        return rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, n).astype(np.int64)
    images = read_idx(find(data, "train-images-idx3-ubyte"))
    labels = read_idx(find(data, "train-labels-idx1-ubyte")).astype(np.int64)
    return images.reshape(-1, 1, 28, 28), labels


def main():
    model, ckpt, data, steps, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    json_out = sys.argv[7] if len(sys.argv) > 7 and sys.argv[6] == "--json" else None
    dev = torch.device("cuda")
    torch.manual_seed(0)
    w = read_checkpoint(ckpt)
    net = (Mlp(w) if model == "mlp" else Cnn(w)).to(dev)
    imgs, labs = load_data(data)
    images = torch.from_numpy(imgs.copy()).to(dev)
    labels = torch.from_numpy(labs).to(dev)
    batch, warmup, lr = 128, 200, 1e-3
    opt = torch.optim.AdamW(net.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4)

    def lr_at(t):
        if t <= warmup:
            return t / warmup
        p = (t - warmup - 1) / max(1, steps - warmup - 1)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, p)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_at(i + 1))
    net.train()
    fwd = torch.compile(net) if mode == "compile" else net
    order = torch.randperm(images.shape[0], device=dev)
    per_epoch = images.shape[0] // batch

    def step(i):
        idx = order[(i % per_epoch) * batch : (i % per_epoch + 1) * batch]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(images[idx]), labels[idx])
        loss.backward()
        opt.step()
        sched.step()
        return loss.item()

    warm = 20 if mode == "compile" else 10
    t0 = time.perf_counter()
    for i in range(warm):
        step(i)
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    losses = [step(i) for i in range(warm, steps)]
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    timed = steps - warm
    result = {"framework": "pytorch %s %s" % (torch.__version__, mode), "model": model, "device": torch.cuda.get_device_name(),
              "steps": steps, "timed_steps": timed, "seconds": secs, "warmup_seconds": warm_s,
              "samples_per_s": timed * batch / secs, "ms_per_step": 1e3 * secs / timed, "last_loss": losses[-1]}
    print(json.dumps(result))
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
