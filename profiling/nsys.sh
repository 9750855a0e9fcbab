#!/usr/bin/env bash
# Nsight Systems trace of training steps (leapfrog-train's --profile-steps window), its SQLite export,
# and the stream-overlap report:
#
#   nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop \
#       --force-overwrite=true -o "$out/trace" python -m leapfrog_gpu --backend cupy ... --profile-steps 20:30
#   nsys export --type=sqlite --force-overwrite=true -o "$out/trace.sqlite" "$out/trace.nsys-rep"
#   python profiling/overlap.py "$out/trace.sqlite"
#
# Usage: profiling/nsys.sh [leapfrog-train options]. Without options it trains N = 1024, L = 32
# (30 hidden layers), B = 32, float32, Leapfrog(k=2) on the teacher data and captures steps 20..29.
# Options given replace those defaults and must include --backend cupy and --profile-steps A:B.
# Writes trace.nsys-rep, trace.sqlite and overlap.txt into $OUT (default profiling/results).
# PYTHON picks the interpreter (default python3); the checkout is imported through PYTHONPATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/results}
python=${PYTHON:-python3}
if ! command -v nsys >/dev/null; then
    echo "nsys.sh: nsys is not on PATH (install Nsight Systems)" >&2
    exit 2
fi
if (($# == 0)); then
    set -- --backend cupy --data teacher --inputs 1024 --hidden 30x1024 --outputs 1024 --samples 2048 \
        --batch-size 32 --epochs 1 --schedule leapfrog --k 2 --profile-steps 20:30 --quiet
fi
mkdir -p "$out"
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"
export LEAPFROG_NVTX=1  # NVTX ranges on even if nsys's injection variable is not seen (leapfrog_gpu.backends.annotate)
nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop \
    --force-overwrite=true -o "$out/trace" "$python" -m leapfrog_gpu "$@"
nsys export --type=sqlite --force-overwrite=true -o "$out/trace.sqlite" "$out/trace.nsys-rep"
"$python" "$here/overlap.py" "$out/trace.sqlite" | tee "$out/overlap.txt"
