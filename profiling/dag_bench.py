"""Forward solvers and DAG backward schedules against the sequential order, on the CPU: its standard grid.

    python profiling/dag_bench.py --repeats 7                # N 16,64,256  D 8,32,128  B 1,8: about a minute
    python profiling/dag_bench.py --sizes 16 --depths 8 --batch 1

``leapfrog-bench --model dag`` on the NumPy backend (``leapfrog_gpu.tools.bench.dag``: the networks,
the rows and what they mean), every option of it taken as it is; the records go to
``results/dag_bench_cpu_<UTC date>.json`` unless ``--json`` says otherwise.
"""

import datetime
import sys
from pathlib import Path

from leapfrog_gpu.tools.bench import command

HERE = Path(__file__).resolve().parent


def main(argv=None):
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    out = HERE / "results" / f"dag_bench_cpu_{date}.json"
    return command.main(["--model", "dag", "--backend", "numpy", "--json", str(out),
                         *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
