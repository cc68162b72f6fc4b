#!/usr/bin/env python3
"""Mutation fuzzer over Kiln's real binaries: every input a user hands Kiln.

  tests/fuzz/cli_fuzz.py --kiln BUILD/kiln [--seconds N] [--out DIR]
                         [--seed S] [--targets model,flags,data,npy,ckpt,tokens]

Best run on a sanitizer build (cmake -DKILN_SANITIZE=ON), whose `kiln build`
links the training executables with the sanitizers too. Each target makes
mutants of valid inputs and runs the command that reads them, under a
timeout:

  model   model files (the examples and every tests/**/*.kl), mutated
          token-wise (numbers made huge, zero, negative; names swapped;
          tokens deleted or doubled), line-wise (deleted, doubled, swapped),
          byte-wise, and by insertions (deep nesting, unicode, unterminated
          strings and comments, self-recursive defs, rank-0 and huge
          shapes): `kiln ir FILE --after check` (the whole compile path)
  flags   every flag of the training executable, of `kiln ir` and of
          `kiln pack`, and --set keys, with values negative, zero, huge,
          fractional, non-numeric, empty, nan, inf
  data    IDX files with mutated headers and bodies (gzip and raw)
  npy     .npy arrays for `kiln pack --npy` (header text and bytes)
  ckpt    checkpoints with bytes changed, inserted or cut and the checksum
          made valid again, so that the loader's own checks are exercised;
          safetensors files mutated the same way (--init)
  tokens  token files (kiln pack --text) with mutated headers and lengths

A finding is a crash (a signal), a sanitizer report, an internal error
(kl_panic), a hang (the timeout), an exit status other than 0 and 1, or
an error that names neither the file nor the flag it is about; a flag
value outside its range that runs (exit 0) is reported as accepted. Each
finding's input and output go to OUT/findings (one per signature); the
summary counts runs and findings per target. Exit status 1 when anything
was found.
"""
import argparse
import glob
import gzip
import hashlib
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FASHION = "/usr/share/datasets/fashion-mnist"
INTERESTING = ["0", "-1", "1", "2", "3", "7", "255", "256", "65535", "2147483647", "2147483648",
               "4294967296", "9223372036854775807", "9223372036854775808", "99999999999999999999999",
               "-9223372036854775808", "1e308", "1e309", "-1e309", "1e-320", "0.5", "-0", "1.5e3"]
FLAG_VALUES = ["-1", "0", "1", "-0", "0.5", "1e30", "-1e30", "9223372036854775808", "99999999999999999999",
               "abc", "", " 3", "3x", "0x10", "nan", "inf", "-inf", "1e-45", "2147483648", "4294967297"]
SANITIZER = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|internal error")


