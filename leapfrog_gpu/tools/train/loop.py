"""``leapfrog-train``'s training loop, one for every model: one run's epochs of SGD steps, its checkpoints,
what it shows, and how Ctrl-C and a non-finite or diverging loss end it.

The loop speaks to a network through what the three networks share (``core.network.Network``): ``train_step`` by the
run's optimizer (``options.make_optimizer``), ``feedforward``, ``synchronize``, ``parameters()`` and
``optimizer_state()`` for its checkpoints, ``cost``, ``comm`` and ``check_finite``; the samples of its data are their
last axis, columns or sequences alike.
"""

import contextlib
import datetime
import json
import math
import signal
import sys
import time

import numpy as np
from tqdm import tqdm

from ...backends import to_host
from ..schedules import make_schedule
from . import checkpoint, models
from .options import make_optimizer
from .metrics import Divergence, chance_loss, cost, evaluate, in_words, measured, metric_name
from .profiling import ProfileWindow
from .options import PROG, profile_window

LOSS_CHECK_SECONDS = 1.0
"""How often the loss of the latest batch is computed for the progress bar and checked for NaN/Inf
(a synchronization); the loss over the whole training set is computed after every epoch."""



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


class Refused(ValueError):
    """The network refused a step as the options set it up (a schedule's memory check, a step it cannot
    capture as a graph on this backend): exit status 2."""



SIGINT_GRACE = 2.0
"""Seconds after the first SIGINT in which further ones count as the same Ctrl-C: ``timeout -s INT`` sends one to
the process and one to its group, and a user presses Ctrl-C twice; only a later one stops at once."""


