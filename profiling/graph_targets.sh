#!/usr/bin/env bash
# Graph mode and its GPU targets, in one command for a GPU machine (under 6 minutes; each part has its
# own time limit, and a part that fails or runs out of time is recorded and the next one runs):
#
#   OUT=/path/to/results bash profiling/graph_targets.sh
#
# Writes into $OUT (default profiling/results/graph-<UTC date>):
#   summary.txt   environment and each part's exit status
#   tests.txt     the GPU tests of graph mode, the chain kernels and the PyTorch CUDA-graph anchor
#   kernels.txt   kernels.json   the chain kernels (2)(3) and (5) against cuBLAS + our elementwise kernel and
#                 a device-to-device copy: GB/s, GFLOP/s (B > 1), and the GEMV targets (>= 80 % of the
#                 copy's bandwidth at N = 4096, no slower than cuBLAS + elementwise at N = 1024); then the
#                 GEMVs with other block shapes than launch.py's, to choose its defaults from
#   bench.txt     bench.json     N=1024 L=32 B=32 float32: eager and graph steps of sequential and Leapfrog
#                 k=1,2,4, PyTorch eager and its CUDA graph, and the graph-mode target ratios (vs PyTorch
#                 eager >= 3x, vs PyTorch's CUDA graph >= 1.5x, vs graph-mode sequential >= 1.3x, within 2x
#                 of the bytes floor)
#   fused.txt     fused.json     the same with the SGD update fused into (7)
#
# Needs python3 with numpy, CuPy and torch; the checkout is imported through PYTHONPATH (nothing is
# installed).
set -uo pipefail  # no -e: a failed part is recorded in summary.txt and the next part runs
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=${OUT:-$here/results/graph-$(date -u +%Y%m%dT%H%M%SZ)}
python=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$repo" || exit 2
summary=$out/summary.txt
# shellcheck source=/dev/null
. "$here/parts.sh"  # part, and the summary's first lines
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi failed"
    "$python" -c "import platform, numpy; print('python', platform.python_version(), '| numpy', numpy.__version__)"
    "$python" -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -1
    "$python" -c "import torch; print('torch', torch.__version__, '| cuda', torch.version.cuda)" 2>&1 | tail -1
} | tee -a "$summary"

bench=("$python" -m leapfrog_gpu.tools.bench --backend cupy --dtype float32 --sizes 1024 --layers 32 --batch 32
       --k "1,2,4" --graph --repeats 30 --warmup 5)
part "GPU tests of graph mode" 150 "$out/tests.txt" "$python" -m pytest -m gpu -q -p no:cacheprovider \
    tests/test_cupy_graph.py tests/test_chain_kernels.py tests/test_graph_tools.py
part "chain kernels vs cuBLAS" 90 "$out/kernels.txt" "$python" profiling/kernels.py --backend cupy \
    --shapes 1024:1024:1,1024:1024:32,4096:4096:1,4096:4096:32,1000:999:33 \
    --gemv-blocks 32x4:16x32,32x8:32x16,64x4:8x128,16x16:4x128 --json "$out/kernels.json"
part "bench --graph" 120 "$out/bench.txt" "${bench[@]}" --json "$out/bench.json"
part "bench --graph --fused" 90 "$out/fused.txt" "${bench[@]}" --fused --no-torch --json "$out/fused.json"
echo "results in $out" | tee -a "$summary"
