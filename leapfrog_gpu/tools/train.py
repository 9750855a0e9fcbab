"""``leapfrog-train``: train an MLP by SGD under the leapfrog (or sequential) schedule.

    leapfrog-train                                        # digits, 4x128 tanh, Leapfrog(k=2), 30 epochs
    leapfrog-train --data mnist --data-dir ~/mnist --hidden 6x256 --epochs 10 --checkpoint-dir run1
    leapfrog-train --checkpoint-dir run1 --resume --epochs 20
    leapfrog-train --data teacher --inputs 1024 --hidden 8x1024 --outputs 1024 --batch-size 1
    mpiexec -n 2 leapfrog-train --batch-size 16                  # data-parallel: 16 samples per rank

A progress bar per epoch (on a terminal), one summary line per epoch, ``--metrics FILE`` for one JSON
line per epoch, and after each epoch an atomic checkpoint (``leapfrog_gpu.tools.checkpoint``).
``--timeline FILE.png`` stamps every launch of a window of steps (``--profile-steps``, default 10:15)
and writes their Gantt chart and FILE.json (``leapfrog_gpu.tools.timeline``).

Under ``mpiexec -n P`` every rank trains on its share of each global batch of B·P samples, the batches
one process would take with ``--batch-size`` B·P (``leapfrog_gpu.parallel``); only rank 0 prints, shows
progress and writes checkpoints and metrics, and every rank resumes from rank 0's checkpoint.

Exit status: 0 done; 2 a bad option, data file or checkpoint (one line on stderr); 3 the loss or, with
``--check-finite``, a gradient became non-finite, or the run diverged (``metrics.Divergence``; the last
checkpoint is left as it was); 130 stopped by Ctrl-C (SIGINT), after a checkpoint of the last completed
step. Under mpiexec an error met by one rank alone ends every rank (``MPI_Abort`` with that status; 4
when a rank waited in vain for the others).
"""

import argparse
import contextlib
import datetime
import hashlib
import json
import math
import os
import shlex
import signal
import sys
import time
import traceback
import warnings

import numpy as np
from tqdm import tqdm

from .. import data_parallel, parallel
from ..backends import collective, get_backend, ops_numpy, to_host
from ..functions import ACTIVATIONS, COSTS, DTYPES
from ..network import MLP
from ..schedules import Leapfrog, Sequential
from . import checkpoint, data
from .cli import Parser, choose_backend, fitted, integer, number, pip_install, plural
from .metrics import Divergence, chance_loss, cost, evaluate
from .profiling import ProfileWindow, parse_steps
from .timeline import describe

PROG = "leapfrog-train"

DEFAULTS = {
    "data": "digits", "data_dir": None, "inputs": 64, "outputs": 10, "samples": 4096,
    "hidden": [128] * 4, "activation": "tanh", "cost": None, "dtype": "float32",
    "epochs": 30, "batch_size": 32, "lr": 0.1, "seed": 0, "schedule": "leapfrog", "k": 2, "fused": False,
    "graph": False, "backend": "auto", "blas_threads": 1, "check_finite": False, "allow_divergence": False,
    "quiet": False, "metrics": None, "checkpoint_dir": None, "resume": False, "profile_steps": None,
    "timeline": None, "bucket_mb": 0.0, "comm_timeout": parallel.DEFAULT_TIMEOUT,
}
"""Every option's default. The digits default reaches about 97 % test accuracy in 30 epochs."""

FIXED = ("data", "inputs", "outputs", "samples", "hidden", "activation", "cost", "dtype", "seed", "batch_size")
"""What a resumed run must keep: it defines the network, the data or the order of the batches."""

RESUMED = FIXED + ("data_dir", "epochs", "lr", "schedule", "k", "fused")
"""What ``--resume`` takes from the checkpoint unless given again; the rest belongs to this run."""

PER_RANK = ("quiet", "metrics", "profile_steps", "timeline")
"""Options that may differ between ranks; every other option must be the same on all of them."""

TIMELINE_STEPS = [10, 15]
"""The window ``--timeline`` records when ``--profile-steps`` is not given: 5 steps after 10 of warm-up."""

