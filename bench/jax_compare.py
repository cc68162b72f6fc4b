#!/usr/bin/env python3
"""Trains examples/mlp.kl or examples/fashion_cnn.kl in JAX on the CPU
(one jitted step: forward, backward and AdamW), from a Kiln checkpoint of
the initial weights, with the same batch, optimizer, learning-rate
schedule and thread count as bench/torch_compare.py, and prints the
training throughput as one JSON line.

Used by bench/frameworks.sh, which runs Kiln, PyTorch and JAX alternated.

    jax_compare.py MODEL CHECKPOINT DATA_DIR STEPS THREADS [--json FILE]
"""
import json
import math
import os
import sys
import time

THREADS = int(sys.argv[5]) if len(sys.argv) > 5 else 1
# XLA's CPU client reads its thread count from these before it starts.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=%s intra_op_parallelism_threads=%d"
                           % ("true" if THREADS > 1 else "false", THREADS)).strip()
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from idx_data import find, read_idx  # noqa: E402


def read_weights(path):
    """The checkpoint's f32 values as NumPy arrays (runtime/ckpt/checkpoint.c, format 3 and later)."""
    import struct

    data = open(path, "rb").read()
    assert data[:8] == b"KILNCKPT", "not a kiln checkpoint"
    version, count = struct.unpack_from("<II", data, 8)
    assert version >= 3, "bench/jax_compare.py reads checkpoints of format 3 and later"
    off, out = 16, {}

    def string():
        nonlocal off
        (n,) = struct.unpack_from("<I", data, off)
        off += 4 + n
        return data[off - n : off].decode()

    for _ in range(3 + (1 if version >= 5 else 0)):
        string()
    for _ in range(count):
        name = string()
        string()  # role
        dt, rank = struct.unpack_from("<II", data, off)
        off += 8
        dims = struct.unpack_from("<%dq" % rank, data, off)
        off += 8 * rank
        (nbytes,) = struct.unpack_from("<Q", data, off)
        off += 8
        if dt == 6:  # f32
            out[name] = np.frombuffer(data, np.float32, int(np.prod(dims)) if rank else 1, off).reshape(dims).copy()
        off += nbytes
    return out


def mlp_params(w):
    return [(jnp.asarray(w["dense.%d.w" % i]), jnp.asarray(w["dense.%d.b" % i])) for i in (1, 2, 3)]


def mlp_forward(params, image):
    x = (image.reshape(image.shape[0], -1).astype(jnp.float32) / 255 - 0.2860) / 0.3530
    for i, (wt, b) in enumerate(params):
        x = x @ wt + b
        if i < 2:
            x = jax.nn.relu(x)
    return x


def cnn_params(w):
    p = {}
    for i in (1, 2):
        bn = "conv_bn_relu.%d.batchnorm.1." % i
        p["conv%d" % i] = (jnp.asarray(w["conv_bn_relu.%d.k" % i]), jnp.asarray(w[bn + "gamma"]), jnp.asarray(w[bn + "beta"]))
        p["dense%d" % i] = (jnp.asarray(w["dense.%d.w" % i]), jnp.asarray(w["dense.%d.b" % i]))
    return p


def cnn_forward(params, image):
    x = (image.astype(jnp.float32) / 255 - 0.2860) / 0.3530
    for i in (1, 2):
        k, gamma, beta = params["conv%d" % i]
        x = jax.lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW"))
        mean = x.mean(axis=(0, 2, 3), keepdims=True)
        var = ((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
        x = (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma[None, :, None, None] + beta[None, :, None, None]
        x = jax.nn.relu(x)
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    x = x.reshape(x.shape[0], -1)
    wt, b = params["dense1"]
    x = jax.nn.relu(x @ wt + b)
    wt, b = params["dense2"]
    return x @ wt + b


def main():
    model, ckpt, data_dir, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    json_out = sys.argv[7] if len(sys.argv) > 7 and sys.argv[6] == "--json" else None
    w = read_weights(ckpt)
    params = mlp_params(w) if model == "mlp" else cnn_params(w)
    forward = mlp_forward if model == "mlp" else cnn_forward
    images = read_idx(find(data_dir, "train-images-idx3-ubyte"))[:, None]
    labels = read_idx(find(data_dir, "train-labels-idx1-ubyte")).astype(np.int32)
    batch, warmup, base_lr, wd, b1, b2, eps = 128, 200, 1e-3, 1e-4, 0.9, 0.999, 1e-8

    def lr_at(t):  # warmup_cosine over the whole run, t 1-based (kl_schedule_lr)
        warm = t / warmup
        p = jnp.minimum(1.0, (t - warmup - 1) / max(1, steps - warmup - 1))
        return base_lr * jnp.where(t <= warmup, warm, 0.5 * (1 + jnp.cos(math.pi * p)))

    def loss_fn(params, x, y):
        logits = forward(params, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    @jax.jit
    def step(params, m, v, t, x, y):
        loss, g = jax.value_and_grad(loss_fn)(params, x, y)
        lr = lr_at(t)
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        params = jax.tree_util.tree_map(lambda p, m, v: p - lr * (m / c1 / (jnp.sqrt(v / c2) + eps) + wd * p), params, m, v)
        return params, m, v, loss

    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    order = np.random.default_rng(0).permutation(images.shape[0])
    per_epoch = images.shape[0] // batch
    losses = []

    def run(i):
        nonlocal params, m, v
        idx = order[(i % per_epoch) * batch : (i % per_epoch + 1) * batch]
        params, m, v, loss = step(params, m, v, jnp.float32(i + 1), images[idx], labels[idx])
        losses.append(loss)

    warm = min(10, steps // 10)
    for i in range(warm):
        run(i)
    jax.block_until_ready(losses[-1])
    t0 = time.perf_counter()
    for i in range(warm, steps):
        run(i)
    jax.block_until_ready(losses[-1])
    secs = time.perf_counter() - t0
    losses = [float(x) for x in losses]
    result = {"framework": "jax %s" % jax.__version__, "model": model, "threads": THREADS, "steps": steps,
              "timed_steps": steps - warm, "seconds": secs, "samples_per_s": (steps - warm) * batch / secs,
              "ms_per_step": 1e3 * secs / (steps - warm), "first_loss": losses[0],
              "last_loss": sum(losses[-20:]) / len(losses[-20:])}
    print(json.dumps(result))
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
