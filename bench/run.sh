#!/bin/sh
# Run the benchmarks and record their figures under bench/results/.
# bench/train: strata's training step vs the best fp32 matmul rate (same run);
# bench/torch_train.py: the same model and batch in PyTorch eager, if installed.
set -e
cd "$(dirname "$0")/.."
# Debian's OpenBLAS misdetects some AVX-512 CPUs (REFERENCES.md): give it the
# core type so its ceiling is a fair one. Read when the library loads.
if grep -q avx512f /proc/cpuinfo && [ -z "$OPENBLAS_CORETYPE" ]; then export OPENBLAS_CORETYPE=SkylakeX; fi
mkdir -p bench/results
host=$(hostname -s 2>/dev/null || echo host)
stamp=$(date +%Y%m%d-%H%M)
./build/bench/train --json "bench/results/train-$stamp.json" "$@"
if python3 -c 'import torch' 2>/dev/null; then
	python3 bench/torch_train.py --json "bench/results/torch-$stamp.json"
	python3 bench/compare.py "bench/results/train-$stamp.json" "bench/results/torch-$stamp.json"
else
	echo "PyTorch not installed: skipping the PyTorch comparison (pip install torch numpy)"
fi