@contextlib.contextmanager
def sigint_between_steps():
    """While active, SIGINT only sets ``flag["stop"]``, so the loop stops between two steps rather than
    inside one (where part of an update could be enqueued). Further SIGINTs within ``SIGINT_GRACE`` seconds
    are the same Ctrl-C; a later one interrupts at once, but not while ``flag["saving"]`` (it is deferred
    until the checkpoint of the last completed step is written, then raised)."""
    flag = {"stop": False, "since": None, "saving": False, "deferred": False}

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
    """One run: network, data, schedule, and where it stands.

    ``epoch`` epochs are done, plus ``step_in_epoch`` steps of the next; ``step`` counts every step.
    The batches of an epoch are a permutation drawn from ``order``; ``epoch_rng`` is its state before
    that draw, so ``save()`` after any completed step lets a resumed run draw the same permutation and
    skip the steps already done.
    """

    def __init__(self, config, dataset, net, report, state=None):
        self.config, self.data, self.net, self.report = config, dataset, net, report
        self.sizes = models.sizes(config, dataset)
        self.schedule = make_schedule(models.NETWORK[config["model"]], config["schedule"], config["k"],
                                      config["fused"])
        self.optimizer, self.clip = make_optimizer(config), config["clip_grad_norm"]
        self.solver = models.forward_solver(config)
        self.forward = {} if self.solver is None else {"solver": self.solver}
        self.rank, self.ranks = (0, 1) if net.comm is None else (net.comm.rank, net.comm.size)
        self.batch = config["batch_size"] * self.ranks  # the global batch; the network takes its share
        self.eval_batch = max(self.batch, 256)
        self.steps_per_epoch = math.ceil(dataset.x_train.shape[-1] / self.batch)
        self.order = np.random.default_rng(config["seed"])
        self.epoch = self.step_in_epoch = self.step = 0
        self.interrupt = {}  # ``sigint_between_steps``'s flag while ``run`` runs
        if state is not None:
            self.epoch, self.step_in_epoch, self.step = state["epoch"], state["step_in_epoch"], state["step"]
            self.order.bit_generator.state = state["rng"]
        self.epoch_rng = self.order.bit_generator.state
        self.divergence = None
        if not config["allow_divergence"]:
            state = state or {}
            start = state.get("start_loss")  # None: a checkpoint written without it; start from here
            if start is None:
                start, _ = evaluate(net, dataset.x_train, dataset.y_train, self.eval_batch, solver=self.solver)
            chance = chance_loss(net.cost, dataset.y_train)
            self.divergence = Divergence(start, chance, state.get("epochs_at_chance", 0))
        steps = profile_window(config)
        timeline = None if config["timeline"] is None or self.rank > 0 else {
            "path": config["timeline"], "label": f"{PROG} {self.schedule!r}, steps {steps[0]}..{steps[1] - 1}",
            "title": f"{PROG}: {models.name(config)} {self.sizes} {config['activation']}, batch "
                     f"{config['batch_size']}, {self.schedule!r}, {config['dtype']}, {net.backend.name}",
            "about": {"program": PROG, "config": config, "sizes": self.sizes, "backend": repr(net.backend),
                      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}}
        self.profile = ProfileWindow(None if steps is None else range(*steps), net.backend, timeline)

    def state(self):
        """What a checkpoint holds besides the parameters (JSON-able)."""
        state = {"sizes": self.sizes, "epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
                 "step": self.step, "rng": self.epoch_rng, "config": self.config}
        if self.divergence is not None:
            state.update(start_loss=self.divergence.start, epochs_at_chance=self.divergence.epochs_at_chance)
        return state

    def save(self, synchronize=False):
        """Checkpoint the last completed step (after the steps enqueued complete, if ``synchronize``), if there is a
        ``--checkpoint-dir``; a Ctrl-C meanwhile is raised once the checkpoint is written."""
        interrupt = self.interrupt
        interrupt["saving"] = True
        try:
            if synchronize:
                self.net.synchronize()
            self._save()
        finally:
            interrupt["saving"] = False
        if interrupt.get("deferred"):
            raise KeyboardInterrupt

    def _save(self):
        if self.config["checkpoint_dir"] and self.rank == 0:
            checkpoint.save(self.config["checkpoint_dir"], self.net, self.state())

    def run(self):
        """Train until ``epochs`` epochs are done; return the last epoch's metrics (``None`` if none ran).

        Ctrl-C stops the run between two steps: the steps enqueued so far complete, a checkpoint of
        the last one is written, and ``Interrupted`` is raised; further Ctrl-Cs within ``SIGINT_GRACE`` seconds
        are the same one, and a later one raises ``KeyboardInterrupt`` at once, once a checkpoint under way is
        written.
        """
        metrics = None
        try:  # under mpiexec every rank gets Ctrl-C and ends at once: they would stop after different steps
            with sigint_between_steps() if self.ranks == 1 else contextlib.nullcontext({"stop": False}) as interrupt:
                self.interrupt = interrupt
                try:
                    while self.epoch < self.config["epochs"]:
                        metrics = self.run_epoch(interrupt)
                except Interrupted:  # the checkpoint is written while SIGINT is still this run's
                    self.save(synchronize=True)
                    raise
        finally:
            self.profile.close()
        return metrics

    def run_epoch(self, interrupt=None):
        """One epoch of SGD steps, then its loss and test metric, a checkpoint and a report."""
        net, x, y = self.net, self.data.x_train, self.data.y_train
        self.epoch_rng = self.order.bit_generator.state
        samples_in_epoch = x.shape[-1]
        permutation = self.order.permutation(samples_in_epoch)
        first = self.step_in_epoch
        bar = self.report.bar(self.epoch + 1, samples_in_epoch, initial=min(first * self.batch, samples_in_epoch))
        start = checked = time.perf_counter()
        samples = 0
        try:  # whatever ends the epoch, the bar goes first: a line printed then starts a line of its own
            for s in range(first, self.steps_per_epoch):
                batch = permutation[s * self.batch:(s + 1) * self.batch]
                x_batch, y_batch = x[..., batch], y[..., batch]
                with self.profile.step(self.step):
                    self._step(x_batch, y_batch)
                if net.check_finite:
                    self._synchronize_checked()
                self.step, self.step_in_epoch = self.step + 1, s + 1
                if interrupt is not None and interrupt["stop"]:
                    raise Interrupted
                samples += batch.size
                bar.update(batch.size)
                if self.rank == 0 and time.perf_counter() - checked >= LOSS_CHECK_SECONDS:
                    loss = cost(net.cost, to_host(net.feedforward(x_batch, **self.forward)), y_batch) / batch.size
                    self._check(loss)
                    bar.set_postfix(loss=f"{loss:.4f}")
                    checked = time.perf_counter()
            net.synchronize()
            seconds = time.perf_counter() - start
        finally:
            bar.close()
        train_loss, _ = evaluate(net, x, y, self.eval_batch, solver=self.solver)
        self._check(train_loss)
        why = None if self.divergence is None else self.divergence.check(train_loss)
        if why:
            raise Diverged(why, self.epoch + 1, self.step)
        test_loss, metric = evaluate(net, self.data.x_test, self.data.y_test, self.eval_batch, self.data.classes,
                                     self.solver)
        self.epoch, self.step_in_epoch = self.epoch + 1, 0
        self.epoch_rng = self.order.bit_generator.state
        self.save()
        config = self.config
        metrics = {"model": config["model"], "data": config["data"], "epoch": self.epoch, "step": self.step,
                   "train_loss": train_loss, "test_loss": test_loss, metric_name(self.data.classes): metric,
                   "samples_per_s": samples / seconds, "seconds": seconds, "backend": net.backend.name,
                   "schedule": repr(self.schedule), "forward_solver": config["forward_solver"],
                   "graph": config["graph"], "ranks": self.ranks}
        self.report.epoch(metrics, config["epochs"])
        return metrics

    def _step(self, x, y):
        """Enqueue one step of the run's optimizer; a step the network refuses as set up raises ``Refused``."""
        try:
            self.net.train_step(x, y, self.optimizer, self.schedule, graph=self.config["graph"], clip=self.clip,
                                **self.forward)
        except ValueError as error:
            raise Refused(str(error)) from None

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
        self.line(
            f"epoch {metrics['epoch']:>{len(str(epochs))}}/{epochs}  train loss {metrics['train_loss']:.4f}  "
            f"test loss {metrics['test_loss']:.4f}  {in_words(*measured(metrics))}  "
            f"{metrics['samples_per_s']:,.0f} samples/s"
        )
        if self.metrics_file is not None:
            self.metrics_file.write(json.dumps(metrics) + "\n")
            self.metrics_file.flush()