class Fuzzer:
    def __init__(self, args):
        self.kiln = os.path.abspath(args.kiln)
        self.out = os.path.abspath(args.out)
        self.rng = random.Random(args.seed)
        self.timeout = args.timeout
        self.work = os.path.join(self.out, "work")
        self.found = os.path.join(self.out, "findings")
        os.makedirs(self.work, exist_ok=True)
        os.makedirs(self.found, exist_ok=True)
        self.signatures = set()
        self.runs = {}
        self.findings = {}
        self.env = dict(os.environ, KILN_CACHE_DIR=os.path.join(self.out, "cache"),
                        ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=1",
                        UBSAN_OPTIONS="print_stacktrace=1")

    # ---- running and judging ----
    def run(self, target, argv, names, inputs=(), bad_value=False, cwd=None):
        """Runs argv; a finding when it crashed, hung, reported a sanitizer
        error, exited other than 0/1, or failed without naming any of names;
        or, with bad_value, ran cleanly."""
        self.runs[target] = self.runs.get(target, 0) + 1
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=self.timeout,
                               env=self.env, cwd=cwd or self.work)
            rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            rc, err = None, (e.stderr or b"").decode("utf-8", "replace")
        kind = None
        if rc is None:
            kind = "hang"
        elif SANITIZER.search(err):
            kind = "sanitizer"
        elif rc < 0 or rc >= 128:
            kind = "crash"
        elif rc not in (0, 1):
            kind = "exit%d" % rc
        elif rc == 1 and names and not any(n in err for n in names):
            kind = "unclear"
        elif rc == 0 and bad_value:
            kind = "accepted"
        if kind:
            self.report(target, kind, argv, err, inputs)
        return rc, err

    def signature(self, kind, err):
        """Findings with one signature are one bug: the sanitizer's first
        report line and top frame in kiln, else the message with numbers
        and paths taken out."""
        lines = err.splitlines()
        if kind in ("sanitizer", "crash"):
            head = next((l for l in lines if SANITIZER.search(l)), "")
            frame = next((l for l in lines if re.search(r"#\d+ .* in (kl_|ir_|fe_|pass_|cg_|plan_|rt_)", l)), "")
            head = re.sub(r"0x[0-9a-f]+|\d+", "N", head)
            return kind + ":" + head[:120] + ":" + re.sub(r".* in ", "", frame)[:80]
        text = " ".join(lines[:2])
        text = re.sub(r"/\S+", "PATH", text)
        text = re.sub(r"\d+", "N", text)
        return kind + ":" + text[:160]

    def report(self, target, kind, argv, err, inputs):
        sig = self.signature(kind, err)
        if sig in self.signatures:
            return
        self.signatures.add(sig)
        self.findings[target] = self.findings.get(target, 0) + 1
        tag = "%s-%s-%s" % (target, kind, hashlib.sha1(sig.encode()).hexdigest()[:8])
        d = os.path.join(self.found, tag)
        os.makedirs(d, exist_ok=True)
        for path in inputs:
            if os.path.isfile(path):
                shutil.copy(path, d)
        with open(os.path.join(d, "report.txt"), "w") as f:
            f.write("command: %s\n\n%s\n" % (" ".join(repr(a) for a in argv), err[-6000:]))
        print("FOUND %s %s: %s" % (target, kind, " ".join(argv)[:200]))
        print("   " + "\n   ".join(err.strip().splitlines()[:3]))
        sys.stdout.flush()

    # ---- model files ----
    def model_seeds(self):
        seeds = sorted(glob.glob(os.path.join(ROOT, "examples", "*.kl")) +
                       glob.glob(os.path.join(ROOT, "tests", "**", "*.kl"), recursive=True))
        return [open(p, encoding="utf-8", errors="replace").read() for p in seeds]

    TOKEN = re.compile(r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[A-Za-z_][A-Za-z_0-9.]*|\s+|#[^\n]*|\"[^\"\n]*\"|.", re.S)

    def mutate_model(self, text, others):
        r = self.rng
        toks = self.TOKEN.findall(text)
        lines = text.split("\n")
        what = r.randrange(14)
        if what == 0 and toks:  # a number made interesting
            nums = [i for i, t in enumerate(toks) if t[0].isdigit()]
            if nums:
                toks[r.choice(nums)] = r.choice(INTERESTING)
            return "".join(toks)
        if what == 1 and toks:  # a name swapped for another
            names = [i for i, t in enumerate(toks) if t[0].isalpha() or t[0] == "_"]
            pool = [t for o in others for t in self.TOKEN.findall(o) if t[:1].isalpha()] or ["x"]
            if names:
                toks[r.choice(names)] = r.choice(pool)
            return "".join(toks)
        if what == 2 and toks:  # a token deleted
            del toks[r.randrange(len(toks))]
            return "".join(toks)
        if what == 3 and toks:  # a token doubled
            i = r.randrange(len(toks))
            toks.insert(i, toks[i])
            return "".join(toks)
        if what == 4 and lines:
            del lines[r.randrange(len(lines))]
            return "\n".join(lines)
        if what == 5 and lines:
            i = r.randrange(len(lines))
            lines.insert(i, lines[i])
            return "\n".join(lines)
        if what == 6 and len(lines) > 1:
            i, j = r.randrange(len(lines)), r.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            return "\n".join(lines)
        if what == 7:  # cut anywhere: unterminated things
            return text[: r.randrange(len(text) + 1)]
        if what == 8:  # bytes
            b = bytearray(text.encode())
            for _ in range(r.randint(1, 4)):
                if b:
                    b[r.randrange(len(b))] = r.randrange(256)
            return b.decode("latin-1")
        if what == 9:  # deep nesting in an expression
            depth = r.choice([50, 500, 5000, 100000])
            i = text.rfind("loss =")
            if i >= 0:
                j = text.find("\n", i)
                return text[: i + 6] + " " + "(" * depth + text[i + 6: j] + ")" * depth + text[j:]
            return "(" * depth + text
        if what == 10:  # shapes: rank 0, zero and huge dims
            return re.sub(r"\[([^\[\]]*)\]", lambda m: r.choice(
                ["[]", "[0]", "[%s, 0]" % m.group(1), "[%s, 4294967296]" % m.group(1),
                 "[9223372036854775807]", "[%s]" % m.group(1), "[%s]" % m.group(1), "[-1]",
                 "[" + ", ".join(["2"] * 9) + "]"]), text, count=r.randint(1, 3))
        if what == 11:  # recursion in defs
            return ("def f(x) {\n  return f(x) + g(x)\n}\ndef g(x) {\n  return f(x)\n}\n" +
                    text.replace("relu(", "f(", 1))
        if what == 12:  # unicode and odd characters
            pos = r.randrange(len(text) + 1)
            return text[:pos] + r.choice(["\u00e9", "\u202e", "\ufeff", "\x00", "\u4e2d", "\U0001F600", "\\",
                                          "\"", "/*", "#", "\r", "\t", "@@", "..."]) + text[pos:]
        # splice: a block of another seed
        o = r.choice(others)
        a, b = sorted((r.randrange(len(o) + 1), r.randrange(len(o) + 1)))
        pos = r.randrange(len(text) + 1)
        return text[:pos] + o[a:b] + text[pos:]

    def fuzz_model(self, deadline):
        seeds = self.model_seeds()
        path = os.path.join(self.work, "m.kl")
        while time.time() < deadline:
            text = self.rng.choice(seeds)
            for _ in range(self.rng.choice([1, 1, 2, 3])):
                text = self.mutate_model(text, seeds)
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
            self.run("model", [self.kiln, "ir", path, "--after", "check"], ["m.kl"], [path])

    # ---- flags ----
    EXE_FLAGS = {  # flag: the values it must refuse among FLAG_VALUES (None: judge by name only)
        "--epochs": "count", "--steps": "count", "--batch": "count", "--accumulate": "count",
        "--lr": "positive", "--seed": "integer", "--threads": "count0", "--eval-every": "count0",
        "--log-every": "count", "--memory-limit": "count", "--save-every": "count", "--keep": "count",
        "--tokens": "count", "--temperature": "positive", "--top-k": "count", "--precision": "word",
        "--device": "word", "--bf16-gemm": "word", "--data": None,
    }
    IR_FLAGS = {"--batch": "count", "--ranks": "count"}
    PACK_FLAGS = {"--shard-size": "count", "--samples-per-shard": "count", "--limit": "count",
                  "--shuffle": "integer"}
    SET_KEYS = {"batch": "count", "accumulate": "count", "epochs": "count", "threads": "count0",
                "clip": "positive", "eval_every": "count0", "log_every": "count", "seed": "integer",
                "tensor_parallel": "count", "memory_limit": "count"}

    @staticmethod
    def refused(kind, value):
        """Whether a value is outside what a flag of this kind may take."""
        if value != value.strip():
            return False  # " 3": strtoll's reading (3) is fine either way
        v = value
        try:
            x = float(v) if v == value else None
        except ValueError:
            x = None
        if kind is None:
            return False
        if kind == "word":
            return True  # every FLAG_VALUES entry is no known word
        if x is None or x != x or x in (float("inf"), float("-inf")):
            return True
        if kind == "positive":
            return x <= 0 or x > 1e29
        integral = re.fullmatch(r"-?\d+", v) is not None
        if not integral:
            return True
        n = int(v)
        if kind == "integer":
            return abs(n) >= 2 ** 64
        if kind == "count0":
            return n < 0 or n >= 2 ** 63
        return n < 1 or n >= 2 ** 63 or (v.startswith("-"))

    def build_exe(self, model, name):
        exe = os.path.join(self.work, name)
        if not os.path.exists(exe):
            subprocess.run([self.kiln, "build", model, "-o", exe], check=True, env=self.env,
                           stdout=subprocess.DEVNULL)
        return exe

    def fuzz_flags(self, deadline):
        exe = self.build_exe(os.path.join(ROOT, "examples", "mlp.kl"), "mlp")
        base = [exe, "--steps", "1", "--threads", "1", "--quiet", "--data", "synthetic:64", "--batch", "8"]
        r = self.rng
        while time.time() < deadline:
            which = r.randrange(4)
            value = r.choice(FLAG_VALUES)
            if which == 0:
                flag = r.choice(sorted(self.EXE_FLAGS))
                argv = base + [flag, value]
                if flag in ("--save-every", "--keep"):
                    argv += ["--save", os.path.join(self.work, "f.ckpt")] + (["--save-every", "1"] if flag == "--keep" else [])
                if flag in ("--tokens", "--temperature", "--top-k"):
                    continue  # --generate needs a token model (the tokens target)
                names = [flag] + ([value] if flag == "--data" and value else [])  # a path names itself
                self.run("flags", argv, names, bad_value=self.refused(self.EXE_FLAGS[flag], value))
            elif which == 1:
                key = r.choice(sorted(self.SET_KEYS))
                argv = base + ["--set", "%s=%s" % (key, value)]
                self.run("flags", argv, ["--set", key, "--" + key.replace("_", "-")], bad_value=self.refused(self.SET_KEYS[key], value))
            elif which == 2:
                flag = r.choice(sorted(self.IR_FLAGS))
                argv = [self.kiln, "ir", os.path.join(ROOT, "examples", "mlp.kl"), "--after", "memplan", flag, value]
                # An error at the model's line that shows the value is clear too.
                self.run("flags", argv, [flag, "mlp.kl:"], bad_value=self.refused(self.IR_FLAGS[flag], value))
            else:
                flag = r.choice(sorted(self.PACK_FLAGS))
                out = os.path.join(self.work, "pack-out")
                shutil.rmtree(out, ignore_errors=True)
                argv = [self.kiln, "pack", "--npy", "x=" + self.small_npy(), "-o", out, flag, value]
                self.run("flags", argv, [flag], bad_value=self.refused(self.PACK_FLAGS[flag], value))

    def small_npy(self):
        path = os.path.join(self.work, "x.npy")
        if not os.path.exists(path):
            header = "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 3), }"
            header += " " * (63 - len(header) % 64) + "\n"
            with open(path, "wb") as f:
                f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + bytes(120))
        return path

    # ---- IDX data ----
    def fuzz_data(self, deadline):
        exe = self.build_exe(os.path.join(ROOT, "examples", "mlp.kl"), "mlp")
        files = sorted(os.listdir(FASHION))
        raw = {}
        for f in files:  # the first 600 (train) or 100 (t10k) samples: quick runs
            b = bytearray(gzip.open(os.path.join(FASHION, f)).read())
            n, per = (600 if f.startswith("train") else 100), (784 if "images" in f else 1)
            struct.pack_into(">I", b, 4, n)
            raw[f] = bytes(b[: (16 if "images" in f else 8) + n * per])
        d = os.path.join(self.work, "data")
        r = self.rng
        while time.time() < deadline:
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            victim = r.choice(files)
            for f in files:
                data = bytearray(raw[f])
                if f == victim:
                    data = self.mutate_idx(data)
                if f != victim or r.random() < 0.5:
                    with gzip.open(os.path.join(d, f), "wb", compresslevel=1) as g:
                        g.write(data)
                else:
                    with open(os.path.join(d, f[:-3]), "wb") as g:
                        g.write(data)
            self.run("data", [exe, "--steps", "1", "--threads", "1", "--quiet", "--batch", "8", "--data", d,
                              "--eval-every", "0"],
                     [victim[:-3]], [os.path.join(d, victim), os.path.join(d, victim[:-3])])

    def mutate_idx(self, data):
        r = self.rng
        what = r.randrange(6)
        ndim = data[3] if len(data) > 3 else 0
        if what == 0:  # a dimension
            i = r.randrange(max(ndim, 1))
            val = r.choice([0, 1, 2, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 10001, 59999, 28 * 28])
            struct.pack_into(">I", data, 4 + 4 * i, val)
        elif what == 1:  # the type code or the dimension count
            data[r.choice([2, 3])] = r.choice([0, 1, 3, 4, 8, 9, 0x0B, 0x0C, 0x0D, 0x0E, 0xFF])
        elif what == 2:  # cut
            del data[r.randrange(len(data)):]
        elif what == 3:  # appended bytes
            data += bytes(r.randrange(1, 100))
        elif what == 4:  # body bytes (labels out of range)
            for _ in range(r.randint(1, 8)):
                data[r.randrange(len(data))] = r.randrange(256)
        else:  # header bytes
            for _ in range(r.randint(1, 3)):
                data[r.randrange(min(len(data), 16))] = r.randrange(256)
        return data

    # ---- .npy arrays for kiln pack ----
    def fuzz_npy(self, deadline):
        good = open(self.small_npy(), "rb").read()
        labels = os.path.join(self.work, "y.npy")
        header = "{'descr': '<i4', 'fortran_order': False, 'shape': (10,), }"
        header += " " * (63 - len(header) % 64) + "\n"
        with open(labels, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + bytes(40))
        mut = os.path.join(self.work, "mut.npy")
        out = os.path.join(self.work, "npy-out")
        r = self.rng
        while time.time() < deadline:
            data = bytearray(good)
            if r.random() < 0.5:  # the header's text
                text = data[10:10 + struct.unpack_from("<H", data, 8)[0]].decode("latin-1")
                text = text.replace(r.choice(["<f4", "(10, 3)", "False", "descr", "shape"]),
                                    r.choice(["<f8", ">f4", "|u1", "<i8", "(10, 3, 0)", "(0,)", "(-1, 3)",
                                              "(99999999999, 3)", "()", "True", "", "(10, 3", "'x'"]), 1)
                data[10:10 + struct.unpack_from("<H", data, 8)[0]] = text.encode("latin-1")
            else:
                data = self.mutate_bytes(data, 128 if r.random() < 0.8 else len(data))
            with open(mut, "wb") as f:
                f.write(data)
            shutil.rmtree(out, ignore_errors=True)
            self.run("npy", [self.kiln, "pack", "--npy", "x=" + mut, "--npy", "y=" + labels, "-o", out], ["mut.npy"], [mut])

    # ---- checkpoints and safetensors ----
    @staticmethod
    def fnv1a(data):
        h = 0xCBF29CE484222325
        for b in data:
            h = ((h ^ b) * 0x100000001B3) & ((1 << 64) - 1)
        return h

    def fuzz_ckpt(self, deadline):
        exe = self.build_exe(os.path.join(ROOT, "examples", "mlp.kl"), "mlp")
        cnn = self.build_exe(os.path.join(ROOT, "examples", "fashion_cnn.kl"), "cnn")
        common = ["--threads", "1", "--quiet", "--data", "synthetic:64", "--batch", "8", "--eval-every", "0"]
        good = os.path.join(self.work, "good.ckpt")
        other = os.path.join(self.work, "other.ckpt")
        st = os.path.join(self.work, "good.safetensors")
        if not os.path.exists(good):
            subprocess.run([exe, "--steps", "2", "--save", good, "--export", st] + common, check=True, env=self.env)
            subprocess.run([cnn, "--steps", "1", "--save", other] + common, check=True, env=self.env)
        # another model's checkpoint, both ways
        self.run("ckpt", [exe, "--steps", "3", "--resume", other] + common, ["other.ckpt"], [other])
        body = open(good, "rb").read()
        stbytes = open(st, "rb").read()
        mut = os.path.join(self.work, "mut.ckpt")
        mst = os.path.join(self.work, "mut.safetensors")
        r = self.rng
        while time.time() < deadline:
            if r.random() < 0.6:
                data = self.mutate_bytes(bytearray(body[:-8]), 64 if r.random() < 0.8 else len(body))
                data += struct.pack("<Q", self.fnv1a(data)) if r.random() < 0.9 else b"\0" * 8
                with open(mut, "wb") as f:
                    f.write(data)
                self.run("ckpt", [exe, "--steps", "3", "--resume", mut] + common, ["mut.ckpt"], [mut])
                if r.random() < 0.2:
                    self.run("ckpt", [self.kiln, "ckpt", mut], ["mut.ckpt"], [mut])
            else:
                (hlen,) = struct.unpack_from("<Q", stbytes)
                data = self.mutate_bytes(bytearray(stbytes), 8 + hlen if r.random() < 0.8 else len(stbytes))
                with open(mst, "wb") as f:
                    f.write(data)
                self.run("ckpt", [exe, "--steps", "1", "--init", mst] + common, ["mut.safetensors"], [mst])

    def mutate_bytes(self, data, span):
        """Changes, inserts or cuts bytes, mostly within the first span
        bytes (the header)."""
        r = self.rng
        for _ in range(r.randint(1, 3)):
            if not data:
                break
            what = r.randrange(5)
            i = r.randrange(max(1, min(span, len(data))))
            if what == 0:
                data[i] = r.randrange(256)
            elif what == 1:
                data[i] ^= 1 << r.randrange(8)
            elif what == 2:
                data[i:i] = bytes([r.randrange(256)] * r.randint(1, 8))
            elif what == 3:
                del data[i:i + r.randint(1, 8)]
            else:
                v = r.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 1 << 31])
                data[i:i + 4] = struct.pack("<I", v)
        return data

    # ---- token files ----
    def fuzz_tokens(self, deadline):
        d = os.path.join(self.work, "tok")
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
        model = os.path.join(d, "tiny_lm.kl")
        shutil.copy(os.path.join(ROOT, "tests", "gpt", "tiny_lm.kl"), model)
        textdir = os.path.join(d, "text")
        os.makedirs(textdir, exist_ok=True)
        for p in glob.glob(os.path.join(ROOT, "tests", "gpt", "*.sh")):
            shutil.copy(p, textdir)
        subprocess.run([self.kiln, "pack", "--text", textdir, "-o", os.path.join(d, "good")], check=True,
                       env=self.env, stdout=subprocess.DEVNULL)
        exe = os.path.join(d, "lm")
        if not os.path.exists(exe):
            subprocess.run([self.kiln, "build", model, "-o", exe], check=True, env=self.env, cwd=d,
                           stdout=subprocess.DEVNULL)
        good = {n: open(os.path.join(d, "good", n), "rb").read() for n in ("train.tok", "val.tok")}
        r = self.rng
        while time.time() < deadline:
            victim = r.choice(sorted(good))
            for n, b in good.items():
                data = bytearray(b)
                if n == victim:
                    data = self.mutate_bytes(data, 32 if r.random() < 0.8 else len(data))
                    if r.random() < 0.3:
                        del data[r.randrange(len(data)):]
                with open(os.path.join(d, "data", n), "wb") as f:
                    f.write(data)
            self.run("tokens", [exe, "--steps", "2", "--threads", "1", "--quiet", "--eval-every", "1"], [victim],
                     [os.path.join(d, "data", victim)], cwd=d)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--seconds", type=float, default=300, help="the whole budget, shared by the targets")
    ap.add_argument("--out", default="/tmp/kiln-cli-fuzz")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--targets", default="model,flags,data,npy,ckpt,tokens")
    args = ap.parse_args()
    fz = Fuzzer(args)
    targets = args.targets.split(",")
    share = args.seconds / len(targets)
    for t in targets:
        start = time.time()
        getattr(fz, "fuzz_" + t)(start + share)
        print("%s: %d runs in %.0f s, %d findings" % (t, fz.runs.get(t, 0), time.time() - start,
                                                     fz.findings.get(t, 0)))
        sys.stdout.flush()
    total = sum(fz.findings.values())
    print("%d findings in %s" % (total, fz.found))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
