#!/usr/bin/env bash
# The command for a GPU machine: every GPU question answered in two calls of at most 7 minutes each.
#
#   PARTS=first COMMIT=abc1234 OUT=$OUT bash profiling/device_check.sh    # the first call (docs/testing.md)
#   PARTS=second COMMIT=abc1234 OUT=$OUT bash profiling/device_check.sh   # the second
#   PARTS=tests,kernels bash profiling/device_check.sh    # some parts only (keys below), e.g. for a rerun
#   bash profiling/device_check.sh --dry-run     # every part on a CPU, as the GPU image would: under 2 minutes
#
# Parts, in the order they run, each under its own limit (seconds), all of them within BUDGET seconds (default
# the two calls' budgets, 660), so a part that would start too late is recorded as not run. PARTS
# (comma-separated keys; default every part) selects some, the others recorded as not selected; PARTS=first
# (smoke environment headline kernels tests, BUDGET 360) and PARTS=second (model fused memcheck racecheck
# synccheck grid, BUDGET 300) are the two calls. The headline benchmark comes third, after 75 s at most.
#   smoke (smoke, 60)             profiling/smoke.py: CuPy imported, the device named, one kernel of each family
#                                 against its NumPy twin, one eager and one graph step against NumPy's (eager and
#                                 graph bitwise), each line written to summary.txt at once
#   environment (environment, 15) GPU, driver, Python and package versions, the tools on PATH
#   bench headline (headline, 90) leapfrog-bench N=1024 L=32 B=32 float32: sequential, leapfrog k=1,2,4, PyTorch
#                      eager, each eager and as a graph (PyTorch's as a CUDA graph), the graph-mode targets judged
#                      by profiling/verdicts.py (vs PyTorch eager >= 3x, vs its CUDA graph >= 1.5x, vs graph-mode sequential >= 1.3x,
#                      within 2x of the bytes floor), with profiling/bench_timeline.py's --timeline (each stream's
#                      busy time, worker overlap, the Gantt chart)
#   kernel model (model, 45)      profiling/kernel_model.py --card device --json: every kernel's predicted time
#                      from its sm_90 code on this GPU (SMs, clocks, bus from its properties, the bandwidth of a
#                      copy measured now; printed), the step with a graph node's cost measured on graphs of n empty
#                      kernels (printed), computed here where NVRTC and cuobjdump can be imported (the test
#                      extras), else the committed MODEL (an H200's; MODEL_H100 on an H100) is used; the line
#                      says which
#   kernels (kernels, 60)         profiling/kernels.py: our nabla_w kernels against cuBLAS (and their fused SGD and
#                      bias twins), and our chain kernels (2)(3) and (5) against cuBLAS + our elementwise kernel, at
#                      N = 1024 and 4096, B = 1, 32 and 64, GB/s beside a device copy, the GEMV targets judged, then
#                      the GEMVs at the other block shapes of GEMV_BLOCKS, each on its own; the model's prediction
#                      beside each kernel of ours (the card's: H100 or H200), and the measured median over it
#   GPU tests (tests, 120)         python -m pytest -m gpu on the whole-step test modules (FIRST: graph mode, cuBLAS,
#                      NCCL with one rank, the timeline, the commands, the gradients); with PARTS naming tests,
#                      every GPU test (limit 400 s); a test module that cannot be imported (an optional package
#                      missing) is reported and the other tests still run
#   bench fused (fused, 35)       the same network with the SGD update fused into (7), eager and as a graph, with
#                      --timeline, its targets judged too
#   compute-sanitizer (memcheck 60, racecheck 60, synccheck 60)  each on a selection of GPU tests (the count is
#                      shown); skipped, with the reason, where the tool is missing or refuses the device
#   bench grid (grid, 30)         N = 256 and 4096, L = 8 and 32, B = 1 and 32, for the time that is left
#
# Every part appends to files in $OUT (default profiling/results/device_check_<UTC time>) as it goes, so a
# part killed at its limit keeps what it measured. Eight files at most, none in a subfolder:
#   summary.txt         the wheels installed, the imports missing, nvmath's cuBLAS import (its error) and the
#                       CUDA Python versions (in the first seconds), the smoke checks,
#                       the environment, then one line per part: exit status, seconds, limit, notes
#   log.txt             everything the parts printed
#   kernel_model.json   the kernel model, where it was computed here
#   kernels.jsonl       one JSON line per kernel measurement (ours with the model's predicted_us and bound)
#   bench.jsonl         per bench run, a line with its command and machine, then one line per configuration
#   timeline.png  timeline.json  timeline_fused.png      the Gantt charts (and the headline's intervals)
#
# The machine needs python3 (PYTHON) with NumPy, CuPy, pytest and matplotlib (and torch for the PyTorch
# anchors, mpi4py for the NCCL test); the checkout is imported through PYTHONPATH. What such a machine may
# lack (scipy-openblas32, nvmath-python, cuda-core, cuda-pathfinder, cuda-bindings, threadpoolctl, tqdm,
# pytest-timeout) comes as wheels in WHEELS (default build/wheels, filled by profiling/fetch_wheels.sh):
# installed with pip --no-index into scratch folders put first on PYTHONPATH, those the image lacks (or has
# older than nvmath-python needs) only. The imports still missing are listed in the first seconds.
# With --dry-run, what profiling/gpu-image-packages.txt does not name is hidden (listed in summary.txt), and
# `import cupy` gives the CuPy stand-in of tests/harness/standin, which runs our kernels on the CPU
# harness and times with its events: kernels and benches run on it with tiny sizes; where it cannot serve
# (it is no device for the GPU tests or for compute-sanitizer, PyTorch cannot use it), the part collects
# instead of running, or skips, and says so in summary.txt. Every limit and the budget are multiplied by
# LIMIT_SCALE: 1 in a real run, 10 in a dry run, where on a CPU shared with other work they catch a hang only.
# Exit status: 0 when every part exited 0, 2 for an option, BUDGET or LIMIT_SCALE it cannot take, else 1.
set -uo pipefail  # no -e: a failed part is recorded in summary.txt and the next part runs

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)

