"""What the grid measurements of ``profiling/`` share: the options of a grid of networks ``[N] * L`` at batch
sizes B on a backend, and reading them with ``--json FILE``'s folder checked before anything is measured."""

import os

from leapfrog_gpu.core.functions import DTYPES
from leapfrog_gpu.tools.cli import Parser, integers, parse_args_on_a_backend


def grid_parser(prog, doc, backend_help="", batch_help="batch sizes B", sizes=(256, 1024), layers=(8, 16)):
    """A parser of ``prog`` (its description ``doc``'s first paragraph) with ``--backend``, ``--dtype``,
    ``--sizes``, ``--layers`` (by default ``sizes`` and ``layers``) and ``--batch``; ``backend_help`` and
    ``batch_help`` add what the script means."""
    p = Parser(prog=prog, description=doc.split("\n\n")[0])
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto",
                   help=f"auto: cupy when a CUDA device is usable, else numpy (default auto){backend_help}")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
    p.add_argument("--sizes", type=integers(1, "size"), default=list(sizes), metavar="N[,N...]",
                   help=f"widths N (default {','.join(map(str, sizes))})")
    p.add_argument("--layers", type=integers(2, "layer count"), default=list(layers), metavar="L[,L...]",
                   help=f"layers L, the input layer included, each network [N] * L (default {','.join(map(str, layers))})")
    p.add_argument("--batch", type=integers(1, "batch size"), default=[1, 64], metavar="B[,B...]",
                   help=f"{batch_help} (default 1,64)")
    return p


def parse(p, argv):
    """``p``'s arguments from ``argv`` on a backend that can run them; exit status 2 with one line where the
    folder of ``--json FILE`` does not exist."""
    args = parse_args_on_a_backend(p, argv)
    folder = os.path.dirname(os.path.abspath(args.json or "."))
    if not os.path.isdir(folder):
        p.error(f"--json {args.json}: the folder {folder} does not exist")
    return args
