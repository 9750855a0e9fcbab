"""Training on a dataset, and scoring on one: ``fit`` (epochs of shuffled minibatches by ``train_step``, a
progress bar for the whole run, the metrics of every epoch), ``evaluate`` (the mean cost, and the accuracy or
the mean squared error) and ``predict``, each in batches. ``Network.fit``, ``evaluate`` and ``predict`` are
these; ``leapfrog-train`` runs its epochs through ``Fitting`` and adds what a command does (checkpoints,
Ctrl-C, its report) through its hooks.

The samples of ``x`` and ``y`` are their last axis, as a network's batch holds them: the MLP's and DagNet's
(n_1, N) and (n_L, N), the RNN's (tau, n_1, N) and (n_L, N) or (tau, n_L, N). ``y`` may be integer class labels,
(N,) (an RNN's output at every step: (tau, N)), for outputs of classes (``checks.targets``). Metrics are
computed on the host in float64 from the network's outputs.
"""

import contextlib
import json
import math
import numbers
import os
import sys
import time

import numpy as np
from tqdm import tqdm

from ..backends import to_host
from ..parallel.reducer import building
from . import files, interrupts, optimizers
from .checks import check_count, check_eta, check_flag, shown
from .parameters import digest, generator, took_state

EVAL_BATCH = 256
"""The samples ``evaluate`` and ``predict`` run at a time, unless told (``fit``: at least its batch size, so
that the network keeps no other buffers than the remainder's)."""

LOSS_CHECK_SECONDS = 1.0
"""How often ``fit`` computes the loss of its latest batch, for the bar and, run alone, to stop at a NaN or Inf (a
synchronization); the loss over the whole training set is computed after every epoch."""


def fit(net, x, y, epochs, batch_size, optimizer, schedule=None, *, validation=None, shuffle=True, seed=0,
        progress=True, jsonl=None, graph=False, solver=None, clip=None):
    """Train ``net`` for ``epochs`` epochs on minibatches of ``batch_size`` samples of ``x`` and ``y`` (the last
    one smaller where they do not divide), shuffled by ``numpy.random.default_rng(seed)`` every epoch unless
    ``shuffle=False``; return the metrics of each epoch, a list of dicts (``Fitting.run``).

    ``optimizer``: ``SGD``, ``Adam`` or ``AdamW``, or a learning rate eta for ``SGD(eta)``; ``schedule``,
    ``graph``, ``solver`` and ``clip`` are ``train_step``'s. ``validation=(x, y)``: data scored after every
    epoch. ``progress``: a tqdm bar of the run on stderr, shown on a terminal only. ``jsonl``: a path or an
    open text file, one JSON line of metrics per epoch, as ``leapfrog-train --metrics`` writes them (a path's
    file emptied by the first: ``Emptied``), by rank 0 alone of a data-parallel network. A loss
    that becomes NaN or Inf (or, with ``check_finite``, a gradient) raises ``FloatingPointError``, naming
    the epoch and the step. A data-parallel network's ranks each pass the same data and arguments (their SHA-256 and
    values compared, a refusal raised on every rank) and take their shares of the same batches: ``seed=None`` is
    rank 0's fresh entropy on every rank."""
    comm = net.comm
    first = comm is None or comm.rank == 0  # under data parallelism rank 0 alone writes the metrics
    drawn = None if comm is None else comm.bcast(np.random.SeedSequence().entropy if first else None)
    with contextlib.ExitStack() as stack:
        with building(net.comm):  # a refusal on every rank: one rank's alone left the others waiting
            run = Fitting(net, x, y, epochs, batch_size, optimizer, schedule, validation=validation, shuffle=shuffle,
                          seed=drawn if seed is None else seed, graph=graph, solver=solver, clip=clip)
            progress = check_flag("progress", progress)
            if jsonl is not None and not hasattr(jsonl, "write"):
                if not isinstance(jsonl, (str, os.PathLike)):  # an int would be taken for a file descriptor
                    raise TypeError(f"jsonl must be a path or an open text file; got {type(jsonl).__name__}")
                try:
                    jsonl = stack.enter_context(Emptied(jsonl)) if first else None
                except OSError as error:
                    raise ValueError(f"cannot write the metrics to {jsonl} ({error.strerror}): give jsonl the path "
                                     "of a file this process may write, in a folder that exists") from None
            elif jsonl is not None:
                _check_text_out(jsonl)
        _same_on_every_rank(net, "fit", {"x": run.x, "y": run.y, "validation": run.validation}, epochs=epochs,
                            batch_size=batch_size, optimizer=run.optimizer, schedule=schedule, shuffle=shuffle,
                            seed=seed, graph=graph, solver=solver, clip=clip)
        return run.run(progress=progress, jsonl=jsonl if first else None)


