"""``leapfrog-bench``'s measurements of one MLP: every configuration timed in alternation, the anchors
measured in the same run (``measure_network``), and the ratios derived from them (``derive``).

For every network ``[N] * L`` and batch size B, after a warm-up and over ``--repeats`` repeats
(median, p20, p80): the SGD step and the backward pass for every schedule at every BLAS setting; the
forward pass; and f1, f2, f3, the per-layer costs of equations (2)(3), (5) and (7) on their own, with
the ops the schedules run (``ops.forward``, ``ops.backward``, ``ops.nabla_w``). Beside the measured
saving of a pass, the model's prediction (1 - 1/k) f3 / f, f = f1 + f2 + f3 (docs/design.md §1). Every
record has its own bytes floor, that of its update (``traffic.UPDATES``), and its step's ratio to it.
"""

import numpy as np

from ...mlp import autotune
from ...core import capture as graphs
from ...backends import get_backend, timing
from ...mlp.network import MLP
from ...core.schedules import Leapfrog
from ...core.optimizers import SGD, Adam, AdamW
from .. import timeline
from ..schedules import make_schedule, takes_k
from . import runner, torch_anchor, traffic
from .report import label

ETA = 1e-3  # small enough that the timed steps keep the activations away from saturation
OPTIMIZERS = {"sgd": SGD(ETA), "momentum": SGD(ETA, momentum=0.9), "adam": Adam(ETA), "adamw": AdamW(ETA)}
"""``--optimizer``'s steps by name: ours ``train_step(x, y, OPTIMIZERS[name], ...)``, PyTorch's torch.optim's
class of the same name and hyper-parameters (``torch_anchor.torch_optimizer``)."""


def copy_bandwidth(backend, threads):
    """GB/s of a copy on ``backend`` at the BLAS setting ``threads``: what a step's bytes floor is taken at."""
    with autotune.blas_limit(threads):
        return timing.copy_bandwidth(backend)["median"]


def configurations(args):
    """The ``(schedule name, k)`` of every configuration measured: sequential first, then each of
    ``--schedule`` at each k of ``--k`` but ``auto`` (k = 0 where the schedule takes none)."""
    ks = [k for k in args.k if k != "auto"]
    return [("sequential", 0)] + [(name, k) for name in args.schedule if name != "sequential"
                                  for k in (ks if takes_k("mlp", name) else [0])]


