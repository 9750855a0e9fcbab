"""``leapfrog-bench``'s measurements of one MLP (``measure_network``) and the ratios derived from them
(``derive``): the model's saving of a pass, (1 - 1/k) f3 / f with f = f1 + f2 + f3 (docs/design.md §1), beside
the measured one; a step's bytes floor (``traffic``). What each means: docs/performance.md.
"""

import collections

import numpy as np

from ...backends import get_backend, timing
from ...core import capture as graphs
from ...core.schedules import Leapfrog
from ...mlp import autotune
from ...mlp.network import MLP
from ..schedules import make_schedule, schedule_names, takes_k
from . import runner, torch_anchor, traffic
from .runner import ETA, OPTIMIZERS

BASELINE = schedule_names("mlp")[0]
Run = collections.namedtuple("Run", "schedule threads graph")
"""A configuration timed: its schedule, BLAS setting, whether a graph."""


def configurations(args):
    """The ``(schedule name, k)`` of every configuration measured: the baseline first, then each of
    ``--schedule`` at each k of ``--k`` (k = 0 where the schedule takes none)."""
    return [(BASELINE, 0)] + [(name, k) for name in args.schedule if name != BASELINE
                              for k in (args.k if takes_k("mlp", name) else [0])]


def one_pass_configurations(args):
    """The configurations timed with the one-pass backward too: with ``--one-pass``, sequential's and leapfrog's."""
    return [(name, k) for name, k in configurations(args) if args.one_pass and name in (BASELINE, Leapfrog.name)]


def measure_network(args, sizes, batch, settings, bandwidth, optimizer="sgd"):
    """The records of the network ``sizes`` at ``batch``, every step by ``OPTIMIZERS[optimizer]``: at each BLAS
    setting of ``settings`` (a copy's GB/s at each: ``bandwidth``), the step and the backward pass of each
    configuration (``_runs``), the forward pass and f1-f3 (``sweeps``), and PyTorch's steps (``torch_steps``),
    all in one alternation (``runner.interleaved``, a block per BLAS setting)."""
    rule, itemsize = OPTIMIZERS[optimizer], np.dtype(args.dtype).itemsize
    with get_backend(args.backend) as backend, MLP(sizes, activation=args.activation, dtype=args.dtype,
                                                   backend=backend) as net:
        x, y = host_batch(sizes, batch, args.dtype)
        net.backprop(x, y)
        plan = net.plan(batch)
        runs, passes = _runs(args, net, settings), sweeps(net, plan)
        calls = {(threads, name): call for threads in settings for name, (call, layers) in passes.items() if layers}
        for i, run in enumerate(runs):
            calls[run.threads, "step", i] = lambda r=run: net.train_step(x, y, rule, r.schedule, graph=r.graph)
            if not run.graph:
                calls[run.threads, "backward", i] = lambda s=run.schedule: plan.backward(s)
        anchors = {} if torch_anchor.skipped(args.no_torch) else torch_steps(args, net, x, y, optimizer)
        calls.update({(("torch", threads), mode): anchors[mode].step for threads in settings for mode in anchors})
        timed = runner.interleaved(backend, calls, args.repeats, args.warmup, {row: _setting(row[0]) for row in calls})
        shared = {threads: {
            "backend": args.backend, "backend_repr": repr(backend),
            "device": backend.device_name if backend.name == "cupy" else runner.cpu_name(), "dtype": args.dtype,
            "N": sizes[0], "optimizer": optimizer, "L": len(sizes), "B": batch, "blas_threads": threads,
            "repeats": args.repeats,
            "forward_ms": timing.summary(timed[threads, "forward"]["ms"]),
            **{name: float(np.median(timed[threads, name]["ms"])) / layers if layers else 0.0
               for name, (_, layers) in passes.items() if name != "forward"},
            "forward_floor_ms": traffic.forward_bytes(sizes, batch, itemsize) / (bandwidth[threads] * 1e6),
            "copy_gbps": bandwidth[threads]} for threads in settings}
        records = [{**shared[run.threads], **floor(sizes, batch, args.dtype, traffic.update_of(run.schedule),
                                                   bandwidth[run.threads], optimizer),
                    "schedule": run.schedule.name, "k": run.schedule.k, "fused": run.schedule.fused,
                    "one_pass": run.schedule.one_pass, "graph": run.graph,
                    **_times(timed[run.threads, "step", i], timed.get((run.threads, "backward", i)))}
                   for i, run in enumerate(runs)]
        for threads in settings:
            for mode, anchor in anchors.items():
                step = timed[("torch", threads), mode]
                backward = "ms" in step and not anchor.graph and {"ms": anchor.backward_ms(args.repeats, threads)}
                records.append(torch_record(args, net, anchor, mode, threads, optimizer, _times(step, backward)))
    return records