LOSS_CHECK_SECONDS = 1.0
"""How often the loss of the latest batch is computed for the progress bar and checked for NaN/Inf
(a synchronization); the loss over the whole training set is computed after every epoch."""


class UsageError(ValueError):
    """A bad option or combination of options: exit status 2."""


class NonFiniteLoss(ArithmeticError):
    """The loss (or, with --check-finite, a gradient) became NaN or Inf: exit status 3."""

    def __init__(self, loss, epoch, step, what=None):
        super().__init__(what or f"the training loss is {loss} after epoch {epoch}, step {step}")
        self.loss, self.epoch, self.step = loss, epoch, step
        self.hint = "try a smaller --lr"  # the command adds the current one and what became of checkpoints


class Diverged(ArithmeticError):
    """The loss is finite, but the run diverged or learns nothing (``metrics.Divergence``): exit status 3."""

    def __init__(self, why, epoch, step):
        super().__init__(f"{why} (epoch {epoch}, step {step})")
        self.hint = "try another --lr"  # the command adds the current one and what became of checkpoints


class Interrupted(Exception):
    """Ctrl-C, taken at the boundary of a step: exit status 130 after a checkpoint."""


SETUP_ERRORS = (UsageError, data.DataError, checkpoint.CheckpointError)
"""A bad option, data file or checkpoint: exit status 2."""


@contextlib.contextmanager
def sigint_between_steps():
    """While active, SIGINT only sets ``flag["stop"]``, so the loop stops between two steps rather than
    inside one (where part of an update could be enqueued); a second SIGINT interrupts at once."""
    flag = {"stop": False}

    def handler(signum, frame):
        if flag["stop"]:
            raise KeyboardInterrupt
        flag["stop"] = True

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave SIGINT as it is
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


# -- options --------------------------------------------------------------------------------------


def parse_hidden(text):
    """Hidden widths from ``"6x128"``, ``"128,64,32"`` or a mix such as ``"2x128,64"``."""
    widths = []
    for part in text.split(","):
        count, x, width = part.strip().rpartition("x")
        try:
            widths += [int(width)] * (int(count) if x else 1)
        except ValueError:
            widths = None
            break
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(
            f"must be widths >= 1 such as 6x128, 128,64,32 or 2x128,64; got {text!r}")
    return widths