def measure_network(args, sizes, batch, settings, specs, bandwidth, with_torch, optimizer="sgd"):
    """Records for every schedule at every BLAS setting (and, with ``--k auto``, the configuration
    ``autotune.tune`` picks) on one network, and ``with_torch`` PyTorch's: on the CPU in the same
    alternation (``_torch_steps``), on a GPU after ours (``_measure_torch``); every step by the
    ``OPTIMIZERS[optimizer]``, each record holding its name.

    The BLAS limit is switched between blocks of timed calls, so that all configurations are measured
    in alternation (``timing.measure_in_blocks``): load that changes during the run shifts them alike,
    and their ratios stay meaningful on a busy machine. PyTorch's CPU steps take their turns too, in
    blocks of their own per thread count.
    """
    rng = np.random.default_rng(0)
    reps, warm, rule = args.repeats, args.warmup, OPTIMIZERS[optimizer]
    with get_backend(args.backend) as backend, MLP(sizes, activation=args.activation, dtype=args.dtype,
                                                   backend=backend) as net:
        x, y = _batch(rng, sizes, batch, args.dtype)
        net.backprop(x, y)
        plan = net.plan(batch)
        tuning = None
        if "auto" in args.k:
            ks = [k for k in args.k if k != "auto"] or autotune.KS
            tuning = autotune.tune(net, batch, ks=ks, blas_threads=None if args.backend == "cupy" else settings,
                                   fused=args.fused)
        base = {}
        for threads in settings:
            with autotune.blas_limit(threads):
                f = layer_costs(net, plan, reps, warm)
                forward = timing.summary(timing.measure(backend, plan.forward, reps, warm))
            base[threads] = {
                "backend": args.backend, "backend_repr": repr(backend), "device": runner.device_name(backend),
                "dtype": args.dtype, "N": sizes[0], "optimizer": optimizer,
                "L": len(sizes), "B": batch, "blas_threads": threads, "repeats": reps, "forward_ms": forward, **f,
                "forward_floor_ms": traffic.forward_bytes(sizes, batch, np.dtype(args.dtype).itemsize)
                / (bandwidth[threads] * 1e6), "copy_gbps": bandwidth[threads]}
        runs = [(name, make_schedule("mlp", name, k, fused=args.fused), threads, False, False)
                for threads in settings for name, k in specs]
        if args.one_pass:  # beside each sequential and leapfrog configuration, its one-pass step
            runs += [(name, make_schedule("mlp", name, k, one_pass=True), threads, False, False)
                     for threads in settings for name, k in specs if name in ("sequential", "leapfrog")]
        if args.graph:  # a graph twin of each configuration that can be captured, captured now
            runs += [(name, schedule, threads, False, True) for name, schedule, threads, _, _ in runs
                     if graphs.refusal(plan, schedule) is None]
            for _, schedule, threads, _, graph in runs:
                if graph:
                    with autotune.blas_limit(threads):
                        net.train_step(x, y, rule, schedule, graph=True)
            net.synchronize()
        if tuning is not None:
            name = "leapfrog" if isinstance(tuning.schedule, Leapfrog) else "sequential"
            runs.append((name, tuning.schedule, tuning.blas_threads, True, False))
        eager = [run for run in runs if not run[4]]
        on_cpu = with_torch and backend.name == "numpy"
        anchors = _torch_steps(args, sizes, batch, settings, optimizer) if on_cpu else []
        refused = [r for r in anchors if isinstance(r, dict)]
        anchors = [a for a in anchors if not isinstance(a, dict)]
        calls = [lambda s=schedule, g=graph: net.train_step(x, y, rule, s, graph=g) for _, schedule, _, _, graph
                 in runs]
        keys = [threads for _, _, threads, _, _ in runs]
        contexts = [lambda t=t: autotune.blas_limit(t) for t in keys]
        calls += [anchor.step for _, _, anchor in anchors]
        keys += [("torch", threads) for _, threads, _ in anchors]
        contexts += [lambda t=threads: torch_anchor.num_threads(t) for _, threads, _ in anchors]
        steps = timing.measure_in_blocks(backend, calls, keys, reps, warm, contexts)
        backwards = iter(_measure_runs(backend, eager, reps, warm, lambda s, g: plan.backward(s)))
        records = [{**base[threads], **floor(sizes, batch, args.dtype, traffic.update_of(schedule), bandwidth[threads],
                                             optimizer),
                    "schedule": name, "k": schedule.k, "fused": schedule.fused, "one_pass": schedule.one_pass,
                    "auto": auto, "graph": graph, "step_ms": timing.summary(step),
                    "backward_ms": None if graph else timing.summary(next(backwards))}
                   for (name, schedule, threads, auto, graph), step in zip(runs, steps)]
    for (mode, threads, anchor), step in zip(anchors, steps[len(runs):]):
        with torch_anchor.num_threads(threads):
            records.append(_torch_record(args, sizes, batch, "cpu", mode, threads, step, anchor.backward_ms(reps),
                                         optimizer))
    if with_torch and not anchors:
        records += _measure_torch(args, sizes, batch, optimizer)
    return records + refused


def floor(sizes, batch, dtype, update, gbps, optimizer="sgd"):
    """``{"update", "bytes_per_step", "floor_ms"}``: the bytes a step of ``update`` by ``optimizer`` must move
    (``traffic.step_bytes``) and the time they take at ``gbps`` GB/s."""
    step_bytes = traffic.step_bytes(sizes, batch, np.dtype(dtype).itemsize, update, len(OPTIMIZERS[optimizer].SLOTS))
    return {"update": update, "bytes_per_step": step_bytes, "floor_ms": step_bytes / (gbps * 1e6)}