# Test selections for compute-sanitizer (SANITIZED, GPU half): every kernel once at odd sizes, then the staged
# and reducing kernels at B = 64, the chain's GEMV and staged GEMM among them, each with a leapfrog step.
SANITIZED=(tests/kernels/test_kernels.py tests/kernels/test_chain.py tests/mlp/test_schedules.py)
MEMCHECK='(test_nabla_w or test_fused_update) and 257-33-3- and f32'
MEMCHECK+=' or (test_nabla_b or test_delta_hidden or test_delta_output or test_bias_activation) and 257-3- and f32'
MEMCHECK+=' or test_sgd_update and 257 and 33 and f32 or test_elementwise_grid_stride_loop and f32'
MEMCHECK+=' or (test_forward and tanh-257-33- or test_backward and 257-33-) and f32'
MEMCHECK+=' or bitwise_sequential_on_the_gpu and k2-B7'
SHARED='(test_nabla_w or test_fused_update) and 257-33-64 and f32 or test_nabla_b and 257-64 and f32'
SHARED+=' or (test_forward and tanh-257-33-64 or test_backward and 257-33-64) and f32'
SHARED+=' or bitwise_sequential_on_the_gpu and k2-B7'
# The GEMV block shapes kernels.py compares with the launcher's, forward (lanes x rows) : backward (columns x
# threads), in a dry run too: each must pass launch.chain_launch's checks (tests/tools/test_profiling_scripts.py).
GEMV_BLOCKS=32x4:16x32,32x8:32x256,32x2:8x128,32x16:4x128
# The kernel model for kernels.py where this machine cannot compute it (no NVRTC or cuobjdump: no test extras).
MODEL=profiling/results/kernel_model_cpu_2026-12-05.json
MODEL_H100=profiling/results/kernel_model_h100_cpu_2026-12-05.json
# The GPU tests of whole steps, run before the rest (pytest runs a module named twice once, where first named).
# In a run of every part, these only (77 tests on 2026-12-07, limit 120 s); the kernels' ~950 GPU tests: PARTS=tests.
FIRST=(tests/backends/test_backends.py tests/backends/test_cupy_graph.py tests/backends/test_cublas.py
       tests/parallel/test_parallel.py tests/tools/test_graph_tools.py tests/tools/test_timeline.py
       tests/tools/train/test_train.py tests/mlp/test_mlp.py)

