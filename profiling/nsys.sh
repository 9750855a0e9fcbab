#!/usr/bin/env bash
# Nsight Systems trace of training steps, its SQLite export, and the stream-overlap report:
#
#   nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop \
#       --force-overwrite=true -o "$out/trace" python profiling/trace_steps.py "$@"
#   nsys export --type=sqlite --force-overwrite=true -o "$out/trace.sqlite" "$out/trace.nsys-rep"
#   python profiling/overlap.py "$out/trace.sqlite"
#
# Usage: profiling/nsys.sh [trace_steps.py options, e.g. --sizes 1024 --layers 32 --batch 32 --k 2]
# Writes trace.nsys-rep, trace.sqlite and overlap.txt into $OUT (default profiling/results).
# The capture range holds only the steps trace_steps.py brackets with cudaProfilerStart/Stop, after
# its warm-up. PYTHON picks the interpreter (default python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/results}
python=${PYTHON:-python3}
if ! command -v nsys >/dev/null; then
    echo "nsys.sh: nsys is not on PATH (install Nsight Systems)" >&2
    exit 2
fi
mkdir -p "$out"
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"
nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop \
    --force-overwrite=true -o "$out/trace" "$python" "$here/trace_steps.py" "$@"
nsys export --type=sqlite --force-overwrite=true -o "$out/trace.sqlite" "$out/trace.nsys-rep"
"$python" "$here/overlap.py" "$out/trace.sqlite" | tee "$out/overlap.txt"
