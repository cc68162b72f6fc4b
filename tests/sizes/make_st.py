#!/usr/bin/env python3
"""Writes the crafted safetensors files of tests/sizes/safetensors.sh:
many.safetensors (300,000 F32[1] tensors, a header of 12 MB) and
empty_at.safetensors (a F32[4] tensor and an empty F32[0] one at its
offset, which shares no byte with it)."""
import json
import struct
import sys


def write(path, tensors, nbytes):
    head = json.dumps(tensors, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + bytes(nbytes))


d = sys.argv[1]
write(f"{d}/many.safetensors",
      {f"t{i}": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(300000)}, 1200000)
write(f"{d}/empty_at.safetensors", {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                    "b": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}, 16)