# The two calls on a GPU machine (PARTS=first, PARTS=second), each within 7 minutes with the wheels' install, 11
# minutes together, so that with a start-up of a few minutes both fit 15 of the machine's time if the second follows
# the first at once: the first answers whether it runs at all and the headline, the second the sanitizers, the grid
# and the model. Their limits are the parts' below, summed with a little room.
FIRST_CALL=smoke,environment,headline,kernels,tests FIRST_BUDGET=360
SECOND_CALL=model,fused,memcheck,racecheck,synccheck,grid SECOND_BUDGET=300

# -- the parts (each runs in its own process, under `timeout`) -------------------------------------------

note() {  # note TEXT: added to this part's line in summary.txt
    echo "$*" >>"$NOTE"
}

part_environment() {
    {
        if command -v nvidia-smi >/dev/null; then
            nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
        else
            echo "nvidia-smi: not on PATH"
        fi
        "$PYTHON" - <<'PY' 2>&1
import importlib
import platform

print("python", platform.python_version(), "| numpy", importlib.import_module("numpy").__version__)
try:
    import cupy
    rt = cupy.cuda.runtime
    properties = rt.getDeviceProperties(0)
    name = properties["name"].decode() if isinstance(properties["name"], bytes) else properties["name"]
    print("cupy", getattr(cupy, "__version__", "(no version)"), "| device", name, "| SMs",
          properties.get("multiProcessorCount", "?"), "| CUDA runtime", rt.runtimeGetVersion(), "| driver",
          rt.driverGetVersion())
except Exception as error:  # the stand-in, or no device: say what failed and go on
    print("cupy: not usable as a device:", type(error).__name__, str(error).splitlines()[0] if str(error) else "")
try:
    import torch
    print("torch", torch.__version__, "| CUDA", torch.version.cuda, "| device available", torch.cuda.is_available())
except Exception as error:
    print("torch: not usable:", type(error).__name__, error)
for name in ("mpi4py", "nvtx", "cuda.bindings", "nvmath", "threadpoolctl", "tqdm", "matplotlib", "pytest",
             "pytest_timeout"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "importable"))
    except Exception as error:
        print(name, "missing:", type(error).__name__)
PY
        for tool in nvcc g++ compute-sanitizer ncu nsys; do
            if command -v "$tool" >/dev/null; then
                echo "$tool: $("$tool" --version 2>&1 | grep -m1 -iE 'release|version|g\+\+')"
            else
                echo "$tool: not on PATH"
            fi
        done
    } | tee -a "$SUMMARY"
    [[ -n $DRY ]] && note "dry run: 'import cupy' gives the CPU stand-in (tests/harness/standin)"
    return 0
}

part_gpu_tests() {  # the whole-step tests (FIRST); every GPU test where PARTS names the part
    local modules=("${FIRST[@]}") what="the whole-step tests (FIRST; every GPU test: PARTS=tests)"
    if [[ -n $ALL_TESTS ]]; then
        modules=("${FIRST[@]}" tests) what="every GPU test"
    fi
    if [[ -n $DRY ]]; then
        local listing
        listing=$("$PYTHON" -m pytest --collect-only -q -m gpu -p no:cacheprovider "${modules[@]}" 2>&1)
        local status=$?
        echo "$listing" | tail -3
        note "dry run: $(echo "$listing" | grep -Eo '[0-9]+(/[0-9]+)? tests? collected' || echo 'nothing')," \
            "$what (collected only: they need a CUDA device)"
        return "$status"
    fi
    note "$what"
    local timeout=()
    # 60 s a test: a test may be the first to build some of the ~15 kernel modules, 0.3-4 s each with NVRTC
    "$PYTHON" -c "import pytest_timeout" 2>/dev/null && timeout=(--timeout 60)
    "$PYTHON" -m pytest -m gpu -v --tb=line -p no:cacheprovider --continue-on-collection-errors "${timeout[@]}" \
        "${modules[@]}"
}

part_smoke() {
    "$PYTHON" profiling/smoke.py --summary "$SUMMARY"
}