def torch_steps(args, net, x, y, optimizer):
    """``mode -> torch_anchor.Step`` of ``net`` on the batch ``x``, ``y``, all on one copy of it (2 GB at N =
    4096), by ``OPTIMIZERS[optimizer]``: plain SGD's loop (``torch-autograd``), torch.optim's
    (``torch-NAME-foreach``, ``-fused``), with ``--graph`` on a GPU the loop as a CUDA graph (``torch-cuda-graph``)."""
    module, plain = net.to_torch(), optimizer == "sgd"
    modes = {"torch-autograd": {}} if plain else {}
    modes.update({f"torch-{optimizer}-{how}": {"update": how} for how in torch_anchor.UPDATES[1:]})
    if args.graph and plain and next(module.parameters()).is_cuda:
        modes["torch-cuda-graph"] = {"graph": True}
    return {mode: torch_anchor.Step(module, x, y, OPTIMIZERS[optimizer], **how) for mode, how in modes.items()}


def torch_record(args, net, step, mode, threads, optimizer, times):
    """The record of PyTorch's ``mode`` (its ``step`` of ``net``) at ``threads`` with its ``times``, as ours."""
    import torch

    return {"backend": f"torch-{torch.__version__}",
            "device": torch.cuda.get_device_name() if step.cuda else runner.cpu_name(), "dtype": args.dtype,
            "N": net.sizes[0], "L": net.L, "B": step.batch, "blas_threads": threads, "repeats": args.repeats,
            "optimizer": optimizer, "schedule": mode, "k": 0, "fused": False, "one_pass": False,
            "graph": mode == "torch-cuda-graph", **times, "forward_ms": None, "f1_ms": None, "f2_ms": None,
            "f3_ms": None, "copy_gbps": None}


def _setting(key):
    """A row's BLAS setting for ``runner.interleaved``: ours ``threads``, PyTorch's ``("torch", threads)``."""
    return key, lambda: torch_anchor.num_threads(key[1]) if isinstance(key, tuple) else autotune.blas_limit(key)


def _runs(args, net, settings):
    """The ``Run`` of every configuration at every BLAS setting; with ``--one-pass`` sequential's and
    leapfrog's one-pass steps too; with ``--graph`` a graph twin of each that can be captured."""
    one_pass = one_pass_configurations(args)
    runs = [Run(make_schedule("mlp", name, k, fused=args.fused), threads, False)
            for threads in settings for name, k in configurations(args)]
    runs += [Run(make_schedule("mlp", name, k, one_pass=True), threads, False)
             for threads in settings for name, k in one_pass]
    graph = [run._replace(graph=True) for run in runs if args.graph and graphs.refusal(net, run.schedule) is None]
    return runs + graph


def _times(step, backward):
    """A record's ``step_ms`` and ``backward_ms`` (None: not timed) from ``runner.interleaved``'s, or ``refused``."""
    if "refused" in step:
        return {"refused": step["refused"]}
    return {"step_ms": timing.summary(step["ms"]), "backward_ms": timing.summary(backward["ms"]) if backward else None}


def floor(sizes, batch, dtype, update, gbps, optimizer="sgd"):
    """``{"update", "bytes_per_step", "floor_ms"}``: the bytes a step of ``update`` by ``optimizer`` must move
    (``traffic.step_bytes``) and the time they take at ``gbps`` GB/s."""
    step_bytes = traffic.step_bytes(sizes, batch, np.dtype(dtype).itemsize, update, len(OPTIMIZERS[optimizer].SLOTS))
    return {"update": update, "bytes_per_step": step_bytes, "floor_ms": step_bytes / (gbps * 1e6)}


