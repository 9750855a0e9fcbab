"""``leapfrog-train``: train an MLP, a residual MLP (a ``DagNet``) or an RNN under a schedule.

    leapfrog-train                                        # digits, 4x128 tanh, Leapfrog(k=2), 30 epochs
    leapfrog-train --data mnist --data-dir ~/mnist --hidden 6x256 --epochs 10 --checkpoint-dir run1
    leapfrog-train --checkpoint-dir run1 --resume --epochs 20
    leapfrog-train --model rnn --data pixels --schedule timescan --forward-solver newton   # parallel in time
    mpiexec -n 2 leapfrog-train --batch-size 16                  # data-parallel: 16 samples per rank

The options and exit statuses are ``options``'; every model runs through one loop (``loop``), with its data and
network (``models``). Under ``mpiexec -n P`` every rank trains on its share of each global batch of B·P samples
(``leapfrog_gpu.parallel``); rank 0 alone prints and writes checkpoints and metrics, and every rank resumes from
its checkpoint. This module runs a command line and turns what ends the run into its exit status: an error met by
one rank alone ends every rank (``MPI_Abort`` with that status), and Ctrl-C, which reaches every rank, is said by
rank 0 alone.
"""

import argparse
import contextlib
import math
import os
import shlex
import sys
import time
import traceback
import warnings
from pathlib import Path

from ... import datasets
from .. import PEERS_INTERRUPTED
from ...dag.network import skips
from ...parallel import reducer as data_parallel, comm as parallel
from ...backends import get_backend
from ...core import files
from ...core.checks import widths
from ...core.optimizer_state import MOST_STEPS
from . import checkpoint, estimate, models, resuming
from ..cli import UNWRITTEN, Unwritten, choose_backend, fitted, plural, too_large
from ..timeline import describe
from .loop import Interrupted, Refused, Report, Stopped, Training, position, sigint_noted
from .metrics import in_words
from .refusals import outputs_refusal
from .values import dashed
from .options import (DEFAULTS, PER_RANK, PROG, RESUMED, UsageError, build_parser, configure, make_optimizer,
                      model_named, profile_window)

SETUP_ERRORS = (UsageError, datasets.DataError, checkpoint.CheckpointError)
"""A bad option, data file or checkpoint: exit status 2."""


def main(argv=None):
    """Run the command; return its exit status. A bad argument is refused once MPI is set up on every rank (under
    mpiexec): a rank that left before would leave the others waiting in MPI's setup for it, and its line unsaid. A
    Ctrl-C before the first step stops the run, even one that CPython swallowed where it landed (``sigint_noted``)."""
    with sigint_noted():
        return _main(sys.argv[1:] if argv is None else argv)


def _main(argv):
    try:
        given, refused = vars(build_parser(model_named(argv), exit_on_error=False).parse_args(argv)), None
    except argparse.ArgumentError as error:
        given, refused = {}, UsageError(error)
    try:
        comm = parallel.world(PROG, given.get("comm_timeout", DEFAULTS["comm_timeout"]),
                              round(given.get("bucket_mb", DEFAULTS["bucket_mb"]) * 2**20))
    except RuntimeError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    made = _missing_folders(given.get("checkpoint_dir")) if comm.rank == 0 else []
    try:
        with comm.together(UsageError):
            if refused:
                raise refused
        return _train(given, comm, made)
    except KeyboardInterrupt:
        if comm.size > 1:
            if comm.rank > 0:
                time.sleep(PEERS_INTERRUPTED)
            return _fail(comm, "interrupted (SIGINT)", 130, made, quiet=True)
        # while loading or setting up: training keeps Ctrl-C to itself (``Training.run``)
        print(f"{PROG}: interrupted before the first step; nothing was written", file=sys.stderr)
        return 130
    except (*SETUP_ERRORS, Refused) as error:
        return _fail(comm, error, 2, made)
    except Stopped as error:
        return _fail(comm, error, 3, made)
    except Unwritten as error:
        return _fail(comm, error, UNWRITTEN, made)
    except Exception as error:
        if line := too_large(error):
            return _fail(comm, Refused(line, every_rank=getattr(error, "every_rank", False)), 2, made)
        if comm.size == 1:
            raise
        traceback.print_exc()
        return _fail(comm, f"{type(error).__name__}: {error}", 1, made)
    finally:
        _remove_empty(made)