part_kernel_model() {  # $OUT/kernel_model.json where it can be computed here, else a note naming MODEL
    local probe="import sys; sys.path.insert(0, 'profiling'); import kernel_model; kernel_model.cuobjdump()"
    if ! "$PYTHON" -c "$probe" 2>"$SCRATCH/model.txt"; then
        note "not computed here ($(tail -1 "$SCRATCH/model.txt" | cut -c1-100)): the kernels part uses $MODEL"
        return 0
    fi
    if ! "$PYTHON" profiling/kernel_model.py --card device --json "$SCRATCH/kernel_model.json"; then
        note "failed: the kernels part uses $MODEL"
        return 1
    fi
    mv "$SCRATCH/kernel_model.json" "$OUT/" && note "computed here: kernel_model.json, which the kernels part uses"
}

part_kernels() {
    local model=$OUT/kernel_model.json
    local sizes=(--shapes "1024:1024:1,1024:1024:32,1024:1024:64,4096:4096:1,4096:4096:32,4096:4096:64,1000:999:33")
    [[ -n $DRY ]] && sizes=(--shapes "33:17:1,20:31:5,1024:1024:1" --repeats 1 --launches 2)  # smaller, same blocks
    if [[ -e $model ]]; then
        note "predictions from kernel_model.json, computed here"
    else
        local committed=$MODEL
        if command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null |
            grep -q H100; then
            committed=$MODEL_H100
        fi
        model=$REPO/$committed
        note "predictions from the committed $committed"
    fi
    "$PYTHON" profiling/kernels.py --backend cupy "${sizes[@]}" --gemv-blocks "$GEMV_BLOCKS" \
        --jsonl "$OUT/kernels.jsonl" --model "$model"
}

# The headline network (a tiny one in a dry run), eager and as a graph.
headline() {
    if [[ -z $DRY ]]; then
        HEADLINE=(--backend cupy --dtype float32 --sizes 1024 --layers 32 --batch 32 --k "1,2,4" --graph --repeats 30
                  --warmup 5)
    else
        HEADLINE=(--backend cupy --dtype float32 --sizes 32 --layers 5 --batch 3 --k "1,2,4" --graph --repeats 3
                  --warmup 1)
    fi
}

part_bench_headline() {
    local torch=() status
    headline
    if [[ -n $DRY ]]; then
        torch=(--no-torch)
        note "no PyTorch anchor in a dry run: PyTorch cannot use the CuPy stand-in"
    fi
    "$PYTHON" profiling/bench_timeline.py "${HEADLINE[@]}" "${torch[@]}" --jsonl "$OUT/bench.jsonl" \
        --timeline "$OUT/timeline.png"
    status=$?
    "$PYTHON" profiling/verdicts.py "$OUT/bench.jsonl"  # graph mode's targets, on the run just appended
    return "$status"
}

part_bench_fused() {
    local status
    headline
    "$PYTHON" profiling/bench_timeline.py "${HEADLINE[@]}" --fused --no-torch --jsonl "$OUT/bench.jsonl" \
        --timeline "$SCRATCH/timeline_fused.png"
    status=$?
    "$PYTHON" profiling/verdicts.py "$OUT/bench.jsonl"
    cp "$SCRATCH/timeline_fused.png" "$OUT/" 2>/dev/null  # its intervals stay out: eight files at most
    return "$status"
}