def _batch(rng, sizes, batch, dtype):
    """A random batch ``(x, y)`` of ``batch`` columns on the host, where training data lives: ``copy_in``
    stages a NumPy batch through pinned memory without blocking, while a CuPy batch's check for NaN
    would wait for the device every step."""
    return rng.random((sizes[0], batch)).astype(dtype), rng.random((sizes[-1], batch)).astype(dtype)


def _measure_runs(backend, runs, repeats, warmup, call):
    """Times of ``call(schedule, graph)`` for every run, the BLAS limit switched between blocks of them."""
    keys = [threads for _, _, threads, _, _ in runs]
    return timing.measure_in_blocks(
        backend, [lambda s=schedule, g=graph: call(s, g) for _, schedule, _, _, graph in runs], keys, repeats, warmup,
        [lambda t=t: autotune.blas_limit(t) for t in keys])


def stamped_steps(args, case):
    """The timeline of each of our eager configurations in ``case`` (one network's records; the ``--k
    auto`` choice is a repeat of one of them, and a graph step is one launch that nothing can stamp
    inside, ``graphs.step``): ``args.repeats`` SGD steps with every launch stamped,
    interleaved with as many plain ones. Adds ``"timeline"`` to each record: the analysis's medians and
    the step's median time plain and stamped. Returns the chart's panels."""
    first = case[0]
    sizes, batch = [first["N"]] * first["L"], first["B"]
    rng = np.random.default_rng(0)
    panels = []
    with get_backend(args.backend) as backend, MLP(sizes, activation=args.activation, dtype=args.dtype,
                                                   backend=backend) as net:
        x, y = _batch(rng, sizes, batch, args.dtype)
        for r in case:
            if r["schedule"].startswith("torch") or r["auto"] or r["graph"]:
                continue
            schedule = make_schedule("mlp", r["schedule"], r["k"], r["fused"], r["one_pass"])
            stamps = timing.Timeline(backend)

            def stamped(schedule=schedule, stamps=stamps):
                with stamps.step():
                    net.sgd_step(x, y, ETA, schedule)

            with autotune.blas_limit(r["blas_threads"]):
                plain, with_stamps = timing.measure_interleaved(
                    backend, [lambda s=schedule: net.sgd_step(x, y, ETA, s), stamped], args.repeats, args.warmup)
            intervals = [i for i in stamps.intervals() if i.step >= args.warmup]
            analysis = timeline.analyse(intervals)
            r["timeline"] = {**analysis["summary"], "step_ms_plain": timing.summary(plain),
                             "step_ms_stamped": timing.summary(with_stamps),
                             "cost": float(np.median(with_stamps) / np.median(plain))}
            title = (label(r).rstrip("*") + (f" k={r['k']}" if r["k"] else "")
                     + ("" if r["blas_threads"] is None else f", BLAS {r['blas_threads']}"))
            panels.append({"label": title, "bench": r, "intervals": intervals, "analysis": analysis})
    return panels


def layer_costs(net, plan, repeats, warmup):
    """``{"f1_ms", "f2_ms", "f3_ms"}``: median per-layer time of (2)(3), of (5), and of (7), each timed
    alone as one sweep over the layers on the main stream, by the ops the schedules run."""
    backend, ops, w = net.backend, net.backend.ops, plan.w
    hidden = range(net.L - 1, 1, -1)

    def f1():
        for l in net.layer_numbers:
            ops.forward(plan.z[l], plan.a[l], plan.sp[l], w[l], plan.a[l - 1], plan.b[l], plan.activation[l])

    def f2():
        for l in hidden:
            ops.backward(plan.delta[l], w[l + 1], plan.delta[l + 1], plan.sp[l])

    def f3():
        for l in net.layer_numbers:
            ops.nabla_w(plan.nabla_w[l], plan.delta[l], plan.a[l - 1])

    costs = {}
    sweeps = (("f1_ms", f1, len(net.layer_numbers)), ("f2_ms", f2, len(hidden)), ("f3_ms", f3, len(net.layer_numbers)))
    for name, sweep, count in sweeps:
        if count == 0:
            costs[name] = 0.0
            continue
        ms = timing.measure(backend, lambda s=sweep: backend.launch(backend.main, name, s), repeats, warmup)
        costs[name] = float(np.median(ms)) / count
    return costs