def _fail(comm, error, status, made=(), quiet=False):
    """Report ``error`` on stderr and return ``status``. Under mpiexec rank 0 alone reports an error that every rank
    met (``Communicator.together``); an error of one rank is reported by that rank, which then ends every rank with
    ``status`` (``_abort``: the folders it ``made`` that are still empty removed first; ``quiet``: without MPI's own
    line)."""
    if comm.size == 1:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    elif getattr(error, "every_rank", False):
        if comm.rank == 0:
            print(f"{PROG}: error: {error}", file=sys.stderr)
    else:
        print(f"{PROG}: error: rank {comm.rank} of {comm.size}: {error}; stopping every rank", file=sys.stderr)
        _abort(comm, status, made, quiet)
    return status


def _abort(comm, status, made, quiet=False):
    """End every rank with ``status`` (``quiet``: without MPI's own line about it), the folders this rank ``made``
    that are still empty removed first, as the abort leaves no ``finally`` to run."""
    _remove_empty(made)
    comm.abort(status, quiet)


class StoppedEveryRank(Exception):
    """Ctrl-C under mpiexec, said by rank 0: every rank ends at once, with exit status 130."""


def _train(given, comm, made):
    saved = arrays = state = None
    directory = given.get("checkpoint_dir")
    with comm.together(*SETUP_ERRORS, MemoryError):  # rank 0's checkpoint is every rank's
        if given.get("resume") and not directory:
            raise UsageError("--resume needs --checkpoint-dir DIR")
        if comm.rank == 0:
            arrays, state = _checkpoint_to_resume(given, directory)
    if comm.bcast(bool(given.get("resume"))):  # rank 0's say, so that every rank takes part in the broadcast
        state = comm.bcast(state)
        saved = state["config"]
    with comm.together(*SETUP_ERRORS, MemoryError):  # MemoryError: sizes no rank can hold (the teacher's data)
        config = configure(given, saved)
        written_by = saved and saved.get("ranks", 1)  # a checkpoint from before data parallelism: one rank
        if written_by and written_by != comm.size:
            raise UsageError(f"the checkpoint was written by {written_by} rank(s) of --batch-size "
                             f"{saved['batch_size']}; resume it with as many ranks (mpiexec -n {written_by})")
        config["ranks"] = comm.size
        alone = [f"--{dashed(key)}" for key in ("bucket_mb", "comm_timeout") if key in given and comm.size == 1]
        if alone:
            raise UsageError(f"{' and '.join(alone)} appl{'ies' if len(alone) == 1 else 'y'} to a run of several ranks "
                             f"(mpiexec -n P, P >= 2); this one runs alone: drop {'it' if len(alone) == 1 else 'them'}")
        dataset = models.dataset(config)
        samples, batch = dataset.x_train.shape[-1], config["batch_size"] * comm.size
        per_epoch = math.ceil(samples / batch)  # steps
        if batch > samples:
            raise UsageError(f"--batch-size {config['batch_size']}{_on_ranks(comm.size)} is larger than the {samples} "
                             f"training samples of {dataset.name}; use at most {samples // comm.size}")
        sizes = models.sizes(config, dataset)
        if config["model"] == "resmlp" and saved is None and not skips(sizes, config["skip"]):  # resumed: it is built
            raise UsageError(f"--model resmlp of widths {widths(sizes)} and --skip {config['skip']} makes no skip "
                             "connection (each block of --skip hidden layers adds its input where the widths agree, "
                             "but the first and one ending at the output): give more hidden layers of one width or a "
                             "smaller --skip, or use --model mlp")
        config["cost"] = config["cost"] or ("cross_entropy" if dataset.classes else "quadratic")
        if saved is not None:
            if state["sizes"] != sizes:
                raise checkpoint.CheckpointError(f"the checkpoint has sizes {widths(state['sizes'])}; the data give "
                                                 f"{widths(sizes)}: resume it on the data it was trained on (--data, "
                                                 "--data-dir)")
            if state.get("data") and state["data"] != dataset.digest:  # none: data drawn here (models.READ), or old
                raise checkpoint.CheckpointError(f"the checkpoint was trained on other data than {dataset.name}'s here "
                                                 "(its data's SHA-256 differs): resume it on the data it was "
                                                 "trained on (--data, --data-dir)")
            resuming.check_position(state, per_epoch, directory)
        steps = per_epoch * config["epochs"]
        if steps > MOST_STEPS:  # a run no machine finishes, whose estimate overflowed a float
            raise UsageError(f"--epochs {config['epochs']} of {plural(per_epoch, 'step')} make more than 2**63 - 1 "
                             f"steps, the most an optimizer's state counts: give --epochs {MOST_STEPS // per_epoch} "
                             "or fewer")
        window = profile_window(config)
        # a resumed run at its end says "nothing to do"
        if window and (window[1] > steps or saved is not None and window[1] <= state["step"] < steps):
            verb, where = (("reaches", f"past this run's last step, {steps - 1} (steps count from 0)")
                           if window[1] > steps else ("ends", f"before step {state['step']}, where this run resumes"))
            if config["profile_steps"]:
                raise UsageError(f"--profile-steps {window[0]}:{window[1]} {verb} {where}")
            raise UsageError(f"--timeline records steps {window[0]}..{window[1] - 1} by default, {where}: "
                             "give --profile-steps A:B")
        if comm.rank == 0 and (why := outputs_refusal(config)):  # the one that writes them
            raise UsageError(why)
        if directory and comm.rank == 0:
            _writable_dir(directory)
        try:
            backend, why = choose_backend(config["backend"], PROG)
        except ValueError as error:
            raise UsageError(error) from None
    _check_same_options(comm, config, dataset)
    comm.use_own_device(backend)
    options = {"blas_threads": config["blas_threads"]} if backend == "numpy" else {}
    with get_backend(backend, **options) as backend, models.network(config, dataset, backend, comm) as net:
        if saved is not None:  # what a rank finds wrong with the checkpoint, every rank raises (said once)
            optimizer = make_optimizer(config)
            with comm.together(checkpoint.CheckpointError):
                resuming.check_architecture(net, state, directory)
                if comm.rank == 0:
                    checkpoint.restore(net, arrays, directory, optimizer)
            data_parallel.broadcast_parameters(net)
            held = comm.bcast(checkpoint.optimizer_arrays(arrays) if comm.rank == 0 else None)
            with comm.together(checkpoint.CheckpointError):
                checkpoint.restore_optimizer(net, optimizer, held, state.get("optimizer_step", 0), directory)
        with comm.together(UsageError):  # rank 0's --metrics refused, every rank stops and rank 0 alone says why
            opened = _open_metrics(config["metrics"] if comm.rank == 0 else None)
        with opened as metrics:
            try:
                return _run(config, dataset, net, Report(config["quiet"], metrics, comm.rank), state, why)
            except StoppedEveryRank:  # now, not after closing the backend: that waits for sums no peer will join
                _abort(comm, 130, made, quiet=True)  # empty folders removed, as one process removes them