part_sanitizer() {  # part_sanitizer TOOL SELECTION
    local tool=$1 selection=$2 count
    count=$("$PYTHON" -m pytest --collect-only -q -m gpu -p no:cacheprovider "${SANITIZED[@]}" -k "$selection" 2>&1 |
        grep -Eo '^[0-9]+' | tail -1)
    echo "$tool: ${count:-0} tests selected"
    if ((${count:-0} == 0)); then
        note "the selection selects no test: fix it in $(basename "$SELF")"
        return 1
    fi
    if [[ -n $DRY ]]; then
        note "dry run: ${count} tests selected, not run (compute-sanitizer needs a CUDA device)"
        return 0
    fi
    if ! command -v compute-sanitizer >/dev/null; then
        note "skipped: compute-sanitizer is not on PATH (${count} tests selected)"
        return 0
    fi
    if [[ ! -e $SCRATCH/sanitizer_probe.txt ]]; then  # once: does it accept this device?
        compute-sanitizer --tool memcheck --error-exitcode 1 "$PYTHON" -c \
            "import cupy; assert int(cupy.arange(4).sum()) == 6" >"$SCRATCH/sanitizer_probe.txt" 2>&1 ||
            echo "probe failed, exit $?" >>"$SCRATCH/sanitizer_probe.txt"
    fi
    if grep -qE 'Device not supported|probe failed' "$SCRATCH/sanitizer_probe.txt"; then
        cat "$SCRATCH/sanitizer_probe.txt"
        note "skipped: compute-sanitizer refused the device" \
            "($(grep -m1 -E 'not supported|rror' "$SCRATCH/sanitizer_probe.txt" | cut -c1-120))"
        return 0
    fi
    note "${count} tests"
    compute-sanitizer --tool "$tool" --error-exitcode 1 --target-processes all "$PYTHON" -m pytest -m gpu -q \
        -p no:cacheprovider "${SANITIZED[@]}" -k "$selection"
}

part_bench_grid() {
    local grid=(--sizes "256,4096" --layers "8,32" --batch "1,32" --k "1,2,4" --repeats 10)
    [[ -n $DRY ]] && grid=(--sizes "16,24" --layers 3 --batch "1,2" --k 2 --repeats 2 --warmup 0)
    "$PYTHON" -m leapfrog_gpu.tools.bench --backend cupy "${grid[@]}" --no-torch --jsonl "$OUT/bench.jsonl"
}

# -- running them -----------------------------------------------------------------------------------------

