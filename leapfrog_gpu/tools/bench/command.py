"""``leapfrog-bench``: the command line, handed to the suite of its ``--model`` (``mlp``, ``rnn``), each with
options of its own, run by ``runner``. Its exit statuses: ``runner.exit_statuses``, listed by ``--help``."""

import sys

from ..cli import Parser
from . import mlp, rnn, runner

SUITES = {"mlp": mlp, "rnn": rnn}


def main(argv=None):
    """Run ``leapfrog-bench``; return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    model = Parser(prog=mlp.PROG, add_help=False)  # a --model without its value: one line, as every bad option
    model.add_argument("--model", default="mlp")
    return runner.main(SUITES.get(model.parse_known_args(argv)[0].model, mlp), argv)