def _on_ranks(ranks):
    """`` on each of P ranks`` under mpiexec, else nothing: what --batch-size means."""
    return "" if ranks == 1 else f" on each of {ranks} ranks"


def _checkpoint_to_resume(given, directory):
    """``(arrays, state)`` of the checkpoint that ``--resume`` continues, else Nones; its config as
    ``resuming.checked`` gives it, once what a resumed run reads of it is checked. Without ``--resume``, a
    checkpoint already in ``directory`` is refused: with a hint to add ``--resume`` if it can be resumed, else with
    what is wrong with it."""
    if not given.get("resume") and not (directory and checkpoint.path_in(directory).exists()):
        return None, None
    arrays, state = checkpoint.load(directory)
    if not isinstance(state.get("config", {}), dict):
        raise checkpoint.damaged(directory, "its config is not a JSON object")
    missing = {"epoch", "step_in_epoch", "step", "rng", "config"} - set(state)
    missing |= set(RESUMED) - set(checkpoint.LATER) - set(state.get("config", {}))  # LATER: what one without them ran
    if missing:
        raise checkpoint.CheckpointError(f"{checkpoint.path_in(directory)} was not written by {PROG} "
                                         f"(its state lacks {', '.join(sorted(missing))}): {checkpoint.REMEDY}")
    state = {**state, "config": resuming.checked(state, directory)}
    if not given.get("resume"):
        raise UsageError(f"{checkpoint.path_in(directory)} exists: add --resume to continue it, "
                         "or choose another --checkpoint-dir")
    return arrays, state


