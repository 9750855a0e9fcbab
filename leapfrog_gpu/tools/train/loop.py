"""``leapfrog-train``'s training loop, one for every model: a run of the library's (``core.fitting.Fitting``:
epochs of shuffled minibatches, where the run stands, the metrics of each epoch, the progress bar) and what the
command adds through its hooks: checkpoints, Ctrl-C between steps, the divergence rule, the profiling window,
the epoch lines and ``--metrics`` records, and the hints of a run that ends with exit status 3.
"""

import contextlib
import datetime
import json
import os
import signal
import sys
import threading
import time

from tqdm import tqdm

from ...core import files, triangular
from ...core.checks import widths
from ...core.fitting import Fitting, evaluate
from ..cli import Unwritten, writing
from . import checkpoint, models
from .metrics import Divergence, chance_loss, in_words, speed
from .options import PROG, make_optimizer, profile_window
from .profiling import ProfileWindow
from .values import dashed


class Stopped(ArithmeticError):
    """The loss (or, with --check-finite, a gradient) became NaN or Inf, or the run diverged or learns nothing
    (``metrics.Divergence``): exit status 3; the message says what to try and what became of the checkpoints."""


class Interrupted(Exception):
    """Ctrl-C, taken at the boundary of a step: exit status 130 after a checkpoint."""


class Refused(ValueError):
    """The network refused a step as the options set it up (a schedule's memory check, a graph): exit status 2;
    ``every_rank``: every rank refuses it alike, and rank 0 alone says so (``command``)."""

    def __init__(self, message, every_rank=False):
        super().__init__(message)
        self.every_rank = every_rank

    @classmethod
    def of(cls, error, every_rank):
        """The network's ValueError ``error`` in the command's words: a memory limit names ``--memory-limit``."""
        if not isinstance(error, triangular.MemoryLimitError):
            return cls(str(error), every_rank)
        option = "--forward-solver" if error.solver else "--schedule"
        who = error.who.partition("(")[0]  # a solver's class, its options aside
        return cls(f"{error.need(who)}, over the {triangular.in_words(error.limit)} of --memory-limit; give a larger "
                   f"--memory-limit (GiB) or another {option}", every_rank)


SIGINT_GRACE = 2.0
"""Seconds after the first SIGINT in which further ones count as the same Ctrl-C: ``timeout -s INT`` sends one to
the process and one to its group, and a user presses Ctrl-C twice; only a later one stops at once."""


class SigintNoted:
    """SIGINT's handler while the command runs (``sigint_noted``; one process's training puts its own between its
    steps, ``sigint_between_steps``): a ``KeyboardInterrupt``, as Python's own handler raises, that also sets
    ``landed``. CPython swallows an exception raised in a ``__del__`` or a weakref callback (it prints "Exception
    ignored in ..." and goes on), so that a Ctrl-C landing in one went unseen and the run trained to its end;
    ``Training.run`` stops before the first step where one ``landed``."""

    landed = False

    def __call__(self, signum, frame):
        self.landed = True
        raise KeyboardInterrupt