# part NAME LIMIT FUNCTION [ARGS...]: run FUNCTION in a new process under LIMIT times LIMIT_SCALE seconds (or what
# is left of the budget), its output to the console and log.txt; append NAME's exit status, time and notes to
# summary.txt.
part() {
    local name=$1 limit=$((${2} * ${LIMIT_SCALE:-1})) left started status seconds line
    shift 2
    if ! selected "$name"; then
        echo "$name: not selected (PARTS=$PARTS)" >>"$SUMMARY"
        return
    fi
    left=$((DEADLINE - SECONDS))
    if ((left < limit)); then limit=$left; fi
    if ((left < 5)); then
        echo "$name: not run: ${left} s of the ${BUDGET} s budget left" >>"$SUMMARY"
        FAILED=1
        return
    fi
    echo "== $name (limit ${limit} s)" | tee -a "$LOG"
    : >"$NOTE"
    started=$EPOCHREALTIME
    timeout -k 5 "$limit" bash "$SELF" --run "$@" 2>&1 | tee -a "$LOG"
    status=${PIPESTATUS[0]}
    seconds=$(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    line="$name: exit $status, $seconds s (limit $limit s)"
    if ((status == 124 || status == 137)); then
        line+="; killed at its limit, what it wrote is kept"
    fi
    while IFS= read -r text; do line+="; $text"; done <"$NOTE"
    echo "$line" | tee -a "$SUMMARY"
    ((status == 0)) || FAILED=1
}

# The key of each part in PARTS, by its name.
declare -A KEYS=([smoke]=smoke [environment]=environment ["bench headline"]=headline ["kernel model"]=model
                 [kernels]=kernels ["GPU tests"]=tests ["bench fused"]=fused ["compute-sanitizer memcheck"]=memcheck
                 ["compute-sanitizer racecheck"]=racecheck ["compute-sanitizer synccheck"]=synccheck
                 ["bench grid"]=grid)

selected() {  # selected NAME: whether PARTS (empty: every part) names the part NAME (or names no key at all)
    local key=${KEYS[$1]:-}
    [[ -z ${PARTS:-} || -z $key || ,$PARTS, == *,$key,* ]]
}

check_parts() {  # PARTS names keys only; exit 2 naming them otherwise
    local key known=" ${KEYS[*]} "
    for key in ${PARTS//,/ }; do
        if [[ $known != *" $key "* ]]; then
            echo "device_check.sh: error: PARTS names '$key'; the parts are: smoke environment headline model" \
                "kernels tests fused memcheck racecheck synccheck grid (or PARTS=first, PARTS=second)" >&2
            exit 2
        fi
    done
}

# Wheels of what a GPU machine may lack (profiling/fetch_wheels.sh fills WHEELS): those whose module this
# Python cannot import, or whose image version is older than nvmath-python needs (NVMATH_NEEDS), are
# installed, without an index, into a folder put first on PYTHONPATH, before anything imports them; what the
# image has is otherwise left as it is. In a dry run a wheel this Python cannot take (another CPython's) is stood in
# for by this machine's own copy, which the hiding then spares, so that the run takes the path the wheel opens there.
NVMATH_NEEDS="cuda_core=0.5.0 cuda_pathfinder=1.5.1 cuda_bindings=13.0.1"  # nvmath-python 1.0's requirements
install_wheels() {
    local wheels=${WHEELS:-$REPO/build/wheels} wheel chosen=() names=() modules=()
    compgen -G "$wheels/*.whl" >/dev/null || return 0
    for wheel in "$wheels"/*.whl; do
        local name module minimum why
        name=$(basename "$wheel" | cut -d- -f1)
        case $name in
            nvmath_python) module=nvmath ;;
            cuda_core | cuda_bindings | cuda_pathfinder) module=cuda.${name#cuda_} ;;
            *) module=$name ;;
        esac
        minimum=$(tr ' ' '\n' <<<"$NVMATH_NEEDS" | sed -n "s/^$name=//p")
        if why=$("$PYTHON" - "$module" "$name" "$minimum" <<'PY' 2>/dev/null
import importlib.metadata
import importlib.util
import re
import sys

module, name, minimum = sys.argv[1:]
try:
    found = importlib.util.find_spec(module) is not None
except (ImportError, ValueError):
    found = False
if not found:
    sys.exit(0)
if minimum:
    try:
        have = importlib.metadata.version(name.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        have = "0"
    numbers = [tuple(int(part) for part in re.findall(r"\d+", version)[:3]) for version in (have, minimum)]
    if numbers[0] < numbers[1]:
        print(f" (the image's {have} < {minimum})")
        sys.exit(0)
sys.exit(1)
PY
        ); then
            chosen+=("$wheel") names+=("$name$why") modules+=("$module")
        fi
    done
    if ((${#chosen[@]} == 0)); then
        echo "wheels: none needed from $wheels (every module imports)"
        return 0
    fi
    local i installed=() failed=() stood_in=()
    for i in "${!chosen[@]}"; do  # each in a folder of its own: one this Python cannot take stops no other
        local target=$SCRATCH/site/${names[i]%% *}
        if "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$target" \
            "${chosen[i]}" >"$SCRATCH/pip.txt" 2>&1; then
            PYTHONPATH="$target:$PYTHONPATH" installed+=("${names[i]}")
        else
            failed+=("${names[i]} ($(grep -m1 ERROR "$SCRATCH/pip.txt" || tail -1 "$SCRATCH/pip.txt"))")
            if [[ -n ${DRY:-} && " ${LEAPFROG_HIDDEN:-} " == *" ${modules[i]} "* ]]; then
                LEAPFROG_HIDDEN=$(tr ' ' '\n' <<<"$LEAPFROG_HIDDEN" | grep -vxF "${modules[i]}" | paste -sd ' ')
                stood_in+=("${modules[i]}")
            fi
        fi
    done
    echo "wheels: installed from $wheels: ${installed[*]:-none}${failed:+; pip install --no-index failed: ${failed[*]}}"
    ((${#stood_in[@]} == 0)) ||
        echo "dry run: this machine's own ${stood_in[*]} stands in for the wheels it cannot take"
}

missing_imports() {  # one line: what the parts import that this Python cannot, in its first seconds
    "$PYTHON" - <<'PY'
import importlib.util

names = ("numpy", "cupy", "cuda.bindings", "cuda.core", "cuda.pathfinder", "nvmath", "scipy_openblas32",
         "threadpoolctl", "tqdm", "pytest", "pytest_timeout", "matplotlib", "torch", "mpi4py", "nvtx")
missing = []
for name in names:
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        missing.append(name)
print("imports missing:", " ".join(missing) if missing else "none")
PY
}

first_report() {  # the chain's cuBLAS import (its real error), the CUDA Python versions and where each came from
    timeout -k 5 60 "$PYTHON" - <<'PY' 2>&1
import importlib
import os

scratch = os.path.join(os.environ.get("SCRATCH", "/nonexistent"), "site")


def where(module):
    path = os.path.realpath(getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), ""))
    return "carried wheel" if path.startswith(os.path.realpath(scratch)) else os.path.dirname(os.path.dirname(path))


try:
    from nvmath.bindings import cublas  # noqa: F401 - what CupyBackend's chain needs in graph mode
    print("nvmath.bindings.cublas: imports")
except Exception as error:  # noqa: BLE001 - the real error, whole: a version clash shows here
    print("nvmath.bindings.cublas: does not import:", f"{type(error).__name__}: {error}".replace("\n", " | ")[:600])
versions = []
for name in ("cupy", "cuda.core", "cuda.pathfinder", "cuda.bindings", "nvmath", "scipy_openblas32"):
    try:
        module = importlib.import_module(name)
        versions.append(f"{name} {getattr(module, '__version__', '?')} ({where(module)})")
    except Exception as error:  # noqa: BLE001
        versions.append(f"{name} missing ({type(error).__name__}: {str(error)[:120]})")
try:
    import cupy

    versions.append(f"driver {cupy.cuda.runtime.driverGetVersion()}, runtime {cupy.cuda.runtime.runtimeGetVersion()}")
except Exception as error:  # noqa: BLE001
    versions.append(f"driver unknown ({type(error).__name__}: {str(error)[:120]})")
print("versions:", " | ".join(versions))
PY
}

# A dry run sees what the GPU image has: every module of an installed distribution that
# profiling/gpu-image-packages.txt does not name is hidden from this machine's site-packages (a wheel carried
# in WHEELS still installs, as there), and nvmath is absent altogether, the stand-in's too, where no real one
# imports. Sets and exports LEAPFROG_HIDDEN and LEAPFROG_HIDDEN_FROM; the hiding is profiling/image/.
hide_what_the_image_lacks() {
    local lists
    lists=$("$PYTHON" "$REPO/profiling/image_env.py" "$REPO/profiling/gpu-image-packages.txt") || exit 2
    LEAPFROG_HIDDEN=$(sed -n 1p <<<"$lists") LEAPFROG_HIDDEN_FROM=$(sed -n 2p <<<"$lists") LEAPFROG_ABSENT=
    export LEAPFROG_HIDDEN LEAPFROG_HIDDEN_FROM LEAPFROG_ABSENT
    PYTHONPATH="$REPO/profiling/image:$PYTHONPATH"
    echo "dry run: hidden, not on profiling/gpu-image-packages.txt: ${LEAPFROG_HIDDEN:-nothing}"
}

main() {
    DRY=
    if (($# > 1)); then
        echo "device_check.sh: error: one option at most (got $*): --dry-run, --help or nothing" >&2
        exit 2
    fi
    case ${1:-} in
        -h | --help) sed -n '2,/^set -/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        --dry-run) DRY=1 ;;
        "") ;;
        *) echo "device_check.sh: error: unknown option ${1}; use --dry-run, --help or nothing" >&2; exit 2 ;;
    esac
    if [[ -n ${BUDGET:-} && ! $BUDGET =~ ^[1-9][0-9]*$ ]]; then  # a leading 0 is octal to bash
        echo "device_check.sh: error: BUDGET=$BUDGET: give whole seconds, such as BUDGET=300" >&2
        exit 2
    fi
    if [[ -n ${LIMIT_SCALE:-} && ! $LIMIT_SCALE =~ ^[1-9][0-9]*$ ]]; then
        echo "device_check.sh: error: LIMIT_SCALE=$LIMIT_SCALE: give a whole factor >= 1, such as LIMIT_SCALE=2" >&2
        exit 2
    fi
    if [[ -n $DRY ]]; then
        OUT=${OUT:-$(mktemp -d)}
    else
        OUT=${OUT:-$REPO/profiling/results/device_check_$(date -u +%Y%m%dT%H%M%SZ)}
    fi
    PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
    PYTHON=${PYTHON:-python3}
    PARTS=${PARTS:-}
    ALL_TESTS=
    [[ ,$PARTS, == *,tests,* ]] && ALL_TESTS=1
    case $PARTS in  # one of the two calls (docs/testing.md)
        first) PARTS=$FIRST_CALL BUDGET=${BUDGET:-$FIRST_BUDGET} ;;
        second) PARTS=$SECOND_CALL BUDGET=${BUDGET:-$SECOND_BUDGET} ;;
    esac
    check_parts
    TESTS_LIMIT=120  # the whole-step tests (FIRST); all the GPU tests when PARTS names them
    [[ -n $ALL_TESTS ]] && TESTS_LIMIT=400
    [[ -n $DRY ]] && LIMIT_SCALE=${LIMIT_SCALE:-10}  # a dry run shares a CPU: its limits only catch a hang
    LIMIT_SCALE=${LIMIT_SCALE:-1}
    BUDGET=${BUDGET:-$((FIRST_BUDGET + SECOND_BUDGET))}
    BUDGET=$((BUDGET * LIMIT_SCALE))
    DEADLINE=$((SECONDS + BUDGET))
    mkdir -p "$OUT" || exit 2
    OUT=$(cd "$OUT" && pwd)
    SCRATCH=$(mktemp -d)
    trap 'rm -rf "$SCRATCH"' EXIT
    SUMMARY=$OUT/summary.txt LOG=$OUT/log.txt NOTE=$SCRATCH/note.txt FAILED=0
    export DRY OUT PARTS ALL_TESTS PYTHON PYTHONPATH SCRATCH SUMMARY NOTE PYTHONUNBUFFERED=1 MPLBACKEND=Agg
    cd "$REPO" || exit 2
    local commit=${COMMIT:-}
    if [[ -z $commit ]]; then
        commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null) || commit="unknown (no git here: set COMMIT)"
        [[ -n $(git -C "$REPO" status --porcelain 2>/dev/null) ]] && commit+=" with uncommitted changes"
    fi
    echo "device_check.sh${DRY:+ --dry-run}: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit," \
        "budget $BUDGET s${PARTS:+, PARTS=$PARTS}" | tee "$SUMMARY" >"$LOG"
    : >"$SCRATCH/hidden.txt"
    [[ -n $DRY ]] && hide_what_the_image_lacks >"$SCRATCH/hidden.txt"  # not in a subshell: they set PYTHONPATH
    install_wheels >"$SCRATCH/wheels.txt"
    if [[ -n $DRY ]]; then  # the stand-in first; its nvmath only where a real one imports, as on the image
        "$PYTHON" -c "import nvmath.bindings.cublas" 2>/dev/null || LEAPFROG_ABSENT=nvmath
        PYTHONPATH="$REPO/tests/harness/standin:$REPO/tests/harness:$PYTHONPATH"
    fi
    { cat "$SCRATCH/hidden.txt" "$SCRATCH/wheels.txt"; missing_imports; first_report; } | tee -a "$SUMMARY" "$LOG"
    part "smoke" 60 part_smoke  # first: does anything run at all
    part "environment" 15 part_environment
    part "bench headline" 90 part_bench_headline  # the headline next: nothing before it can starve it
    part "kernel model" 45 part_kernel_model  # NVRTC and cuobjdump of every kernel, their caches cold there
    part "kernels" 60 part_kernels
    part "GPU tests" "$TESTS_LIMIT" part_gpu_tests
    part "bench fused" 35 part_bench_fused
    part "compute-sanitizer memcheck" 60 part_sanitizer memcheck "$MEMCHECK"
    part "compute-sanitizer racecheck" 60 part_sanitizer racecheck "$SHARED"
    part "compute-sanitizer synccheck" 60 part_sanitizer synccheck "$SHARED"
    part "bench grid" 30 part_bench_grid
    echo "total: $SECONDS s; results in $OUT" | tee -a "$SUMMARY"
    exit "$FAILED"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    if [[ ${1:-} == --run ]]; then  # one part, in the process `part` started
        shift
        "$@"
        exit
    fi
    main "$@"
fi
