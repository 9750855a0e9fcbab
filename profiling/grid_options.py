"""What the grid measurements of ``profiling/`` share: the options of a grid of networks ``[N] * L`` at batch
sizes B on a backend, timed in repeats, reading them with ``--json FILE`` checked before anything is measured,
the grid's networks in turn and the records written to ``--json``."""

from leapfrog_gpu.core.functions import ACTIVATIONS, DTYPES
from leapfrog_gpu.tools.bench import runner
from leapfrog_gpu.tools.cli import Parser, integer, integers, output_refusal, parse_args_on_a_backend, path


def grid_parser(prog, doc, backend_help="", batch_help="batch sizes B", sizes=(256, 1024), layers=(8, 16),
                warmup_help="untimed runs first", json_help="write the records to FILE"):
    """A parser of ``prog`` (its description ``doc``'s first paragraph) with ``--backend``, ``--dtype``,
    ``--sizes``, ``--layers`` (by default ``sizes`` and ``layers``), ``--batch``, ``--activation``, ``--repeats``,
    ``--warmup`` and ``--json``; ``backend_help``, ``batch_help``, ``warmup_help`` and ``json_help`` say what the
    script means by them."""
    p = Parser(prog=prog, description=doc.split("\n\n")[0])
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto",
                   help=f"auto: cupy when a CUDA device is usable, else numpy (default auto){backend_help}")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="(default float32)")
    p.add_argument("--sizes", type=integers(1, "size"), default=list(sizes), metavar="N[,N...]",
                   help=f"widths N (default {','.join(map(str, sizes))})")
    p.add_argument("--layers", type=integers(2, "layer count"), default=list(layers), metavar="L[,L...]",
                   help="layers L, the input layer included, each network [N] * L "
                        f"(default {','.join(map(str, layers))})")
    p.add_argument("--batch", type=integers(1, "batch size"), default=[1, 64], metavar="B[,B...]",
                   help=f"{batch_help} (default 1,64)")
    p.add_argument("--activation", choices=tuple(ACTIVATIONS), default="sigmoid", help="(default sigmoid)")
    p.add_argument("--repeats", type=integer(1), default=20, metavar="N", help="(default 20)")
    p.add_argument("--warmup", type=integer(0), default=2, metavar="N", help=f"{warmup_help} (default 2)")
    p.add_argument("--json", type=path, metavar="FILE", help=json_help)
    return p


def parse(p, argv):
    """``p``'s arguments from ``argv`` on a backend that can run them; exit status 2 with one line where ``--json
    FILE`` cannot be written (``output_refusal``)."""
    args = parse_args_on_a_backend(p, argv)
    if args.json and (why := output_refusal("--json", args.json)):
        p.error(why)
    return args


def networks(args):
    """``(sizes, batch)`` of each network of the grid: ``[N] * L`` at B for each N, L and B of the options in turn."""
    return [([n] * layers, batch) for n in args.sizes for layers in args.layers for batch in args.batch]


def write(args, command, key, records):
    """``records`` under ``key`` in ``--json`` FILE, if given, after the header of ``command`` on ``--backend``; a
    script that writes them anew after each network keeps what it measured when stopped later (sizes too large,
    Ctrl-C)."""
    if args.json:
        runner.write_json(args.json, {**runner.header(command, args.backend), key: records})