@contextlib.contextmanager
def sigint_noted():
    """While active, SIGINT's handler is a new ``SigintNoted``, where it was Python's own (not an ignored SIGINT,
    nor off the main thread)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    previous = signal.signal(signal.SIGINT, SigintNoted())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def sigint_between_steps():
    """While active, SIGINT only sets ``flag["stop"]``, so the loop stops between two steps, not inside one. Further
    SIGINTs within ``SIGINT_GRACE`` seconds are the same Ctrl-C; a later one interrupts at once, or while
    ``flag["saving"]``, once the checkpoint of the last completed step is written. An ignored SIGINT (a background
    job's, which the run's setup ignores too: ``sigint_noted``) stays ignored, as Python leaves it."""
    flag = {"stop": False, "since": None, "saving": False, "deferred": False}
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield flag
        return

    def handler(signum, frame):
        now = time.monotonic()
        if flag["since"] is None:
            flag["stop"], flag["since"] = True, now
        elif now - flag["since"] >= SIGINT_GRACE:
            if flag["saving"]:
                flag["deferred"] = True
            else:
                raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave SIGINT as it is
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


class Training:
    """One run: network, data, schedule, the library's run (``fitting``: where it stands) and what the command
    keeps beside it: the divergence rule, the profiling window and Ctrl-C's flag."""

    def __init__(self, config, dataset, net, report, state=None):
        self.config, self.data, self.net, self.report = config, dataset, net, report
        self.sizes = models.sizes(config, dataset)
        self.digest = dataset.digest if config["data"] in models.READ else None
        self.schedule = models.schedule(config)
        self.solver = models.forward_solver(config)
        self.rank, self.ranks = (0, 1) if net.comm is None else (net.comm.rank, net.comm.size)
        try:  # the network refuses an optimizer it cannot run as set up (a hyper-parameter beyond its dtype)
            self.fitting = Fitting(net, dataset.x_train, dataset.y_train, config["epochs"],
                                   config["batch_size"] * self.ranks,  # the global batch; the network takes its share
                                   make_optimizer(config), self.schedule, validation=(dataset.x_test, dataset.y_test),
                                   seed=config["seed"], graph=config["graph"], solver=self.solver,
                                   clip=config["clip_grad_norm"], state=state)
        except ValueError as error:  # the same options on every rank: every rank refuses them alike
            raise Refused.of(error, every_rank=True) from None
        self.interrupt = {}  # ``sigint_between_steps``'s flag while ``run`` runs
        self.divergence, self._resumed = None, state or {}  # the divergence rule, made as the run starts
        self.kept = _checkpoint_at(state) if state else None  # the checkpoint in the folder: resumed, then written
        steps = profile_window(config)
        timeline = None if config["timeline"] is None or self.rank > 0 else {
            "path": config["timeline"], "label": f"{PROG} {self.schedule!r}",
            "title": f"{PROG}: {models.name(config)} {widths(self.sizes)} {config['activation']}, batch "
                     f"{config['batch_size']}, {self.schedule!r}, {config['dtype']}, {net.backend.name}",
            "about": {"program": PROG, "config": config, "sizes": self.sizes, "backend": repr(net.backend),
                      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}}
        self.profile = ProfileWindow(None if steps is None else range(*steps), net.backend, timeline)

    def state(self):
        """What a checkpoint holds besides the parameters (JSON-able)."""
        state = {"sizes": self.sizes, "data": self.digest, **self.fitting.state(), "config": self.config}
        if self.divergence is not None:
            state.update(start_loss=self.divergence.start, epochs_at_chance=self.divergence.epochs_at_chance)
        return state

    def save(self, synchronize=False, record=None):
        """Checkpoint the last completed step (after the steps enqueued complete, if ``synchronize``), if there is a
        ``--checkpoint-dir``, the ``--metrics`` line of an epoch's ``record`` written first (``Report.recorded``): the
        two agree whatever write fails. A Ctrl-C meanwhile is raised once both are written."""
        interrupt = self.interrupt
        interrupt["saving"] = True
        try:
            if synchronize:
                self.net.synchronize()
            with self.report.recorded(record):
                if self.config["checkpoint_dir"]:
                    if self.rank == 0:
                        self._checkpoint()
                    self.kept = _checkpoint_at(self.fitting.state())
        finally:
            interrupt["saving"] = False
        if interrupt.get("deferred"):
            raise KeyboardInterrupt

    def _checkpoint(self):
        """Write the checkpoint, or raise ``Unwritten``: the one before, if any, stays whole (``core.saving``)."""
        directory = self.config["checkpoint_dir"]
        path = checkpoint.path_in(directory)
        kept = "the one written before is kept as it was" if path.exists() else "none was written before"
        try:
            with writing(f"the checkpoint {path}"):
                checkpoint.save(directory, self.net, self.state())
        except Unwritten as error:
            raise Unwritten(f"{error}: {kept}") from None
        except ValueError as error:  # core.saving refuses a network holding NaN or Inf, or a folder gone meanwhile
            if path.parent.is_dir():
                raise Unwritten(f"cannot write the checkpoint {path}: {error}; {kept}") from None
            raise Unwritten(f"cannot write the checkpoint {path} (its folder {path.parent} is gone)") from None

    def judge_divergence(self):
        """Make the rule that stops a diverging run (unless ``--allow-divergence``) from the loss at the start: the
        checkpoint's, else a pass over the training set now, before the run writes anything (a Ctrl-C meanwhile
        is one before the first step)."""
        if not self.config["allow_divergence"] and self.divergence is None:
            net, data, state = self.net, self.data, self._resumed
            start = state.get("start_loss")  # the checkpoint's; None: written without it, so start from here
            if start is None:
                try:
                    start = evaluate(net, data.x_train, data.y_train, self.fitting.eval_batch, self.solver)["loss"]
                except ValueError as error:  # the pass refused as set up (a forward solver's memory): on every rank
                    raise Refused.of(error, every_rank=True) from None
            self.divergence = Divergence(start, chance_loss(net.cost, data.y_train), state.get("epochs_at_chance", 0))

    def run(self):
        """Train until ``epochs`` epochs are done (``judge_divergence`` first); return the last epoch's record
        (``None`` if none ran). Ctrl-C stops it between two steps (``sigint_between_steps``): the steps enqueued
        complete, a checkpoint of the last one is written, and ``Interrupted`` is raised. A Ctrl-C before, which
        ``SigintNoted`` noted, raises ``KeyboardInterrupt`` with ``interrupt`` still empty: before the first step."""
        noted = signal.getsignal(signal.SIGINT)
        try:  # under mpiexec every rank gets Ctrl-C and ends at once: they would stop after different steps
            with sigint_between_steps() if self.ranks == 1 else contextlib.nullcontext({"stop": False}) as interrupt:
                if isinstance(noted, SigintNoted) and noted.landed:  # one CPython swallowed
                    raise KeyboardInterrupt
                self.interrupt, self.first = interrupt, self.fitting.step
                try:
                    records = self.fitting.run(self._step, self._epoch, not self.report.quiet)
                except Interrupted:  # the checkpoint is written while SIGINT is still this run's
                    self.save(synchronize=True)
                    self.profile.write()
                    raise
                except FloatingPointError as error:
                    self.profile.write()
                    raise self._stopped(str(error), False, getattr(error, "every_rank", False)) from None
        finally:
            self.profile.close()
        return records[-1] if records else None

    @contextlib.contextmanager
    def _step(self, n):
        """Around step ``n``: its profiling window; a step the network refuses as set up raises ``Refused`` (on every
        rank alike where the batch is whole: each rank's share of it is --batch-size, so each refuses it, and rank 0
        alone says so), and Ctrl-C ``Interrupted`` once the step is counted, or before it where Ctrl-C came between
        two steps of this run (as an epoch's end is evaluated)."""
        if self.interrupt["stop"] and n > self.first:
            raise Interrupted
        try:
            with self.profile.step(n):
                yield
        except ValueError as error:
            fitting = self.fitting  # the step refused is not counted: step_in_epoch is its own
            whole = (fitting.step_in_epoch + 1) * fitting.batch <= fitting.x.shape[-1]
            raise Refused.of(error, every_rank=whole) from None
        if self.interrupt["stop"]:
            raise Interrupted

    def _epoch(self, metrics):
        """After an epoch: the divergence rule, its ``--metrics`` record and a checkpoint, then the epoch's line (which
        a closed stdout stops: the record and the checkpoint agree); returns the record. The timeline's chart first,
        once its window has run (``ProfileWindow.write``), whatever stops the run here."""
        self.profile.write()
        why = None if self.divergence is None else self.divergence.check(metrics["train_loss"])
        if why:
            raise self._stopped(f"{why} (epoch {metrics['epoch']}, step {metrics['step']})", True)
        config = self.config
        record = {"model": config["model"], "data": config["data"], **metrics, "backend": self.net.backend.name,
                  "schedule": repr(self.schedule), "forward_solver": config["forward_solver"], "graph": config["graph"],
                  "ranks": self.ranks}
        self.save(record=record)
        epochs = config["epochs"]
        self.report.line(f"epoch {metrics['epoch']:>{len(str(epochs))}}/{epochs}  train loss "
                         f"{metrics['train_loss']:.4f}  test loss {metrics['test_loss']:.4f}  "
                         f"{in_words(metrics)}  {speed(metrics['samples_per_s'])}")
        return record

    def _stopped(self, what, diverged, every_rank=False):
        """``Stopped`` by ``what``, with what to try after a run that ``diverged`` (else met a NaN or Inf), and which
        checkpoint is kept (``kept``: the last written, or the one resumed). The divergence rule reads the training loss
        summed over every rank, so under mpiexec every rank stops alike (``every_rank``: rank 0 alone says it), as it
        does at a NaN ``Fitting`` meets (in that loss, or in gradients summed across ranks; the latest batch's loss
        stops a run alone only)."""
        lr, c = self.config["lr"], self.config
        larger = [f"--{dashed(key)} than {c[key]}" for key in ("momentum", "weight_decay")
                  if c.get(key)]  # given, and as large a cause
        hint = (f"try another --lr than {lr}, or add --allow-divergence to go on" if diverged
                else f"try a smaller --lr than {lr}" + "".join(f" or {option}" for option in larger))
        if self.config["checkpoint_dir"]:
            hint += f" (the checkpoint {self.kept} is kept as it was)" if self.kept else " (no checkpoint was written)"
        stopped = Stopped(f"{what}: {hint}")
        stopped.every_rank = diverged or every_rank
        return stopped