TORCH_STEPS = {"torch-autograd": {}, "torch-sgd-foreach": {"optimizer": "foreach"},
               "torch-sgd-fused": {"optimizer": "fused"}, "torch-compile": {"compiled": True},
               "torch-cuda-graph": {"graph": True}}
"""PyTorch's steps by record name: the loop update, ``torch.optim.SGD(foreach=True)``, ``(fused=True)``,
``torch.compile`` (``--torch-compile``), and the CUDA graph (``--graph`` on a GPU)."""


def _torch_modes(args, device, optimizer="sgd"):
    """The keys of ``TORCH_STEPS`` measured: the eager steps (for an optimizer other than SGD, torch.optim's
    ``torch-NAME-foreach`` and ``-fused``), with ``--torch-compile`` also compiled, with ``--graph`` on a GPU
    also captured as a CUDA graph (SGD's loop update only)."""
    plain = optimizer == "sgd"
    modes = ["torch-autograd"] * plain + [f"torch-{optimizer}-foreach", f"torch-{optimizer}-fused"]
    graphed = args.graph and plain and device == "cuda"
    return modes + ["torch-compile"] * args.torch_compile + ["torch-cuda-graph"] * graphed


def _torch_kwargs(mode, optimizer):
    """``SGDStep``'s arguments for ``mode`` of ``_torch_modes`` with ``optimizer``."""
    rule = {} if optimizer == "sgd" else {"rule": OPTIMIZERS[optimizer]}
    return {**TORCH_STEPS.get(mode, {"optimizer": mode.rsplit("-", 1)[1]}), **rule}


def _torch_steps(args, sizes, batch, settings, optimizer="sgd"):
    """``(mode, threads, torch_anchor.SGDStep)`` for every mode of ``_torch_modes`` on the CPU at every
    thread count of ``settings``, as ours at every BLAS setting, each warmed up (compiled, if so), all
    on one network; a fused mode this build of torch refuses, the record that says why instead."""
    anchors, network = [], torch_anchor.mlp(sizes, batch, args.dtype)  # one network: 2 GB at N = 4096
    for threads in settings:
        with torch_anchor.num_threads(threads):
            for mode in _torch_modes(args, "cpu", optimizer):
                kwargs = _torch_kwargs(mode, optimizer)
                why = kwargs.get("optimizer") == "fused" and torch_anchor.fused_refusal("cpu", kwargs.get("rule"))
                if why:
                    anchors.append({"N": sizes[0], "L": len(sizes), "B": batch, "dtype": args.dtype, "schedule": mode,
                                    "k": 0, "blas_threads": threads, "optimizer": optimizer, "refused": why})
                    continue
                anchor = torch_anchor.SGDStep(sizes, batch, args.dtype, "cpu", args.activation, warmup=args.warmup,
                                              network=network, **kwargs)
                for _ in range(anchor.warmup):
                    anchor.step()
                anchors.append((mode, threads, anchor))
    return anchors


def _measure_torch(args, sizes, batch, optimizer="sgd"):
    """PyTorch on a GPU, after ours, as it comes: a record for each mode of ``_torch_modes``."""
    return [_torch_record(args, sizes, batch, "cuda", mode, None,
                          *torch_anchor.measure(sizes, batch, args.dtype, "cuda", args.activation, None, args.repeats,
                                                args.warmup, **_torch_kwargs(mode, optimizer)), optimizer)
            for mode in _torch_modes(args, "cuda", optimizer)]


