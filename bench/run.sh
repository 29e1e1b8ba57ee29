#!/bin/sh
# Run the benchmarks and record their figures under bench/results/.
#   bench/train: strata's training step vs the best fp32 matmul rate (same
#     run); bench/torch_train.py: the same model and batch in PyTorch eager.
#   bench/optim: fp32 and 8-bit AdamW steps vs a STREAM-like bandwidth
#     ceiling (same run); bench/optim_peers.py: PyTorch's CPU AdamW and
#     bitsandbytes' 8-bit AdamW on a tensor of the same size.
#   bench/io: the disk tier's streaming write/read rate vs dd and fio with
#     O_DIRECT on the same directory (same run).
#   bench/offload.py: offloaded vs in-memory step time (same run), queue
#     busy shares; again with per-layer GaLore (galore-adamw8bit) on llama-130m.
#   bench/eval_offload.py: `strata eval` within memory budgets (weights on
#     disk) vs in memory, and layer-major vs one micro-batch at a time: wall
#     time and peak RSS (same run).
#   bench/sample.py: `strata sample` with its key/value cache vs recomputing
#     the window for every token (same run, same greedy text): tokens/s.
#   bench/galore: GaLore-AdamW(8bit) vs AdamW step times on the paper's 60M
#     and 130M presets, projector costs, the worst step against the median.
#   bench/plan.py: the planner's plan vs fixed policies, measured/predicted.
#   bench/encode.py: `strata prepare` with a Hugging Face tokenizer vs the
#     tokenizers library's encode of the same text (same run).
# usage: bench/run.sh [train|optim|io|offload|eval|sample|galore|plan|encode|all]   (default all)
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -e
cd "$(dirname "$0")/.."
# Debian's OpenBLAS misdetects some AVX-512 CPUs (REFERENCES.md): give it the
# core type so its ceiling is a fair one. Read when the library loads.
if grep -q avx512f /proc/cpuinfo && [ -z "$OPENBLAS_CORETYPE" ]; then export OPENBLAS_CORETYPE=SkylakeX; fi
which=${1:-all}
case "$which" in
train | optim | io | offload | eval | sample | galore | plan | encode | all) ;;
*)
	echo "bench/run.sh: unknown benchmark '$which': give train, optim, io, offload, eval, sample, galore, plan, encode or all" >&2
	exit 2
	;;
esac
mkdir -p bench/results
stamp=$(date +%Y%m%d-%H%M)
# the machine beside the figures: "AMD EPYC" alone named two VMs of other
# CPU generations (Zen 3 with AVX2, Zen 5 with AVX-512)
{
	grep -m1 '^model name' /proc/cpuinfo
	grep -m1 '^cpu family' /proc/cpuinfo
	grep -m1 '^model[[:space:]]*:' /proc/cpuinfo
	echo "simd: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512[a-z_0-9]*|amx[a-z_0-9]*)$' | sort | tr '\n' ' ')"
	echo "cpus: $(nproc), $(grep MemTotal /proc/meminfo)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "strata: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "bench/results/machine-$stamp.txt"
have_torch=0
python3 -c 'import torch' 2>/dev/null && have_torch=1

if [ "$which" = all ] || [ "$which" = train ]; then
	./build/bench/train --json "bench/results/train-$stamp.json"
	if [ $have_torch = 1 ]; then
		python3 bench/torch_train.py --bf16 --json "bench/results/torch-$stamp.json"
		python3 bench/compare.py "bench/results/train-$stamp.json" "bench/results/torch-$stamp.json"
	else
		echo "PyTorch not installed: skipping the PyTorch comparison (pip install torch numpy)"
	fi
fi

if [ "$which" = all ] || [ "$which" = optim ]; then
	./build/bench/optim --json "bench/results/optim-$stamp.json"
	if [ $have_torch = 1 ]; then
		python3 bench/optim_peers.py --json "bench/results/optim-peers-$stamp.json"
		python3 bench/compare_optim.py "bench/results/optim-$stamp.json" "bench/results/optim-peers-$stamp.json"
	else
		echo "PyTorch not installed: skipping the optimizer peers (pip install torch bitsandbytes)"
	fi
fi

if [ "$which" = all ] || [ "$which" = io ]; then
	./build/bench/io --json "bench/results/io-$stamp.json"
fi

if [ "$which" = all ] || [ "$which" = offload ]; then
	python3 bench/offload.py --json "bench/results/offload-$stamp.json"
	# per-layer GaLore: weights and state offloaded, gradients on the device
	python3 bench/offload.py --optimizer galore-adamw8bit --only llama-130m \
		--json "bench/results/offload-galore-$stamp.json"
fi

if [ "$which" = all ] || [ "$which" = eval ]; then
	python3 bench/eval_offload.py --json "bench/results/eval-offload-$stamp.json"
fi

if [ "$which" = all ] || [ "$which" = sample ]; then
	python3 bench/sample.py --json "bench/results/sample-$stamp.json"
fi

if [ "$which" = all ] || [ "$which" = galore ]; then
	./build/bench/galore --json "bench/results/galore-$stamp.json"
	OMP_NUM_THREADS=1 ./build/bench/galore --projectors --json "bench/results/galore-proj-$stamp.json"
fi

if [ "$which" = all ] || [ "$which" = plan ]; then
	python3 bench/plan.py --json "bench/results/plan-$stamp.json"
fi

if [ "$which" = all ] || [ "$which" = encode ]; then
	python3 bench/encode.py --json "bench/results/encode-$stamp.json"
fi
