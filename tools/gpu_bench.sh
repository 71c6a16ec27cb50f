#!/usr/bin/env bash
# The GPU figures of docs/results.md, in one call on a lent GPU machine (an H200 here): JAX's XLA on the GPU
# (accelerator=gpu runtime=jax) beside plain PyTorch on the same GPU (accelerator=gpu: eager, and torch.compile),
# in float32 and bf16-mixed, for the IMDB LSTM, the CIFAR-10 CNN and the quickstart CNN; then the IMDB LSTM on JAX
# with each of CHUNKS time steps per iteration of its scan (bench's scan_chunk=), and in bf16 at the fastest.
#
#     bash tools/gpu_bench.sh OUT_DIR          # RECIPES="imdb chunks" for some of them; STEPS, WARMUP, CHUNKS
#
# That machine has its own torch, JAX and Lightning and no network, so the project's pins do not hold there: the
# packages it lacks (torchax, jsonargparse and its needs) travel as wheels in .whl/ (fetched beforehand with
# `pip download --no-deps --python-version 3.12 ...`), and xla_train runs from this checkout. Each bench's
# bench.csv lands in OUT_DIR as soon as it is done, so a run cut short keeps what finished: 8 files with the
# defaults, as many as the device tool brings back, so keep the log elsewhere.
set -uo pipefail
out=${1:?usage: bash tools/gpu_bench.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
if [ -d .whl ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD"
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>/dev/null
"$py" -m xla_train devices || exit 1

run() {  # NAME, then bench's arguments
    local name=$1
    shift
    echo "== $(date -u +%T) $name: bench $*"
    "$py" -m xla_train bench "$@" runs_dir="/tmp/runs-$name" timeout=240
    local dir
    dir=$(ls -d /tmp/runs-"$name"/bench/version_* 2>/dev/null | tail -1)
    [ -n "$dir" ] && cp "$dir/bench.csv" "$out/$name.csv"
}

fastest_chunk() {  # the chunk whose float32 JAX cell in the sweep stepped fastest
    "$py" - "$out" "$@" <<'EOF'
import csv, sys
best = None
for chunk in sys.argv[2:]:
    name = f"gpu-imdb-chunk{chunk}"
    try:
        lines = [line for line in open(f"{sys.argv[1]}/{name}.csv") if not line.startswith("#")]
    except OSError:
        continue
    for r in csv.DictReader(lines):
        if r["runtime"] == "jax" and r["precision"] == "32-true" and r["step_ms"]:
            if best is None or float(r["step_ms"]) < best[0]:
                best = (float(r["step_ms"]), chunk)
print(best[1] if best else 1)
EOF
}

steps="steps=${STEPS:-96} warmup=${WARMUP:-8} batch_sizes=128"
accelerators=${ACCELERATORS:-gpu}
both="accelerators=$accelerators runtimes=auto,jax precision=32-true,bf16-mixed $steps"
chunks=${CHUNKS:-1 4 8 16}  # named, 1 too: gpu-imdb.csv's JAX cells run at the GPU's default (SCAN_CHUNKS)
for part in ${RECIPES:-imdb cifar10 quickstart chunks}; do
    case $part in
    imdb) run gpu-imdb recipe=imdb $both compile=false ;;
    chunks)
        for c in $chunks; do
            run "gpu-imdb-chunk$c" recipe=imdb accelerators="$accelerators" runtimes=jax scan_chunk=$c \
                precision=32-true $steps
        done
        best=$(fastest_chunk $chunks)
        echo "== fastest chunk in float32: $best"
        run "gpu-imdb-chunk$best-bf16" recipe=imdb scan_chunk=$best \
            accelerators="$accelerators" runtimes=jax precision=bf16-mixed $steps
        ;;
    cifar10) run gpu-cifar10 recipe=cifar10 $both compile=false ;;
    quickstart) run gpu-quickstart recipe=quickstart $both compile=false,true ;;
    esac
done
echo "== $(date -u +%T) done"
