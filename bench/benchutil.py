"""Shared by the Python benchmarks: the CPU's name for the results file, the
KJV corpus prepared into a work directory, a deep model of the tiny preset's
shape, and reading a results file."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATA = os.path.join(ROOT, "build", "strata")


def cpu_name():
    """The CPU's name, family, model and vector extensions: the name alone
    ("AMD EPYC") named VMs of two CPU generations."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    k, v = (x.strip() for x in line.split(":", 1))
                    info.setdefault(k, v)
    except OSError:
        return "unknown"
    simd = sorted(x for x in info.get("flags", "").split() if x in ("avx2", "fma") or x.startswith("avx512"))
    return "%s (family %s model %s; %s; %d CPUs)" % (info.get("model name", "unknown"), info.get("cpu family", "?"),
                                                   info.get("model", "?"), " ".join(simd) or "no AVX2",
                                                   len(os.sched_getaffinity(0)))


def load_json(path, what):
    """A results file, or exit saying why it cannot be read."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{what}: cannot read {path}: {e}")


def run(cmd, what, allow_fail=False):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0 and not allow_fail:
        sys.exit("%s: command failed: %s\n%s" % (what, " ".join(cmd), p.stdout[-3000:]))
    return p.returncode, p.stdout


def prepared_corpus(work, what):
    """The KJV text as token shards under work/data (made once)."""
    data = os.path.join(work, "data")
    if not os.path.exists(os.path.join(data, "train.bin")):
        run([os.path.join(ROOT, "scripts", "get-corpus"), os.path.join(work, "kjv.txt")], what)
        run([STRATA, "prepare", "--input", os.path.join(work, "kjv.txt"), "--out", data], what)
    return data


def deep_tiny(work, layers, what):
    """The tiny preset's shape (dim 256, ffn 688) with this many layers, made
    once under work/model-LAYERS."""
    base, model = os.path.join(work, "tiny"), os.path.join(work, "model-%d" % layers)
    if not os.path.exists(model):
        shutil.rmtree(base, ignore_errors=True)
        run([STRATA, "init", "--config", "tiny", "--out", base], what)
        conf = os.path.join(base, "config.json")
        with open(conf) as f:
            c = json.load(f)
        c["num_hidden_layers"] = layers
        with open(conf, "w") as f:
            json.dump(c, f)
        run([STRATA, "init", "--config", conf, "--out", model], what)
    return model