def _torch_record(args, sizes, batch, device, mode, threads, step, backward, optimizer="sgd"):
    """The record of PyTorch's ``mode`` on ``device`` at ``threads`` from its times ``step`` and ``backward``
    (or None)."""
    import torch

    return {"backend": f"torch-{torch.__version__}",
            "device": torch.cuda.get_device_name() if device == "cuda" else runner.cpu_name(), "dtype": args.dtype,
            "N": sizes[0], "L": len(sizes), "B": batch, "blas_threads": threads, "repeats": args.repeats,
            "optimizer": optimizer, "schedule": mode, "k": 0, "fused": False, "one_pass": False, "auto": False,
            "graph": mode == "torch-cuda-graph", "step_ms": timing.summary(step),
            "backward_ms": None if backward is None else timing.summary(backward),
            "forward_ms": None, "f1_ms": None, "f2_ms": None, "f3_ms": None, "copy_gbps": None}


def derive(case):
    """Add the model's prediction and the ratios, each against a baseline measured in this run.

    A graph row's ``step_speedup`` is against the graph-mode sequential step, and its
    ``graph_speedup`` against its own configuration's eager step; it has no backward pass of its own.
    """
    ours = [r for r in case if not r["schedule"].startswith("torch")]
    sequential = {(r["blas_threads"], r["graph"]): r for r in ours
                  if r["schedule"] == "sequential" and not r["auto"] and not r.get("one_pass")}
    eager = {(r["schedule"], r["k"], r.get("one_pass"), r["blas_threads"]): r for r in ours
             if not r["graph"] and not r["auto"]}
    best_step = min((r for (_, graph), r in sequential.items() if not graph), key=lambda r: r["step_ms"]["median"])
    best_backward = min((r for (_, graph), r in sequential.items() if not graph),
                        key=lambda r: r["backward_ms"]["median"])
    for r in (r for r in case if "refused" not in r):
        if r["schedule"].startswith("torch"):  # PyTorch writes nabla_w and reads it again: a plain step's floor
            sizes = [r["N"]] * r["L"]
            gbps = best_step["copy_gbps"]
            r.update(floor(sizes, r["B"], r["dtype"], "plain", gbps, r.get("optimizer", "sgd")), copy_gbps=gbps)
        r["floor_speedup"] = r["floor_ms"] / r["step_ms"]["median"]
        r["step_speedup_vs_best_sequential"] = best_step["step_ms"]["median"] / r["step_ms"]["median"]
        r["backward_speedup_vs_best_sequential"] = (None if r["backward_ms"] is None else
                                                    best_backward["backward_ms"]["median"] / r["backward_ms"]["median"])
        r["best_sequential"] = r is best_step
        if r["schedule"].startswith("torch"):
            r.update(predicted_saving=None, measured_saving=None, backward_speedup=None, step_speedup=None,
                     graph_speedup=None)
            continue
        seq = sequential[r["blas_threads"], r["graph"]]
        f = r["f1_ms"] + r["f2_ms"] + r["f3_ms"]
        k = r["k"]
        model = {"leapfrog": (1 - 1 / k) * r["f3_ms"] / f if k else 0.0, "sequential": 0.0}
        r["predicted_saving"] = model.get(r["schedule"])  # the seed's model speaks of these two only
        r["step_speedup"] = seq["step_ms"]["median"] / r["step_ms"]["median"]
        r["graph_speedup"] = None
        if r["graph"]:
            twin = eager[r["schedule"], r["k"], r.get("one_pass"), r["blas_threads"]]
            r["graph_speedup"] = twin["step_ms"]["median"] / r["step_ms"]["median"]
            r.update(measured_saving=None, backward_speedup=None)
            continue
        seq_backward = seq["backward_ms"]["median"]
        r["measured_saving"] = (seq_backward - r["backward_ms"]["median"]) / (r["forward_ms"]["median"] + seq_backward)
        r["backward_speedup"] = seq_backward / r["backward_ms"]["median"]
        if r["auto"]:  # slower beyond noise: its step's p20-p80 range lies wholly above the best sequential one's
            r["auto_within_noise"] = r["step_ms"]["p20"] <= best_step["step_ms"]["p80"]
    return case