def _check_same_options(comm, config, dataset):
    """Under mpiexec, refuse to start unless every rank has the same options and the same data (their
    digests are compared)."""
    if comm.size == 1:
        return
    options = {key: value for key, value in config.items() if key not in PER_RANK}
    options["data_digest"] = dataset.digest
    try:
        comm.check_same("options and data", options)
    except ValueError as error:
        raised = UsageError(f"{error}; start every rank with the same command line")
        raised.every_rank = True
        raise raised from None


def _run(config, dataset, net, report, state, why):
    started = time.perf_counter()
    training = Training(config, dataset, net, report, state)
    if training.fitting.epoch >= config["epochs"]:
        done = training.fitting.epoch
        report.line(f"nothing to do: the checkpoint has {plural(done, 'epoch')} done and --epochs is "
                    f"{config['epochs']}: give --epochs above {done} to train on", always=True)
        return 0
    mode = (" as a graph" if config["graph"] else "") + (
        f", forward {config['forward_solver']}" if training.solver is not None else "")
    optimizer = training.fitting.optimizer
    rule = f"lr {config['lr']}" if optimizer.plain else repr(optimizer)  # the plain step: its rate says it all
    report.line(fitted(f"{dataset} | {models.name(config)} {widths(training.sizes)} {config['activation']}, "
                       f"{config['cost']}, {config['dtype']}"))
    report.line(fitted(f"{net.backend.name}{f' ({why})' if why else ''} {training.schedule!r}{mode} | "
                       f"{plural(config['epochs'], 'epoch')} of {plural(training.fitting.steps_per_epoch, 'step')}, "
                       f"batch {config['batch_size']}{_on_ranks(training.ranks)}, {rule}"))
    if state is not None:
        report.line(f"resumed at {position(training.fitting.state())} from "
                    f"{checkpoint.path_in(config['checkpoint_dir'])}")
    if config["profile_steps"] and config["timeline"] is None and net.backend.name != "cupy" and training.rank == 0:
        print(fitted(f"{PROG}: note: the numpy backend has no CUDA profiler; --profile-steps only adds NVTX "
                     "ranges (recorded under nsys, or with LEAPFROG_NVTX=1)"), file=sys.stderr)
    remaining = training.fitting.steps_per_epoch * config["epochs"] - training.fitting.step
    try:
        with _unwarned(), report.after(estimate.SILENCE, "estimate: timing a step and a forward pass of the run ..."):
            calibrated = estimate.calibrate(config, dataset, net.backend, remaining)
    except ValueError as error:  # the run's own step, refused as set up: on every rank alike (one network each)
        raise Refused.of(error, every_rank=True) from None
    estimate.ask(config, *calibrated, report, training.ranks)
    with _unwarned():
        training.judge_divergence()
    if state is None or training.fitting.epoch == 0:  # a resumed run that wrote no record yet is fresh too
        report.start()
    with _unwarned():
        try:
            metrics = training.run()
        except Interrupted:
            directory = config["checkpoint_dir"]
            saved = (f"checkpoint written to {checkpoint.path_in(directory)}; continue with --resume "
                     f"--checkpoint-dir {shlex.quote(str(directory))}" if directory
                     else "no --checkpoint-dir, so nothing was saved")
            print(f"{PROG}: interrupted at {position(training.fitting.state())}: {saved}", file=sys.stderr)
            return 130
        except KeyboardInterrupt:  # a second Ctrl-C, which stops at once; under mpiexec, the first
            if training.rank > 0 or not training.interrupt:
                raise  # rank 0 says it for every rank, or it came before the first step (``main``)
            directory = config["checkpoint_dir"]
            path = directory and checkpoint.path_in(directory)
            saved = (f"{path} holds the last checkpoint written; continue from it with --resume --checkpoint-dir "
                     f"{shlex.quote(str(directory))}{f' under mpiexec -n {training.ranks}' * (training.ranks > 1)}"
                     if path and path.exists()
                     else "nothing was saved")
            every = "every rank stopped at once" if training.ranks > 1 else "stopped at once"
            print(f"{PROG}: interrupted at {position(training.fitting.state())} and {every}: {saved}", file=sys.stderr)
            if training.ranks > 1:
                raise StoppedEveryRank from None
            return 130
    recorded = training.profile.recorded
    if training.profile.summary is not None:
        report.line(f"timeline of steps {recorded.start}..{recorded.stop - 1} in {config['timeline']} and its .json: "
                    f"{describe(training.profile.summary)}", always=True)
    if training.schedule.auto:
        report.line("--k auto chose " + ", ".join(f"{schedule!r} at batch {batch}"
                                                  for batch, schedule in sorted(training.schedule.chosen.items())),
                    always=True)
    report.line(f"done: {plural(metrics['epoch'], 'epoch')}, {in_words(metrics)}, "
                f"test loss {metrics['test_loss']:.4f}, {time.perf_counter() - started:.1f} s", always=True)
    return 0