def _profile_steps(text):
    try:
        steps = parse_steps(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return [steps.start, steps.stop]


def build_parser():
    """The command line; defaults are left out of the namespace so that ``--resume`` can tell what
    was given (``DEFAULTS`` holds them)."""
    p = Parser(prog=PROG, description="Train a deep MLP whose weight gradients leapfrog the backward chain.",
                argument_default=argparse.SUPPRESS)
    d = DEFAULTS
    group = p.add_argument_group("data")
    group.add_argument("--data", choices=("digits", "mnist", "teacher"),
                       help=f"digits: scikit-learn's 8x8 digits; mnist: local files (--data-dir); teacher: "
                            f"regression on a random deep network (default {d['data']})")
    group.add_argument("--data-dir", metavar="DIR",
                       help="mnist: a folder with the four IDX files (gzipped or not) or one .npz")
    group.add_argument("--inputs", type=integer(1), metavar="N", help=f"teacher: input width (default {d['inputs']})")
    group.add_argument("--outputs", type=integer(1), metavar="N", help=f"teacher: output width (default {d['outputs']})")
    group.add_argument("--samples", type=integer(1), metavar="N",
                       help=f"teacher: training samples, plus a quarter as many test samples (default {d['samples']})")
    group = p.add_argument_group("model and schedule")
    group.add_argument("--hidden", type=parse_hidden, metavar="SPEC",
                       help="hidden widths: 6x128, 128,64,32 or 2x128,64 (default 4x128)")
    group.add_argument("--activation", choices=tuple(ACTIVATIONS), help=f"hidden layers (default {d['activation']})")
    group.add_argument("--cost", choices=tuple(COSTS),
                       help="default cross_entropy (with a sigmoid output) for classification, quadratic "
                            "(with an identity output) for teacher")
    group.add_argument("--dtype", choices=DTYPES, help=f"(default {d['dtype']})")
    group.add_argument("--epochs", type=integer(1), metavar="N", help=f"epochs in all (default {d['epochs']})")
    group.add_argument("--batch-size", type=integer(1), metavar="B",
                       help=f"at most the number of training samples (default {d['batch_size']})")
    group.add_argument("--lr", type=number(0), metavar="ETA",
                       help=f"learning rate: w -= ETA/B * nabla_w (default {d['lr']})")
    group.add_argument("--seed", type=integer(0), metavar="S",
                       help=f"initial parameters and the order of the batches (default {d['seed']})")
    group.add_argument("--schedule", choices=("sequential", "leapfrog"), help=f"(default {d['schedule']})")
    group.add_argument("--k", type=integer(1), metavar="K", help=f"leapfrog worker streams (default {d['k']})")
    group.add_argument("--fused", action="store_true",
                       help="fuse the SGD update into the weight-gradient kernel: fewer bytes, the same formula per "
                            "element (bitwise the unfused result on the GPU; with numpy, at batch size 1 or for layers "
                            f"of at most {ops_numpy.SCRATCH} weights)")
    group.add_argument("--graph", action="store_true",
                       help="run each step as a graph, captured once per batch size (CUDA graphs on the GPU)")
    group.add_argument("--check-finite", action="store_true",
                       help="check every gradient for NaN/Inf before each update and stop (exit 3) without it")
    group.add_argument("--allow-divergence", action="store_true",
                       help=f"go on when the training loss grows past {Divergence.GROWTH:g}x its start, or stays "
                            f"at or above chance level (what a constant output scores) for {Divergence.PATIENCE} "
                            "epochs in a row; without it, such a run stops with exit status 3")
    group.add_argument("--backend", choices=("auto", "numpy", "cupy"),
                       help="auto: cupy when a CUDA device is usable, else numpy (default auto)")
    group.add_argument("--blas-threads", type=integer(1), metavar="N",
                       help="numpy backend: BLAS threads per host stream (default 1: each stream is a thread)")
    group = p.add_argument_group("output and checkpoints")
    group.add_argument("--quiet", action="store_true", help="no progress bar or epoch lines, only the result")
    group.add_argument("--metrics", metavar="FILE", help="write one JSON line per epoch to FILE (appended to on --resume)")
    group.add_argument("--checkpoint-dir", metavar="DIR", help="write DIR/checkpoint.npz after every epoch")
    group.add_argument("--resume", action="store_true",
                       help="continue from the checkpoint in --checkpoint-dir, with its options unless given")
    group.add_argument("--profile-steps", type=_profile_steps, metavar="A:B",
                       help="steps A..B-1: CUDA profiler start/stop (cupy), NVTX ranges, and the --timeline window")
    group.add_argument("--timeline", metavar="FILE.png",
                       help="stamp every launch of the --profile-steps window (default 10:15): busy time per stream, "
                            "worker overlap, a Gantt chart, and FILE.json (needs matplotlib; rank 0 under mpiexec)")
    group = p.add_argument_group("data parallel (under mpiexec -n P; --batch-size is per rank)")
    group.add_argument("--bucket-mb", type=number(0, what="a number of MB"), metavar="MB",
                       help="sum the gradients of consecutive layers together up to MB (default 0: each layer alone)")
    group.add_argument("--comm-timeout", type=number(0, strict=True, what="a number of seconds"), metavar="S",
                       help=f"stop every rank when one waits S seconds for the others (default {d['comm_timeout']:g})")
    return p


def configure(given, saved=None):
    """The run's config from the options ``given`` and, on ``--resume``, the checkpoint's ``saved``."""
    config = dict(DEFAULTS)
    if saved is not None:
        for key in FIXED:
            if key in given and given[key] != saved[key]:
                raise UsageError(
                    f"--{key.replace('_', '-')} {_show(given[key])} differs from the checkpoint's "
                    f"{_show(saved[key])}; drop it to resume, or start a new --checkpoint-dir"
                )
        config.update({key: saved[key] for key in RESUMED})
    config.update(given)
    for key, kind in (("data_dir", "mnist"), ("inputs", "teacher"), ("outputs", "teacher"), ("samples", "teacher")):
        if key in given and config["data"] != kind:
            raise UsageError(f"--{key.replace('_', '-')} applies to --data {kind} only")
    if config["data"] == "mnist" and not config["data_dir"]:
        raise UsageError("--data mnist needs --data-dir DIR (the four MNIST IDX files or one .npz)")
    if config["data"] == "teacher" and config["cost"] == "cross_entropy":
        raise UsageError("--data teacher is a regression task: use --cost quadratic")
    if config["fused"] and config["check_finite"]:
        raise UsageError("--check-finite needs the update after the gradients: drop --fused")
    if config["timeline"] is not None:
        folder = os.path.dirname(os.path.abspath(config["timeline"]))
        if not os.path.isdir(folder):
            raise UsageError(f"--timeline {config['timeline']}: the folder {folder} does not exist")
        if config["graph"]:
            raise UsageError("--timeline stamps every launch of eager steps, and a graph step is one launch: "
                             "drop --graph or --timeline")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError(f"--timeline needs matplotlib: {pip_install('plot')}") from None
    return config


def profile_window(config):
    """The steps ``[A, B)`` of the profiling window: ``--profile-steps``, or with ``--timeline`` alone,
    ``TIMELINE_STEPS``; ``None`` for no window."""
    if config["profile_steps"] is None and config["timeline"] is not None:
        return TIMELINE_STEPS
    return config["profile_steps"]


def _show(value):
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


# -- the run ----------------------------------------------------------------------------------------


class Training:
    """One run: network, data, schedule, and where it stands.

    ``epoch`` epochs are done, plus ``step_in_epoch`` steps of the next; ``step`` counts every step.
    The batches of an epoch are a permutation drawn from ``order``; ``epoch_rng`` is its state before
    that draw, so ``save()`` after any completed step lets a resumed run draw the same permutation and
    skip the steps already done.
    """

    def __init__(self, config, dataset, net, report, state=None):
        self.config, self.data, self.net, self.report = config, dataset, net, report
        fused = config["fused"]
        self.schedule = Leapfrog(config["k"], fused) if config["schedule"] == "leapfrog" else Sequential(fused)
        self.rank, self.ranks = (0, 1) if net.comm is None else (net.comm.rank, net.comm.size)
        self.batch = config["batch_size"] * self.ranks  # the global batch; the network takes its share
        self.eval_batch = max(self.batch, 256)
        self.steps_per_epoch = math.ceil(dataset.x_train.shape[1] / self.batch)
        self.order = np.random.default_rng(config["seed"])
        self.epoch = self.step_in_epoch = self.step = 0
        if state is not None:
            self.epoch, self.step_in_epoch, self.step = state["epoch"], state["step_in_epoch"], state["step"]
            self.order.bit_generator.state = state["rng"]
        self.epoch_rng = self.order.bit_generator.state
        self.divergence = None
        if not config["allow_divergence"]:
            state = state or {}
            start = state.get("start_loss")  # None: a checkpoint written without it; start from here
            if start is None:
                start, _ = evaluate(net, dataset.x_train, dataset.y_train, self.eval_batch)
            chance = chance_loss(net.cost, dataset.y_train)
            self.divergence = Divergence(start, chance, state.get("epochs_at_chance", 0))
        steps = profile_window(config)
        timeline = None if config["timeline"] is None or self.rank > 0 else {
            "path": config["timeline"], "label": f"{PROG} {self.schedule!r}, steps {steps[0]}..{steps[1] - 1}",
            "about": {"program": PROG, "config": config, "sizes": net.sizes, "backend": repr(net.backend),
                      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}}
        self.profile = ProfileWindow(None if steps is None else range(*steps), net.backend, timeline)

    def state(self):
        """What a checkpoint holds besides the parameters (JSON-able)."""
        state = {"sizes": self.net.sizes, "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
                 "step": self.step, "rng": self.epoch_rng, "config": self.config}
        if self.divergence is not None:
            state.update(start_loss=self.divergence.start, epochs_at_chance=self.divergence.epochs_at_chance)
        return state

    def save(self):
        """Checkpoint the last completed step, if there is a ``--checkpoint-dir``."""
        if self.config["checkpoint_dir"] and self.rank == 0:
            checkpoint.save(self.config["checkpoint_dir"], [to_host(w) for w in self.net.weights],
                            [to_host(b) for b in self.net.biases], self.state())

    def run(self):
        """Train until ``epochs`` epochs are done; return the last epoch's metrics (``None`` if none ran).

        Ctrl-C stops the run between two steps: the steps enqueued so far complete, a checkpoint of
        the last one is written, and ``Interrupted`` is raised.
        """
        metrics = None
        try:  # under mpiexec every rank gets Ctrl-C and ends at once: they would stop after different steps
            with sigint_between_steps() if self.ranks == 1 else contextlib.nullcontext({"stop": False}) as interrupt:
                while self.epoch < self.config["epochs"]:
                    metrics = self.run_epoch(interrupt)
        except Interrupted:
            self.net.synchronize()
            self.save()
            raise
        finally:
            self.profile.close()
        return metrics

    def run_epoch(self, interrupt=None):
        """One epoch of SGD steps, then its loss and accuracy, a checkpoint and a report."""
        net, x, y, lr = self.net, self.data.x_train, self.data.y_train, self.config["lr"]
        self.epoch_rng = self.order.bit_generator.state
        permutation = self.order.permutation(x.shape[1])
        first = self.step_in_epoch
        bar = self.report.bar(self.epoch + 1, x.shape[1], initial=min(first * self.batch, x.shape[1]))
        start = checked = time.perf_counter()
        samples = 0
        for s in range(first, self.steps_per_epoch):
            batch = permutation[s * self.batch:(s + 1) * self.batch]
            x_batch, y_batch = x[:, batch], y[:, batch]
            with self.profile.step(self.step):
                net.sgd_step(x_batch, y_batch, lr, self.schedule, graph=self.config["graph"])
            if net.check_finite:
                self._synchronize_checked()
            self.step, self.step_in_epoch = self.step + 1, s + 1
            if interrupt is not None and interrupt["stop"]:
                raise Interrupted
            samples += batch.size
            bar.update(batch.size)
            if self.rank == 0 and time.perf_counter() - checked >= LOSS_CHECK_SECONDS:
                loss = cost(net.cost, to_host(net.feedforward(x_batch)), y_batch) / batch.size
                self._check(loss)
                bar.set_postfix(loss=f"{loss:.4f}")
                checked = time.perf_counter()
        net.synchronize()
        seconds = time.perf_counter() - start
        bar.close()
        train_loss, _ = evaluate(net, x, y, self.eval_batch)
        self._check(train_loss)
        why = None if self.divergence is None else self.divergence.check(train_loss)
        if why:
            raise Diverged(why, self.epoch + 1, self.step)
        test_loss, accuracy = evaluate(net, self.data.x_test, self.data.y_test, self.eval_batch, self.data.classes)
        self.epoch, self.step_in_epoch = self.epoch + 1, 0
        self.epoch_rng = self.order.bit_generator.state
        self.save()
        metrics = {"epoch": self.epoch, "step": self.step, "train_loss": train_loss, "test_loss": test_loss,
                   "test_accuracy": accuracy, "samples_per_s": samples / seconds, "seconds": seconds,
                   "backend": net.backend.name, "schedule": repr(self.schedule), "graph": self.config["graph"]}
        self.report.epoch(metrics, self.config["epochs"])
        return metrics

    def _check(self, loss):
        if not math.isfinite(loss):
            raise NonFiniteLoss(loss, self.epoch + 1, self.step)

    def _synchronize_checked(self):
        """Wait for the step just enqueued; a non-finite gradient (the update was refused) ends the run."""
        try:
            self.net.synchronize()
        except FloatingPointError as error:
            raise NonFiniteLoss(math.nan, self.epoch + 1, self.step,
                                f"at epoch {self.epoch + 1}, step {self.step}: {error}") from None


class Report:
    """What the user sees: progress bars and epoch lines (unless quiet), and the ``--metrics`` file.
    Under mpiexec only rank 0 shows anything."""

    def __init__(self, quiet, metrics_file=None, rank=0):
        self.quiet, self.metrics_file, self.rank = quiet or rank > 0, metrics_file, rank

    def line(self, text, always=False):
        """Print ``text`` unless quiet; ``always``: even when quiet (but on rank 0 only)."""
        if self.rank == 0 and (always or not self.quiet):
            print(text, flush=True)

    def bar(self, epoch, total, initial):
        """A tqdm bar for one epoch, counting samples; shown on a terminal only."""
        return tqdm(total=total, initial=initial, desc=f"epoch {epoch}", unit="sample", unit_scale=True,
                    leave=False, file=sys.stderr, disable=self.quiet or not sys.stderr.isatty())

    def epoch(self, metrics, epochs):
        accuracy = metrics["test_accuracy"]
        self.line(
            f"epoch {metrics['epoch']:>{len(str(epochs))}}/{epochs}  train loss {metrics['train_loss']:.4f}  "
            f"test loss {metrics['test_loss']:.4f}  "
            + ("" if accuracy is None else f"test accuracy {accuracy:.2%}  ")
            + f"{metrics['samples_per_s']:,.0f} samples/s"
        )
        if self.metrics_file is not None:
            self.metrics_file.write(json.dumps(metrics) + "\n")
            self.metrics_file.flush()


# -- the command ------------------------------------------------------------------------------------


def main(argv=None):
    """Run the command; return its exit status."""
    given = vars(build_parser().parse_args(argv))
    try:
        comm = parallel.world(PROG, given.get("comm_timeout", DEFAULTS["comm_timeout"]),
                              round(given.get("bucket_mb", DEFAULTS["bucket_mb"]) * 2**20))
    except RuntimeError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    try:
        return _train(given, comm)
    except KeyboardInterrupt:
        if comm.size > 1:
            return _fail(comm, "interrupted (SIGINT)", 130)
        # while loading or setting up: training keeps Ctrl-C to itself (``Training.run``)
        print(f"{PROG}: interrupted before the first step; nothing was written", file=sys.stderr)
        return 130
    except SETUP_ERRORS as error:
        return _fail(comm, error, 2)
    except (NonFiniteLoss, Diverged) as error:
        return _fail(comm, f"{error}: {error.hint}", 3)
    except Exception as error:
        if comm.size == 1:
            raise
        traceback.print_exc()
        return _fail(comm, f"{type(error).__name__}: {error}", 1)


def _fail(comm, error, status):
    """Report ``error`` on stderr and return ``status``. Under mpiexec, rank 0 alone reports an error
    that every rank met (``Communicator.together``) and every rank returns; an error of one rank is
    reported by that rank, which then ends every rank of the job with ``status``."""
    if comm.size == 1:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    elif getattr(error, "every_rank", False):
        if comm.rank == 0:
            print(f"{PROG}: error: {error}", file=sys.stderr)
    else:
        print(f"{PROG}: error: rank {comm.rank} of {comm.size}: {error}; stopping every rank", file=sys.stderr)
        comm.abort(status)
    return status


def _train(given, comm):
    saved = weights = biases = state = None
    directory = given.get("checkpoint_dir")
    with comm.together(*SETUP_ERRORS):  # rank 0's checkpoint is every rank's
        if given.get("resume") and not directory:
            raise UsageError("--resume needs --checkpoint-dir DIR")
        if comm.rank == 0:
            weights, biases, state = _checkpoint_to_resume(given, directory)
    if given.get("resume"):
        state = comm.bcast(state)
        saved = state["config"]
    with comm.together(*SETUP_ERRORS):
        config = configure(given, saved)
        written_by = saved and saved.get("ranks", 1)  # a checkpoint from before data parallelism: one rank
        if written_by and written_by != comm.size:
            raise UsageError(f"the checkpoint was written by {written_by} rank(s) of --batch-size "
                             f"{saved['batch_size']}; resume it with as many ranks (mpiexec -n {written_by})")
        config["ranks"] = comm.size
        if config["graph"] and comm.size > 1:
            raise UsageError("--graph does not run under mpiexec yet (its graphs hold no sums across ranks); drop it")
        dataset = _load(config)
        samples, batch = dataset.x_train.shape[1], config["batch_size"] * comm.size
        if batch > samples:
            raise UsageError(f"--batch-size {config['batch_size']}{_on_ranks(comm.size)} is larger than the {samples} "
                             f"training samples of {dataset.name}; use at most {samples // comm.size}")
        config["cost"] = config["cost"] or ("cross_entropy" if dataset.classes else "quadratic")
        sizes = [dataset.inputs, *config["hidden"], dataset.outputs]
        steps = math.ceil(samples / batch) * config["epochs"]
        window = profile_window(config)
        if window and window[1] > steps:
            past = f"past this run's last step, {steps - 1} (steps count from 0)"
            if config["profile_steps"]:
                raise UsageError(f"--profile-steps {window[0]}:{window[1]} reaches {past}")
            raise UsageError(f"--timeline records steps {window[0]}..{window[1] - 1} by default, {past}: "
                             "give --profile-steps A:B")
        if directory and comm.rank == 0:
            _writable_dir(directory)
        try:
            backend, why = choose_backend(config["backend"], PROG)
        except ValueError as error:
            raise UsageError(error) from None
    _check_same_options(comm, config, dataset)
    if backend == "cupy" and comm.size > 1:
        collective.use_local_device(comm.local_rank)  # one GPU per process, before any CUDA stream
    options = {"blas_threads": config["blas_threads"]} if backend == "numpy" else {}
    with get_backend(backend, **options) as backend, MLP(
            sizes, activation=config["activation"], cost=config["cost"], dtype=config["dtype"], seed=config["seed"],
            backend=backend, output_activation=None if dataset.classes else "identity",
            check_finite=config["check_finite"], comm=comm) as net:
        if saved is not None:
            if state["sizes"] != sizes:
                raise checkpoint.CheckpointError(f"the checkpoint has sizes {state['sizes']}; the data give {sizes}")
            if comm.rank == 0:
                net.set_parameters(weights, biases)
            data_parallel.broadcast_parameters(net)
        metrics_file = _open_metrics(config["metrics"], append=bool(config["resume"])) if comm.rank == 0 else None
        try:
            report = Report(config["quiet"], metrics_file, comm.rank)
            return _run(config, dataset, net, report, None if saved is None else state, why)
        finally:
            if metrics_file is not None:
                metrics_file.close()


def _on_ranks(ranks):
    """`` on each of P ranks`` under mpiexec, else nothing: what --batch-size means."""
    return "" if ranks == 1 else f" on each of {ranks} ranks"


def _checkpoint_to_resume(given, directory):
    """``(weights, biases, state)`` of the checkpoint that ``--resume`` continues, else Nones."""
    if not given.get("resume"):
        if directory and checkpoint.path_in(directory).exists():
            raise UsageError(f"{checkpoint.path_in(directory)} exists: add --resume to continue it, "
                             "or choose another --checkpoint-dir")
        return None, None, None
    weights, biases, state = checkpoint.load(directory)
    missing = {"epoch", "step_in_epoch", "step", "rng", "config"} - set(state)
    missing |= set(RESUMED) - set(state.get("config", {}))
    if missing:
        raise checkpoint.CheckpointError(f"{checkpoint.path_in(directory)} was not written by {PROG} "
                                         f"(its state lacks {', '.join(sorted(missing))})")
    return weights, biases, state


def _check_same_options(comm, config, dataset):
    """Under mpiexec, refuse to start unless every rank has the same options and the same data (their
    digests are compared)."""
    if comm.size == 1:
        return
    options = {key: value for key, value in config.items() if key not in PER_RANK}
    digest = hashlib.sha256()
    for array in (dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test):
        digest.update(np.ascontiguousarray(array).tobytes())
    options["data_digest"] = digest.hexdigest()
    try:
        comm.check_same("options and data", options)
    except ValueError as error:
        raised = UsageError(f"{error}; start every rank with the same command line")
        raised.every_rank = True
        raise raised from None


def _run(config, dataset, net, report, state, why):
    started = time.perf_counter()
    training = Training(config, dataset, net, report, state)
    if training.epoch >= config["epochs"]:
        report.line(f"nothing to do: the checkpoint has {training.epoch} of {plural(config['epochs'], 'epoch')}",
                    always=True)
        return 0
    mode = " as a graph" if config["graph"] else ""
    report.line(fitted(f"{dataset} | MLP {net.sizes} {config['activation']}, {config['cost']}, {config['dtype']}"))
    report.line(fitted(f"{net.backend.name}{f' ({why})' if why else ''} {training.schedule}{mode} | "
                       f"{plural(config['epochs'], 'epoch')} of {plural(training.steps_per_epoch, 'step')}, "
                       f"batch {config['batch_size']}{_on_ranks(training.ranks)}, lr {config['lr']}"))
    if state is not None:
        report.line(f"resumed at {_position(training)} from {checkpoint.path_in(config['checkpoint_dir'])}")
    if config["profile_steps"] and config["timeline"] is None and net.backend.name != "cupy" and training.rank == 0:
        print(fitted(f"{PROG}: note: the numpy backend has no CUDA profiler; --profile-steps only adds NVTX "
                     "ranges (recorded under nsys, or with LEAPFROG_NVTX=1)"), file=sys.stderr)
    with warnings.catch_warnings():
        # The run checks the loss itself and stops with exit status 3: NumPy's warnings would only repeat it.
        warnings.filterwarnings("ignore", r"(overflow|invalid value) encountered", RuntimeWarning)
        try:
            metrics = training.run()
        except Interrupted:
            directory = config["checkpoint_dir"]
            saved = (f"checkpoint written to {checkpoint.path_in(directory)}; continue with --resume "
                     f"--checkpoint-dir {shlex.quote(str(directory))}" if directory
                     else "no --checkpoint-dir, so nothing was saved")
            print(f"{PROG}: interrupted at {_position(training)}: {saved}", file=sys.stderr)
            return 130
        except KeyboardInterrupt:  # a second Ctrl-C, which stops at once
            if training.ranks > 1:
                raise  # under mpiexec: every rank ends at once (``main``)
            path = config["checkpoint_dir"] and checkpoint.path_in(config["checkpoint_dir"])
            saved = f"{path} holds the last checkpoint written" if path and path.exists() else "nothing was saved"
            print(f"{PROG}: interrupted at {_position(training)} and stopped at once: {saved}", file=sys.stderr)
            return 130
        except (NonFiniteLoss, Diverged) as error:
            error.hint = (f"try another --lr than {config['lr']}, or add --allow-divergence to go on"
                          if isinstance(error, Diverged) else f"try a smaller --lr than {config['lr']}")
            if config["checkpoint_dir"]:
                error.hint += (f" (the checkpoint of epoch {training.epoch} is kept as it was)" if training.epoch
                               else " (no checkpoint was written)")
            raise
    window = training.profile.steps
    if training.profile.summary is not None:
        report.line(f"timeline of steps {window.start}..{window.stop - 1} in {config['timeline']} and its .json: "
                    f"{describe(training.profile.summary)}", always=True)
    elif config["timeline"] is not None and training.rank == 0:
        print(f"{PROG}: note: this run started at step {0 if state is None else state['step']}, after the timeline's "
              f"steps {window.start}..{window.stop - 1}, so {config['timeline']} was not written", file=sys.stderr)
    accuracy = metrics["test_accuracy"]
    report.line(f"done: {plural(metrics['epoch'], 'epoch')}, "
                + ("" if accuracy is None else f"test accuracy {accuracy:.2%}, ")
                + f"test loss {metrics['test_loss']:.4f}, {time.perf_counter() - started:.1f} s", always=True)
    return 0


def _position(training):
    """Where a run stands, as interrupting and resuming both say it: the epoch under way (counted from
    1, as the epoch lines count) and the steps completed."""
    return f"epoch {training.epoch + 1}, step {training.step}"


def _load(config):
    dtype = config["dtype"]
    if config["data"] == "digits":
        return data.digits(dtype)
    if config["data"] == "mnist":
        return data.mnist(config["data_dir"], dtype)
    sizes = [config["inputs"], *config["hidden"], config["outputs"]]
    return data.teacher(sizes, config["samples"], dtype=dtype)


def _writable_dir(directory):
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--checkpoint-dir {directory}: {error.strerror}") from None
    if not os.access(directory, os.W_OK):
        raise UsageError(f"--checkpoint-dir {directory}: not writable")


def _open_metrics(path, append):
    if path is None:
        return None
    try:
        return open(path, "a" if append else "w", encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--metrics {path}: {error.strerror}") from None


if __name__ == "__main__":
    sys.exit(main())