def _same_on_every_rank(net, call, arrays, **arguments):
    """Refuse on every rank a ``call`` of a data-parallel ``net`` given other ``arrays`` (a dict of arrays, or of pairs
    of them, or None), by their SHA-256, or other ``arguments``, by their repr, on some rank: each rank takes its
    share of every batch, which must be the same batch on every rank."""
    if net.comm is None:
        return
    digests = {name: None if held is None else digest(held if isinstance(held, tuple) else (held,))
               for name, held in arrays.items()}
    plain = (type(None), bool, numbers.Real, str)  # others by their repr, which a gather need not pickle
    net.comm.check_same(f"data and arguments of {call} (each takes its share of the same samples)",
                        {**digests, **{name: value if isinstance(value, plain) else repr(value)
                                       for name, value in arguments.items()}})


def _check_text_out(file):
    """Refuse, before any step, an open ``jsonl`` file that text cannot be written to (closed, binary or read-only):
    by what writing nothing to it raises."""
    if getattr(file, "closed", False):
        raise ValueError("jsonl must be open for writing; got a closed file: open it with 'w' or 'a'")
    try:
        file.write("")
    except TypeError:
        raise TypeError("jsonl must be a path or a file open for text; got a binary file: open it without 'b'") \
            from None
    except (OSError, ValueError):  # io.UnsupportedOperation: not writable
        raise ValueError("jsonl must be open for writing; got a read-only file: open it with 'w' or 'a'") from None


class Emptied:
    """``fit``'s ``jsonl`` file at ``path``, open to append, emptied just before its first line: a run that fails before
    its first epoch is recorded (a step refused, a NaN, Ctrl-C) leaves an earlier run's file as it was, and removes a
    file it made (a context manager: the file closes as the run ends). The file that stdout or stderr writes to (a
    script's ``jsonl="/dev/stdout"``, its output to a file) is written beside it, never emptied (``files.shared``)."""

    def __init__(self, path):
        self.made = not os.path.lexists(path)
        self.file, self.stream = files.shared(open(path, "a", encoding="utf-8"), "w", encoding="utf-8")
        self.path, self.emptied = path, False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()
        if self.made and not self.emptied:
            with contextlib.suppress(OSError):
                os.remove(self.path)

    def write(self, text):
        if not self.emptied and files.cuttable(self.file):  # a pipe or a device has nothing to empty
            self.file.truncate(0)
        self.emptied = True
        if self.stream is not None:
            self.stream.flush()
        self.file.write(text)

    def flush(self):
        self.file.flush()


class Bar(tqdm):
    """``fit``'s bar: a tqdm that starts no monitor thread, which would outlive the run; the monitor only lowers
    ``miniters``, and the bar's is 1, a look at the clock every step."""

    monitor_interval = 0


