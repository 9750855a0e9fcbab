#!/usr/bin/env bash
# The one command for a GPU machine; finishes in under 6 minutes (each part has its own time limit).
#
#   OUT=/path/to/results bash profiling/device_check.sh
#
# Writes into $OUT (default profiling/results/<UTC date>), eight files at most:
#   summary.txt   environment (nvidia-smi, Python, CuPy, CUDA, torch, nsys) and each part's exit status
#   tests.txt     python -m pytest -m gpu, then the kernel and schedule GPU tests under compute-sanitizer
#                 --tool racecheck and --tool synccheck (when compute-sanitizer is on PATH)
#   kernels.txt   kernels.json   our nabla_w kernels against cupy.matmul (cuBLAS), GB/s against a copy
#   bench.txt     bench.json     leapfrog-bench grid, the H200 target N=1024 L=32 B=32 float32 included
#   overlap.txt   trace.sqlite   nsys trace of leapfrog-train steps (N=1024 L=32 B=32 k=2), overlap report
#
# Needs python3 with numpy and CuPy (cupy-cuda12x or cupy-cuda13x). No package index: the checkout is
# imported through PYTHONPATH (nothing is installed), NVTX ranges fall back to cupy.cuda.nvtx when the
# nvtx package is absent, and threadpoolctl, pytest and tqdm, if missing, are installed from wheels in
# $WHEELS (default profiling/wheels; fill it elsewhere with
# `pip download -d profiling/wheels threadpoolctl pytest pytest-timeout tqdm`) into a temporary folder.
set -uo pipefail  # no -e: a failed part is recorded in summary.txt and the next part runs
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=${OUT:-$here/results/$(date -u +%Y%m%dT%H%M%SZ)}
python=${PYTHON:-python3}
wheels=${WHEELS:-$here/wheels}
mkdir -p "$out"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export PYTHONPATH="$repo:$scratch/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$repo" || exit 2
summary=$out/summary.txt
# shellcheck source=/dev/null
. "$here/parts.sh"  # part, and the summary's first lines
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed"
    "$python" - <<'PY' 2>&1
import platform
print("python", platform.python_version())
import numpy
print("numpy", numpy.__version__)
try:
    import cupy
    rt = cupy.cuda.runtime
    print("cupy", cupy.__version__, "| CUDA runtime", rt.runtimeGetVersion(), "| driver", rt.driverGetVersion())
    print("device", rt.getDeviceProperties(0)["name"].decode(), "| SMs", rt.getDeviceProperties(0)["multiProcessorCount"])
except Exception as error:
    print("cupy unusable:", error)
try:
    import torch
    print("torch", torch.__version__, "| cuda", torch.version.cuda)
except ImportError:
    print("torch: not installed (no PyTorch anchor)")
for name in ("nvtx", "threadpoolctl", "pytest"):
    try:
        __import__(name)
        print(name, "importable")
    except ImportError:
        print(name, "missing")
PY
    command -v nsys >/dev/null && nsys --version
} | tee -a "$summary"

missing=()
"$python" -c "import threadpoolctl" 2>/dev/null || missing+=(threadpoolctl)
"$python" -c "import pytest" 2>/dev/null || missing+=(pytest pytest-timeout)
"$python" -c "import tqdm" 2>/dev/null || missing+=(tqdm)  # leapfrog-train, traced by nsys.sh
if ((${#missing[@]})); then
    if [[ -d $wheels ]]; then
        "$python" -m pip install --quiet --no-index --find-links "$wheels" --target "$scratch/site" "${missing[@]}" \
            >>"$summary" 2>&1 || echo "could not install ${missing[*]} from $wheels" | tee -a "$summary"
    else
        echo "missing ${missing[*]} and no wheels in $wheels" | tee -a "$summary"
    fi
fi

part "GPU tests" 90 "$out/tests.txt" "$python" -m pytest -m gpu -q -p no:cacheprovider tests
if command -v compute-sanitizer >/dev/null; then
    # Shared-memory races and barrier misuse in the tiled kernels, on odd sizes; a leapfrog step too.
    selection='(test_nabla_w or test_fused_update or test_nabla_b) and 257 and 33 or bitwise_sequential_on_the_gpu and 7-2'
    for tool in racecheck synccheck; do
        part "compute-sanitizer $tool" 45 "$scratch/$tool.txt" compute-sanitizer --tool "$tool" --error-exitcode 1 \
            --target-processes all "$python" -m pytest -m gpu -q -p no:cacheprovider -x \
            tests/test_kernels.py tests/test_schedules.py -k "$selection"
        cat "$scratch/$tool.txt" >>"$out/tests.txt"
    done
else
    echo "compute-sanitizer: skipped (not on PATH)" | tee -a "$summary"
fi
part "nabla_w kernels vs cuBLAS" 40 "$out/kernels.txt" \
    "$python" profiling/kernels.py --backend cupy --json "$out/kernels.json"
part "bench grid" 120 "$out/bench.txt" "$python" -m leapfrog_gpu.tools.bench --backend cupy --dtype float32 \
    --sizes 256,1024,4096 --layers 8,32 --batch 1,32 --k 1,2,4,auto --json "$out/bench.json"
if command -v nsys >/dev/null; then
    mkdir -p "$scratch/trace"
    part "nsys trace" 90 "$out/overlap.txt" env OUT="$scratch/trace" bash profiling/nsys.sh
    cp "$scratch/trace/trace.sqlite" "$out/" 2>/dev/null
else
    echo "nsys trace: skipped (nsys is not on PATH)" | tee -a "$summary"
fi
echo "results in $out" | tee -a "$summary"