def host_batch(sizes, batch, dtype, seed=0):
    """A random batch ``(x, y)``, (n_1, B) and (n_L, B), on the host, where training data lives (a CuPy batch's
    check for NaN would wait for the device every step)."""
    rng = np.random.default_rng(seed)
    return rng.random((sizes[0], batch)).astype(dtype), rng.random((sizes[-1], batch)).astype(dtype)


def sweeps(net, plan):
    """Record key -> ``(call, layers)``: ``forward``, the forward pass, and f1, f2, f3, one sweep over the layers
    of (2)(3), of (5) and of (7) on the main stream, by the schedules' ops (f2: the hidden layers only)."""
    backend, ops, w, layers = net.backend, net.backend.ops, plan.w, net.layer_numbers
    hidden = range(net.L - 1, 1, -1)

    def f1():
        for l in layers:
            ops.forward(plan.z[l], plan.a[l], plan.sp[l], w[l], plan.a[l - 1], plan.b[l], plan.activation[l])

    def f2():
        for l in hidden:
            ops.backward(plan.delta[l], w[l + 1], plan.delta[l + 1], plan.sp[l])

    def f3():
        for l in layers:
            ops.nabla_w(plan.nabla_w[l], plan.delta[l], plan.a[l - 1])

    return {"forward": (plan.forward, 1), **{name: (lambda s=sweep, n=name: backend.launch(backend.main, n, s), count)
                                             for name, sweep, count in (("f1_ms", f1, len(layers)),
                                                                        ("f2_ms", f2, len(hidden)),
                                                                        ("f3_ms", f3, len(layers)))}}


def derive(case):
    """Add the model's prediction and the ratios, each against a baseline measured in this run (``over``): a
    graph row's ``step_speedup`` against the graph-mode sequential step, its ``graph_speedup`` against its own
    configuration's eager step (it has no backward pass of its own)."""
    def twin(r):
        return r["schedule"], r["k"], r.get("one_pass"), r["blas_threads"]

    timed = [r for r in case if "refused" not in r]
    ours = [r for r in timed if not r["schedule"].startswith("torch")]
    sequential = {(r["blas_threads"], r["graph"]): r for r in ours
                  if r["schedule"] == BASELINE and not r.get("one_pass")}
    eager, plain = {twin(r): r for r in ours if not r["graph"]}, [r for (_, g), r in sequential.items() if not g]
    best = {key: min(plain, key=lambda r: r[key]["median"]) for key in ("step_ms", "backward_ms")}
    for r in timed:
        torch = r["schedule"].startswith("torch")
        if torch:  # PyTorch writes nabla_w and reads it again: a plain step's floor, at a copy's GB/s on its threads
            gbps = sequential.get((r["blas_threads"], False), best["step_ms"])["copy_gbps"]
            r.update(floor([r["N"]] * r["L"], r["B"], r["dtype"], "plain", gbps, r.get("optimizer", "sgd")),
                     copy_gbps=gbps)
        seq = None if torch else sequential.get((r["blas_threads"], r["graph"]))
        r.update(floor_speedup=r["floor_ms"] / r["step_ms"]["median"], best_sequential=r is best["step_ms"],
                 step_speedup_vs_best_sequential=over(best["step_ms"], r),
                 backward_speedup_vs_best_sequential=over(best["backward_ms"], r, "backward_ms"),
                 step_speedup=over(seq, r), backward_speedup=over(seq, r, "backward_ms"),
                 graph_speedup=over(eager.get(twin(r)), r) if seq and r["graph"] else None,
                 predicted_saving=None, measured_saving=None)
        if not torch:  # the seed's model speaks of sequential and leapfrog only
            f = r["f1_ms"] + r["f2_ms"] + r["f3_ms"]
            r["predicted_saving"] = {Leapfrog.name: (1 - 1 / r["k"]) * r["f3_ms"] / f if r["k"] else 0.0,
                                     BASELINE: 0.0}.get(r["schedule"])
        if seq and r["backward_ms"]:
            forward, backward = r["forward_ms"]["median"], seq["backward_ms"]["median"]
            r["measured_saving"] = (backward - r["backward_ms"]["median"]) / (forward + backward)
    return case


def over(base, r, key="step_ms"):
    """``base``'s median ``key`` over ``r``'s: r's speed-up over it (> 1: faster); None where either has none."""
    return base[key]["median"] / r[key]["median"] if base and base[key] and r[key] else None
