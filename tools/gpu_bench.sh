#!/usr/bin/env bash
# The GPU figures of docs/results.md, in one call on a lent GPU machine (an H200 here): JAX's XLA on the GPU
# (accelerator=gpu runtime=jax) beside plain PyTorch on the same GPU (accelerator=gpu: eager, and torch.compile),
# in float32 and bf16-mixed, for the quickstart CNN, the CIFAR-10 CNN and the IMDB LSTM.
#
#     bash tools/gpu_bench.sh OUT_DIR                      # RECIPES="quickstart cifar10" for some of them
#
# That machine has its own torch, JAX and Lightning and no network, so the project's pins do not hold there: the
# packages it lacks (torchax, jsonargparse and its needs) travel as wheels in .whl/ (fetched beforehand with
# `pip download --no-deps --python-version 3.12 ...`), and xla_train runs from this checkout. Each recipe's
# bench.csv and bench.md land in OUT_DIR as soon as that recipe is done, so a run cut short keeps what finished.
set -uo pipefail
out=${1:?usage: bash tools/gpu_bench.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
"$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
"$py" -m xla_train devices || exit 1

run() {  # NAME, then bench's arguments
    local name=$1
    shift
    echo "== $name: bench $*"
    "$py" -m xla_train bench "$@" runs_dir="/tmp/runs-$name" timeout=240
    local dir
    dir=$(ls -d /tmp/runs-"$name"/bench/version_* 2>/dev/null | tail -1)
    [ -n "$dir" ] && cp "$dir/bench.csv" "$out/$name.csv" && cp "$dir/bench.md" "$out/$name.md"
}

both="accelerators=${ACCELERATORS:-gpu} runtimes=auto,jax precision=32-true,bf16-mixed"
for recipe in ${RECIPES:-quickstart imdb cifar10}; do
    case $recipe in
    quickstart) run quickstart recipe=quickstart $both batch_sizes=128 compile=false,true steps=40 warmup=8 ;;
    imdb) run imdb recipe=imdb $both batch_sizes=128 compile=false steps=24 warmup=8 ;;
    cifar10) run cifar10 recipe=cifar10 $both batch_sizes=128 compile=false steps=40 warmup=8 ;;
    esac
done