@contextlib.contextmanager
def _unwarned():
    """NumPy's overflow and invalid-value warnings held back: the run checks the loss itself and stops with exit
    status 3 (its timing steps too, which take the run's own hyper-parameters), and they would only repeat it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"(overflow|invalid value) encountered", RuntimeWarning)
        yield


def _missing_folders(directory):
    """The folders of the path ``directory`` that do not exist yet, the deepest first: those ``_writable_dir`` makes
    (none without a ``directory``)."""
    if directory is None:
        return []
    path = Path(directory).absolute()
    return [folder for folder in [path, *path.parents] if not folder.exists()]


def _remove_empty(folders):
    """Remove ``folders``, the deepest first, while each is empty: those this run made and wrote nothing in."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty, or never made
            return


def _writable_dir(directory):
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"--checkpoint-dir {directory}: it is a file, not a folder; give a folder's name")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--checkpoint-dir {directory}: {error.strerror}") from None
    if not os.access(directory, os.W_OK):
        raise UsageError(f"--checkpoint-dir {directory}: not writable")


def _open_metrics(path):
    """The ``--metrics`` file, open to append (or nothing, for no ``path``), as a context manager: a fresh run
    empties it with its first line (``Report``), not before, and a file it made that is still empty when the run
    ends (refused, say, or stopped before that line) is removed. Unbuffered: a line that fails to be written is not
    written again as the file closes."""
    if path is None:
        return contextlib.nullcontext()
    made = not os.path.lexists(path)
    try:
        file = open(path, "ab", buffering=0)
    except OSError as error:
        raise UsageError(f"--metrics {path}: {error.strerror}") from None
    file, stream = files.shared(file, "wb", buffering=0)  # --metrics /dev/stdout > log: lines in turn, one offset
    if stream is not None:
        file.name = path  # what its messages call it (its descriptor's number)
    return _removed_if_empty(file, path) if made else file


@contextlib.contextmanager
def _removed_if_empty(file, path):
    try:
        with file:
            yield file
    finally:
        if os.path.isfile(path) and not os.path.getsize(path):
            os.remove(path)
