#!/usr/bin/env bash
# Fill build/wheels (WHEELS) with the wheels device_check.sh installs without a package index, on a GPU
# machine whose image lacks them (profiling/gpu-image-packages.txt): scipy-openblas32 (the NumPy backend's
# products; without it they run slower on NumPy's BLAS), nvmath-python with the cuda-core, cuda-pathfinder
# and cuda-bindings it needs at least (the chain's cuBLAS in graph mode; cuda-bindings also for graphs with
# node priorities), threadpoolctl and tqdm (imported by the package and the benches), pytest-timeout (a hung
# GPU test fails alone). Run it where pip reaches an index; build/ is ignored by git, so the folder travels with
# the working tree only when named among its untracked paths (docs/testing.md).
#
#   bash profiling/fetch_wheels.sh                     # for CPython 3.12 on x86_64 Linux
#   PYTHON_VERSION=3.11 WHEELS=/tmp/wheels bash profiling/fetch_wheels.sh
#
# The versions are those the test extras install (pyproject.toml), pinned so that a rerun fetches the same
# files; they are fetched into a folder of their own, then take the place of the wheels in WHEELS, so that it holds
# one version of each (a WHEELS that holds anything but wheels is refused, left as it is). It must stay under
# LIMIT_MIB: what goes to the GPU machine beside the checkout is kept under 64 MiB, and this folder is all of it.
# device_check.sh installs those the image lacks, and a cuda-* one where the image's is older than nvmath-python
# needs.
set -euo pipefail

if (($#)); then  # it takes no arguments: its settings are the variables above
    [[ $1 == -h || $1 == --help ]] && { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
    echo "fetch_wheels.sh: takes no arguments (got $1): set WHEELS, PYTHON or PYTHON_VERSION instead" >&2
    exit 2
fi

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHEELS=${WHEELS:-$REPO/build/wheels}
PYTHON=${PYTHON:-python3}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
LIMIT_MIB=48
PACKAGES=(scipy-openblas32==0.3.34.481.3 nvmath-python==1.0.1 cuda-core==1.2.2 cuda-pathfinder==1.9.1
          cuda-bindings==13.5.0 threadpoolctl==3.8.0 tqdm==4.70.1 pytest-timeout==2.4.0)
PLATFORMS=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    PLATFORMS+=(--platform "${tag}_x86_64")
done

if [[ -e $WHEELS && ! -d $WHEELS ]]; then
    echo "fetch_wheels.sh: error: WHEELS=$WHEELS is not a folder: give a folder for the wheels" >&2
    exit 2
fi
if [[ -d $WHEELS ]] && find -H "$WHEELS" -mindepth 1 ! \( -maxdepth 1 -type f -name '*.whl' \) | grep -q .; then
    echo "fetch_wheels.sh: error: WHEELS=$WHEELS holds more than wheels, which this script would replace: give a" \
         "folder of its wheels alone, or a new one" >&2
    exit 2
fi
mkdir -p "$(dirname "$WHEELS")"
fetched=$(mktemp -d "$WHEELS.fetching.XXXXXX")  # beside it, on its file system: the wheels are renamed in
trap 'rm -rf "$fetched"' EXIT
if ! "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
        --python-version "$PYTHON_VERSION" "${PLATFORMS[@]}" -d "$fetched" "${PACKAGES[@]}"; then
    echo "fetch_wheels.sh: error: $PYTHON -m pip download failed; $WHEELS is left as it was" >&2
    exit 1
fi
count=$(find "$fetched" -name '*.whl' | wc -l)
if ((count != ${#PACKAGES[@]})); then
    echo "fetch_wheels.sh: error: $count wheels fetched for ${#PACKAGES[@]} packages; $WHEELS is left as it was" >&2
    exit 1
fi
kib=$(du -sk "$fetched" | cut -f1)
if ((kib > LIMIT_MIB * 1024)); then
    echo "fetch_wheels.sh: error: the wheels take $((kib / 1024)) MiB, over $LIMIT_MIB MiB;" \
         "$WHEELS is left as it was" >&2
    exit 1
fi
mkdir -p "$WHEELS"
find -H "$WHEELS" -maxdepth 1 -type f -name '*.whl' -delete
mv "$fetched"/*.whl "$WHEELS"/
ls -1 "$WHEELS"
echo "$count wheels, $((kib / 1024)).$(((kib % 1024) * 10 / 1024)) MiB in $WHEELS (CPython $PYTHON_VERSION)"
