"""Shared by the Python benchmarks: the CPU's name for the results file, the
KJV corpus prepared into a work directory, and reading a results file."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATA = os.path.join(ROOT, "build", "strata")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


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
