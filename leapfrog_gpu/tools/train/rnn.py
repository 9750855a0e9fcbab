"""``leapfrog-train --model rnn``: train the recurrent network on a sequence task (``rnn_tasks``).

    leapfrog-train --model rnn                               # digits by rows, [8, 64, 10], Leapfrog(k=2)
    leapfrog-train --model rnn --data teacher --tau 32 --hidden 48 --checkpoint-dir run1
    leapfrog-train --model rnn --checkpoint-dir run1 --resume --epochs 30

Takes the MLP command's options where they mean the same (``--data digits|teacher``, ``--hidden``,
``--activation``, ``--cost``, ``--dtype``, ``--epochs``, ``--batch-size``, ``--lr``, ``--seed``,
``--schedule sequential|leapfrog`` (BPTT() or Leapfrog(k)), ``--k``, ``--fused``, ``--backend``,
``--blas-threads``, ``--quiet``, ``--metrics``, ``--checkpoint-dir``, ``--resume``) and refuses the others
with exit status 2. One line per epoch; after each epoch an atomic checkpoint (``checkpoint``: w and b
as the MLP's, u^l and the position in ``state``). Epoch e shuffles with the generator seeded by
(seed, e), so a resumed run takes the batches an uninterrupted one would.

Exit status: 0 done; 2 a bad option, data or checkpoint; 3 the parameters became NaN or Inf (the last
checkpoint is kept as it was); 130 stopped by Ctrl-C, with the checkpoint of the last completed epoch.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from ...backends import get_backend
from ...core.schedules import Leapfrog, Sequential
from . import checkpoint, data, rnn_tasks
from ..cli import plural

PROG = "leapfrog-train --model rnn"

DEFAULTS = {"data": "digits", "hidden": [64], "activation": "tanh", "dtype": "float32", "epochs": 20,
            "batch_size": 16, "seed": 0, "schedule": "leapfrog", "k": 2, "fused": False, "backend": "auto",
            "blas_threads": 1, "quiet": False, "metrics": None, "checkpoint_dir": None, "resume": False,
            "samples": 2048, "inputs": 4, "outputs": 2, "tau": 16}
"""What a run takes for an option not given (``lr`` and ``cost``: the task's own, ``rnn_tasks.DEFAULTS``)."""

TAKEN = set(DEFAULTS) | {"lr", "cost", "model", "data_dir"}
"""The options a recurrent run understands; any other given is refused."""

FIXED = ("data", "hidden", "activation", "cost", "dtype", "seed", "batch_size", "samples", "inputs", "outputs", "tau")
"""What a resumed run must keep: it defines the network, the data or the order of the batches."""


class UsageError(ValueError):
    """A bad option or combination of options: exit status 2."""


class NonFinite(RuntimeError):
    """The parameters became NaN or Inf: exit status 3."""


def main(given):
    """Run the command on ``given`` (the options the command line gave, by name); return the exit status."""
    try:
        return _run(given)
    except (UsageError, data.DataError, checkpoint.CheckpointError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except NonFinite as error:
        print(f"{PROG}: error: {error}: lower --lr; the last checkpoint is kept as it was", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (SIGINT); the checkpoint, if any, holds the last completed epoch", file=sys.stderr)
        return 130


def configure(given, saved=None):
    """The run's options: those given, then (on ``--resume``) the checkpoint's, then ``DEFAULTS``."""
    unknown = sorted(name for name in given if name not in TAKEN and given[name] not in (None, False))
    if unknown:
        raise UsageError(f"--model rnn does not take {', '.join('--' + n.replace('_', '-') for n in unknown)}")
    config = {**DEFAULTS, **(saved or {}), **{k: v for k, v in given.items() if k in TAKEN}}
    if saved:
        changed = [name for name in FIXED if name in given and given[name] != saved.get(name)]
        if changed:
            raise UsageError(f"--resume keeps {', '.join('--' + n.replace('_', '-') for n in changed)} of the "
                             "checkpoint; drop them or start a new --checkpoint-dir")
    if config["data"] not in rnn_tasks.TASKS:
        raise UsageError(f"--model rnn trains on --data {' or '.join(rnn_tasks.TASKS)}; got {config['data']!r}")
    if config.get("lr") is None:
        config["lr"] = rnn_tasks.DEFAULTS[config["data"]]["eta"]
    if config.get("cost") is None:
        config["cost"] = "cross_entropy" if config["data"] == "digits" else "quadratic"
    if config["resume"] and not config["checkpoint_dir"]:
        raise UsageError("--resume needs --checkpoint-dir DIR")
    return config


def _task(config):
    if config["data"] == "digits":
        return rnn_tasks.digits_by_rows(dtype=config["dtype"])
    return rnn_tasks.teacher((config["inputs"], 16, config["outputs"]), tau=config["tau"], samples=config["samples"],
                             seed=config["seed"] + 1, dtype=config["dtype"])


def _run(given):
    saved_state = saved_params = None
    directory = given.get("checkpoint_dir")
    if given.get("resume"):
        if not directory:
            raise UsageError("--resume needs --checkpoint-dir DIR")
        weights, biases, saved_state = checkpoint.load(directory)
        if saved_state.get("model") != "rnn":
            raise checkpoint.CheckpointError(f"{checkpoint.path_in(directory)} is not a checkpoint of --model rnn")
        saved_params = weights, [np.asarray(u) for u in saved_state["recurrent"]], biases
    config = configure(given, saved_state and saved_state["config"])
    task = _task(config)
    sizes = [task.sizes[0], *config["hidden"], task.sizes[-1]]
    if config["batch_size"] > task.x_train.shape[2]:
        raise UsageError(f"--batch-size {config['batch_size']} is more than the {task.x_train.shape[2]} training "
                         "sequences")
    options = {"blas_threads": config["blas_threads"]} if config["backend"] == "numpy" else {}
    backend = get_backend(config["backend"], **options)
    schedule = Leapfrog(config["k"], fused=config["fused"]) if config["schedule"] == "leapfrog" else \
        Sequential(fused=config["fused"])
    if config["checkpoint_dir"]:
        try:
            Path(config["checkpoint_dir"]).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"--checkpoint-dir {config['checkpoint_dir']}: {error.strerror}") from None
    first = 1
    with backend:
        net = task.network(sizes, config["activation"], config["cost"], dtype=config["dtype"], seed=config["seed"],
                           backend=backend)
        if saved_params is not None:
            net.set_parameters(*saved_params)
            first = saved_state["epoch"] + 1
        if not config["quiet"]:
            print(f"{task} | RNN {net.sizes} {config['activation']}, {config['cost']}")
            print(f"{backend.name} {config['dtype']} {schedule!r} | {plural(config['epochs'], 'epoch')}, batch "
                  f"{config['batch_size']}, lr {config['lr']:g}")
        start = time.perf_counter()
        metric = _train(net, task, config, schedule, first)
        if metric is None:
            print("nothing to do: --epochs already reached")
        else:
            print(f"done: {plural(config['epochs'], 'epoch')}, {_score(task, metric)}, "
                  f"{time.perf_counter() - start:.1f} s")
    return 0


def _score(task, metric):
    """The test metric in words: ``test accuracy 96.11%`` (digits) or ``test mse 0.0050`` (teacher)."""
    return f"test accuracy {metric:.2%}" if task.classes else f"test mse {metric:.4f}"


def _train(net, task, config, schedule, first):
    metric = None
    start = time.perf_counter()
    for epoch in range(first, config["epochs"] + 1):
        rnn_tasks.run_epoch(net, task, config["batch_size"], config["lr"], schedule, seed=[config["seed"], epoch])
        params = [net.weights, net.recurrent, net.biases]
        if not all(np.isfinite(a).all() for group in params for a in group):
            raise NonFinite(f"the parameters became NaN or Inf in epoch {epoch}")
        metric = rnn_tasks.evaluate(net, task.x_test, task.y_test, task.classes)
        seconds = time.perf_counter() - start
        if not config["quiet"]:
            print(f"epoch {epoch:>{len(str(config['epochs']))}}/{config['epochs']}  {_score(task, metric)}  "
                  f"{seconds:.1f} s")
        if config["metrics"]:
            with open(config["metrics"], "a") as file:
                file.write(json.dumps({"epoch": epoch, "metric": metric, "seconds": seconds}) + "\n")
        if config["checkpoint_dir"]:
            state = {"model": "rnn", "sizes": net.sizes, "epoch": epoch, "config": config,
                     "recurrent": [u.tolist() for u in params[1]]}
            checkpoint.save(config["checkpoint_dir"], params[0], params[2], state)
    return metric