def position(state):
    """Where a run stands (``Fitting.state``), as interrupting and resuming say it: the epoch under way (from 1) and
    the steps done, "epoch 6, step 409"."""
    return f"epoch {state['epoch'] + 1}, step {state['step']}"


def _checkpoint_at(state):
    """Which checkpoint ``state`` (``Fitting.state``) is, as a stopped run names the one it keeps: "of epoch 4" at an
    epoch's end, else where it resumes (``position``): "at epoch 6, step 409"."""
    if state["step_in_epoch"] == 0:
        return f"of epoch {state['epoch']}"
    return f"at {position(state)}"


class Report:
    """What the user sees, on rank 0 only: lines beside the run's progress bar, and the ``--metrics`` records (the
    file open to append, unbuffered, in binary)."""

    def __init__(self, quiet, metrics_file=None, rank=0):
        self.quiet, self.metrics_file, self.rank = quiet or rank > 0, metrics_file, rank
        self.fresh = False
        # tqdm's write lock (a multiprocessing lock, slow to make) made now, where a Ctrl-C is one before the first
        # step: made by the first line's external_write_mode, a Ctrl-C meanwhile became tqdm's AttributeError
        tqdm.get_lock()

    def start(self):
        """A fresh run starts: its first record, once written whole with its checkpoint, empties the ``--metrics`` file
        (open to append) of all else where it is a file (not a pipe or a device): a run that stops before leaves the
        file as it was."""
        self.fresh = True

    @contextlib.contextmanager
    def recorded(self, record):
        """Around the block, ``record`` (None: none) written to the ``--metrics`` file, one JSON line: before the block
        runs, and taken back if it raises (where the file can be cut); a fresh run's first, once the block has run,
        alone in the file. A write that fails raises ``Unwritten``."""
        file = self.metrics_file
        if record is None or file is None:
            yield
            return
        start, line = file.tell() if self._cuttable() else None, (json.dumps(record) + "\n").encode()
        try:
            self._write(line)
            yield
        except BaseException:
            if start is not None:
                with contextlib.suppress(OSError):  # what failed to write may fail to cut
                    file.truncate(start)
            raise
        if self.fresh and start:  # what an earlier run wrote goes once this run has its first record
            with writing(f"to --metrics {file.name}"):
                file.truncate(0)
            self._write(line)
        self.fresh = False

    def _write(self, line):
        file = self.metrics_file
        try:  # a file removed, or its folder, takes the lines written to it along, unseen
            there = os.path.samestat(os.stat(file.name), os.fstat(file.fileno()))
        except OSError:
            there = False
        if not there:
            raise Unwritten(f"cannot write to --metrics {file.name} (it was removed or replaced during the run)")
        with writing(f"to --metrics {file.name}"):
            while line:  # an unbuffered write may take part of it
                line = line[file.write(line):]

    def _cuttable(self):
        """Whether the ``--metrics`` file can be emptied and cut (``core.files.cuttable``)."""
        return self.metrics_file is not None and files.cuttable(self.metrics_file)

    def line(self, text, always=False):
        """Print ``text`` above the progress bar unless quiet (``always``: even then)."""
        if self.rank == 0 and (always or not self.quiet):
            with tqdm.external_write_mode(file=sys.stdout):
                print(text, flush=True)

    @contextlib.contextmanager
    def after(self, seconds, text):
        """Around a block that prints nothing, ``text`` printed as ``line`` prints it once the block has run for
        ``seconds``, unless it ended before: what a long silence is doing. A print that fails (a closed stdout)
        raises here once the block has ended, as the main thread's own would."""
        failed = []

        def say():
            try:
                self.line(text)
            except OSError as error:
                failed.append(error)

        timer = threading.Timer(seconds, say)
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            timer.join()
        if failed:
            raise failed[0]