class Fitting:
    """A run of ``fit`` and where it stands: ``epoch`` epochs done, plus ``step_in_epoch`` steps of the next;
    ``step`` counts every step. Each epoch's batches are a permutation of the samples drawn from ``order``;
    ``state()`` holds the position and the state of ``order`` before that epoch's draw, and a run made with
    ``state=`` one goes on from that step exactly as the run it was taken from would have, bit for bit."""

    def __init__(self, net, x, y, epochs, batch_size, optimizer, schedule=None, *, validation=None, shuffle=True,
                 seed=0, graph=False, solver=None, clip=None, state=None):
        net._check_open()  # first: no other fault of a closed network's matters
        self.net, self.schedule, self.solver = net, schedule, solver
        self.epochs = check_count("epochs", epochs)
        self.x, self.y = _checked(net, x, y)
        samples = self.x.shape[-1]
        self.batch = check_count("batch_size", batch_size, 1, samples, f"the {samples} samples of x")
        if isinstance(optimizer, numbers.Real) and not isinstance(optimizer, bool):
            optimizer = optimizers.SGD(check_eta(optimizer))
        if not isinstance(optimizer, optimizers.Optimizer):
            raise TypeError(f"optimizer must be a learning rate eta (for SGD(eta)), or SGD(...), Adam(...) or "
                            f"AdamW(...); got {shown(optimizer)}")
        self.optimizer = optimizer
        checked, _ = net._check_step(schedule, graph, solver)  # what train_step refuses, before a file is written
        optimizers.check_clip(clip, checked, graph, net.backend.name)
        net._check_optimizer(optimizer)
        self.options = {"graph": graph, "solver": solver, "clip": clip}
        if validation is not None and (not isinstance(validation, (tuple, list)) or len(validation) != 2):
            raise TypeError(f"validation must be a pair (x, y) of inputs and targets; got {type(validation).__name__}")
        self.validation = None if validation is None else _checked(net, *validation, "validation=(x, y): ")
        self.shuffle, self.order = check_flag("shuffle", shuffle), generator(seed)
        self.steps_per_epoch = math.ceil(samples / self.batch)
        self.eval_batch = max(self.batch, EVAL_BATCH)
        self.epoch = self.step_in_epoch = self.step = 0
        if state is not None:
            self.epoch, self.step_in_epoch, self.step = self._position(state)
            if not took_state(self.order, state["rng"]):
                raise ValueError(f"state's rng is {state['rng']!r:.80}, not a state of NumPy's "
                                 f"{type(self.order.bit_generator).__name__}: give what state() returned")
        self.epoch_rng = self.order.bit_generator.state

    def _position(self, state):
        """``(epoch, step_in_epoch, step)`` of a ``state()`` given, checked: a run of epochs of this many steps reaches
        it (``reaches``). One at ``epochs`` or past them runs none."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be what state() returned, a dict; got {type(state).__name__}")
        missing = [key for key in ("epoch", "step_in_epoch", "step", "rng") if key not in state]
        if missing:
            raise ValueError(f"state lacks {', '.join(missing)}: give what state() returned")
        epoch, step_in_epoch, step = (check_count(f"state's {key}", state[key], 0)
                                      for key in ("epoch", "step_in_epoch", "step"))
        if not reaches(epoch, step_in_epoch, step, self.steps_per_epoch):
            raise ValueError(f"state's position (epoch {epoch}, step_in_epoch {step_in_epoch}, step {step}) is not one "
                             f"of a run of epochs of {self.steps_per_epoch} steps (batch_size {self.batch} over "
                             f"{self.x.shape[-1]} samples): give the state of a run of these")
        return epoch, step_in_epoch, step

    def state(self):
        """Where the run stands (JSON-able): ``epoch``, ``step_in_epoch``, ``step`` and ``rng``."""
        return {"epoch": self.epoch, "step_in_epoch": self.step_in_epoch, "step": self.step, "rng": self.epoch_rng}

    def run(self, step=None, epoch=None, progress=True, jsonl=None):
        """Train until ``epochs`` epochs are done; return each epoch's record: its metrics (``epoch``,
        ``step``, ``train_loss``; with validation data ``test_loss`` and ``test_accuracy`` or ``test_mse``, as
        ``evaluate`` names them; ``samples_per_s`` and ``seconds`` of its steps, ``samples_per_s`` None where it ran
        none: resumed after its last step), or what ``epoch`` made of them.

        ``step(n)``: a context manager entered around step n (counted from 0 over the run), left once the step
        is counted in the position. ``epoch(metrics)``: called after each epoch, the position at the next;
        returns the epoch's record (None: the metrics). ``progress`` and ``jsonl``: as ``fit``'s.
        """
        samples, rank = self.x.shape[-1], 0 if self.net.comm is None else self.net.comm.rank
        done = self.epoch * samples + min(self.step_in_epoch * self.batch, samples)
        bar = Bar(total=self.epochs * samples, initial=done, desc=f"epoch {self.epoch + 1}/{self.epochs}",
                  unit="sample", unit_scale=True, leave=False, file=sys.stderr, miniters=1,
                  disable=not progress or rank > 0 or not _terminal(sys.stderr))
        records = []
        try:  # whatever ends the run, the bar goes first: a line printed then starts a line of its own
            while self.epoch < self.epochs:
                bar.set_description(f"epoch {self.epoch + 1}/{self.epochs}")
                metrics = self._epoch(bar, step or (lambda n: contextlib.nullcontext()),
                                      self.net.comm is None or not bar.disable)
                records.append((epoch and epoch(metrics)) or metrics)
                if jsonl is not None:
                    jsonl.write(json.dumps(records[-1]) + "\n")
                    jsonl.flush()
        finally:
            bar.close()
        return records

    def _epoch(self, bar, step, looks):
        """Run the epoch's steps; return its metrics. ``looks``: compute the latest batch's loss about once a second,
        for the bar and, where the network runs alone, to stop at a NaN or Inf (data-parallel, rank 0's bar alone
        shows it; every rank stops at the epoch's end, where the training loss summed over them is as bad)."""
        net, x, y, batch = self.net, self.x, self.y, self.batch
        samples = x.shape[-1]
        self.epoch_rng = self.order.bit_generator.state
        permutation = self.order.permutation(samples) if self.shuffle else np.arange(samples)
        start = checked = time.perf_counter()
        done = 0
        for s in range(self.step_in_epoch, self.steps_per_epoch):
            columns = permutation[s * batch:(s + 1) * batch]
            x_batch, y_batch = x[..., columns], y[..., columns]
            with step(self.step):
                with interrupts.held():  # a Ctrl-C as the step is enqueued lands once it is counted, as it will run
                    net.train_step(x_batch, y_batch, self.optimizer, self.schedule, **self.options)
                    self.step, self.step_in_epoch = self.step + 1, s + 1
                if net.check_finite:
                    self._synchronize()
            done += columns.size
            bar.update(columns.size)
            if looks and time.perf_counter() - checked >= LOSS_CHECK_SECONDS:
                a = to_host(net.feedforward(x_batch, solver=self.solver))
                loss = cost(net.cost, a, to_host(y_batch), net.dtype) / columns.size
                if net.comm is None:
                    self._finite(loss)
                bar.set_postfix(loss=f"{loss:.4f}")
                checked = time.perf_counter()
        self._synchronize()
        seconds = time.perf_counter() - start
        metrics = {"epoch": self.epoch + 1, "step": self.step,
                   "train_loss": self._finite(_score(net, x, y, self.eval_batch, self.solver)["loss"], True)}
        if self.validation is not None:
            scored = _score(net, *self.validation, self.eval_batch, self.solver)
            metrics.update({f"test_{name}": value for name, value in scored.items()})
        metrics.update(samples_per_s=done / seconds if done else None, seconds=seconds)
        self.epoch, self.step_in_epoch = self.epoch + 1, 0
        self.epoch_rng = self.order.bit_generator.state
        return metrics

    def _synchronize(self):
        """Wait for the steps enqueued; a refused update (``check_finite``: the step just counted, as each is waited
        for) is taken out of the position and raised naming its step, ``every_rank``: it checked the gradients
        summed across ranks, the same on each."""
        try:
            self.net.synchronize()
        except FloatingPointError as error:
            refused, self.step, self.step_in_epoch = self.step, self.step - 1, self.step_in_epoch - 1  # from 1
            raise _marked(FloatingPointError(f"at epoch {self.epoch + 1}, step {refused}: {error}"), True) from None

    def _finite(self, loss, every_rank=False):
        """``loss``, or a ``FloatingPointError`` if it is NaN or Inf, its ``every_rank`` as given: True for a loss
        summed over every rank (the training set's), which every rank finds so."""
        if not math.isfinite(loss):
            raise _marked(FloatingPointError(f"the training loss is {loss} after epoch {self.epoch + 1}, step "
                                             f"{self.step}"), every_rank)
        return loss


def reaches(epoch, step_in_epoch, step, steps_per_epoch):
    """Whether a run of epochs of ``steps_per_epoch`` steps reaches that position (interrupted after an epoch's last
    step, it counts them all)."""
    return step_in_epoch <= steps_per_epoch and step == epoch * steps_per_epoch + step_in_epoch


def _marked(error, every_rank):
    """``error``, its ``every_rank`` set (every rank raises it alike), for a ``raise`` where it is made: a frame that
    named it would be held by the error's traceback, and with it the frame's network, until a collection."""
    error.every_rank = every_rank
    return error


def evaluate(net, x, y, batch_size=EVAL_BATCH, solver=None):
    """``{"loss": mean cost per sample, "accuracy": ...}`` of ``net`` on inputs ``x`` and targets ``y``: the
    fraction of outputs whose largest unit is the target's class where the targets are classes (integer
    labels, or one-hot: 0s and one 1 along the class axis, of two or more units; of equal outputs the first
    counts, as ``numpy.argmax`` has it), else ``"mse"``, the mean squared error per output value.

    ``feedforward`` runs ``batch_size`` samples at a time, by ``solver`` where the network takes one. A
    data-parallel network (``net.comm``) scores its rank's share of the samples and sums across ranks (each rank
    passes the same ones, as ``fit``'s: their SHA-256 compared, a pass over them on the host)."""
    with building(net.comm):
        x, y = _checked(net, x, y)
        batch_size = check_count("batch_size", batch_size)
    _same_on_every_rank(net, "evaluate", {"x": x, "y": y}, batch_size=batch_size, solver=solver)
    return _score(net, x, y, batch_size, solver)


def _score(net, x, y, batch_size, solver):
    """``evaluate`` on a batch already checked (``_checked``)."""
    y = np.asarray(to_host(y), dtype=np.float64)
    samples, values = x.shape[-1], y.size
    labels = _labels(y)
    if net.comm is not None:
        share = net.comm.share(samples)
        x, y, labels = x[..., share], y[..., share], None if labels is None else labels[..., share]
    total, correct, squared = 0.0, 0, 0.0
    for start in range(0, x.shape[-1], batch_size):
        a = np.asarray(to_host(net.feedforward(x[..., start:start + batch_size], solver=solver)), dtype=np.float64)
        target = y[..., start:start + batch_size]
        total += cost(net.cost, a, target, net.dtype)
        if labels is None:
            squared += float(np.sum((a - target) ** 2))
        else:
            correct += int(np.sum(np.argmax(a, axis=-2) == labels[..., start:start + batch_size]))
    if net.comm is not None:
        total, correct, squared = map(float, net.comm.sum([total, correct, squared]))  # floats, as alone
    if labels is None:
        return {"loss": total / samples, "mse": squared / values}
    return {"loss": total / samples, "accuracy": correct / (values // y.shape[-2])}


def predict(net, x, batch_size=EVAL_BATCH, solver=None):
    """The outputs of ``net`` for ``x``, on the host: ``feedforward`` of ``batch_size`` samples at a time, joined
    along the samples' axis (the class of each sample: ``argmax`` over axis -2)."""
    x, _ = net._check_batch(x, None)
    return np.concatenate([to_host(net.feedforward(x[..., start:start + batch_size], solver=solver))
                           for start in range(0, x.shape[-1], check_count("batch_size", batch_size))], axis=-1)


def cost(name, a, y, dtype):
    """C summed over the batch (and a sequence's time steps), in float64, for a^L (computed in ``dtype``, the
    network's) and y: quadratic ``0.5 ||a - y||^2`` or cross-entropy ``-y ln a - (1 - y) ln(1 - a)``, where an a of
    exactly 0 or 1 counts as the nearest number of ``dtype`` inside (0, 1): a sigmoid rounds to them long before its
    true cost is infinite, and only a NaN or Inf in the network should make the loss non-finite."""
    a, y = np.asarray(a, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if name == "quadratic":
        return 0.5 * float(np.sum((a - y) ** 2))
    zero, one = np.dtype(dtype).type(0), np.dtype(dtype).type(1)
    a = np.clip(a, float(np.nextafter(zero, one)), float(np.nextafter(one, zero)))
    return -float(np.sum(y * np.log(a) + (1 - y) * np.log1p(-a)))


def _labels(y):
    """The class of each target of ``y`` (a host array, its class axis -2) where they are one-hot, else None."""
    if y.ndim < 2 or y.shape[-2] < 2 or not np.all((y == 0) | (y == 1)) or not np.all(y.sum(axis=-2) == 1):
        return None
    return np.argmax(y, axis=-2)


def _checked(net, x, y, what=""):
    """``x`` and ``y`` as a network's batch of them, checked; integer class labels as one-hot targets. A refusal's
    message starts with ``what``, the argument they came in."""
    try:
        return net._check_batch(x, net._targets(x, y))
    except (TypeError, ValueError) as error:
        if not what:
            raise
        raise (TypeError if isinstance(error, TypeError) else ValueError)(f"{what}{error}") from None


def _terminal(stream):
    """Whether ``stream`` is a terminal: not where it is None (no console, as under pythonw) or has no ``isatty``."""
    return stream is not None and getattr(stream, "isatty", lambda: False)()
