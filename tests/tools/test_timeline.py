"""The stream timeline: every launch stamped once, on its own stream, in an order the schedule allows
(host streams, the CuPy backend on the stand-in, and on a GPU), nothing stamped when it is off; every
network's gradients named as such, on their unit's worker, and drawn so; and its analysis (busy time,
worker overlap, idle gaps of the main stream) on intervals worked by hand."""

import errno
import json
import os
import threading
import time

import numpy as np
import pytest

from helpers import NO_GPU, STANDIN_ORDERS, batch, case_id, dag_data, install_standin, residual_net, to_numpy
from leapfrog_gpu import MLP, RNN, Leapfrog, Sequential
from leapfrog_gpu.backends import cuda_available, get_backend
from leapfrog_gpu.backends.timing import Interval, Timeline
from leapfrog_gpu.core import calibrate, launches
from leapfrog_gpu.tools import cli, timeline

SIZES = [7, 13, 5, 11, 3]  # L = 5: layers 2..5
L = len(SIZES)


@pytest.fixture(params=["numpy", *(f"stand-in {order}" for order in STANDIN_ORDERS),
                        pytest.param("cupy", marks=[pytest.mark.gpu, pytest.mark.skipif(not cuda_available(),
                                                                                        reason=NO_GPU)])])
def backend(request, monkeypatch):
    """Host streams; the CuPy backend on the stand-in, whose queues run at synchronize in each of its
    orders and whose timing events read the clock when their stream reaches them; and on a GPU."""
    if request.param == "numpy":
        with get_backend("numpy") as host:
            yield host
        return
    if request.param.startswith("stand-in"):
        install_standin(monkeypatch, request.param.split()[1])
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as device:
        yield device


def expected_launches(backend, k):
    """(stream, name) of every launch of one unfused SGD step under Leapfrog(k), from the schedule's
    definition (docs/design.md §2): eta / B and the chain on main, (6)(7) of layer l on worker l mod k. Host
    streams copy x and y in by a launch too; CuPy copies without one."""
    main = [("main", "copy_in")] * 2 if backend.name == "numpy" else []
    main += [("main", "eta / B")] + [("main", f"z[{l}]") for l in range(2, L + 1)]
    main += [("main", f"delta[{l}]") for l in range(L, 1, -1)] + [("main", f"update[{l}]") for l in range(2, L + 1)]
    workers = [(f"worker{l % k}", f"gradients[{l}]") for l in range(2, L + 1)]
    return sorted(main + workers)


def stamped_steps(backend, schedule, steps):
    with MLP(SIZES, backend=backend) as net:
        x, y = batch(SIZES, 3, dtype=np.float32)
        net.sgd_step(x, y, 0.1, schedule)  # not stamped: no timeline is on
        stamps = Timeline(backend)
        for _ in range(steps):
            with stamps.step():
                net.sgd_step(x, y, 0.1, schedule)
        return stamps.intervals()


def test_the_calibration_of_leapfrog_auto_is_not_stamped_into_the_step_that_makes_it(backend):
    """The first step of ``Leapfrog("auto")`` at a batch size times every candidate's pass before its own: those
    passes are no step's, and stamped they made that step hold hundreds of launches and the most worker overlap."""
    with MLP(SIZES, backend=backend) as net:
        x, y = batch(SIZES, 3, dtype=np.float32)
        stamps = Timeline(backend)
        with stamps.step():
            net.sgd_step(x, y, 0.1, Leapfrog("auto"))
        k = calibrate.chosen(net.plan(3)).k  # Sequential()'s gradients run on the main stream
        want = expected_launches(backend, max(k, 1))
        assert sorted((i.stream, i.name) for i in stamps.intervals()) == sorted(
            (stream if k else "main", name) for stream, name in want)


@pytest.mark.parametrize("k", [1, 2, 3], ids=lambda k: case_id(k=k))
def test_every_launch_stamped_once_on_its_stream_in_an_order_the_schedule_allows(backend, k):
    intervals = stamped_steps(backend, Leapfrog(k), steps=3)
    assert backend.timeline is None
    steps = timeline.by_step(intervals)
    assert list(steps) == [0, 1, 2]
    for n, step in steps.items():
        assert sorted((i.stream, i.name) for i in step) == expected_launches(backend, k)
        at = {i.name: i for i in step}
        for i in step:
            assert 0 <= i.start <= i.end
        for l in range(2, L + 1):  # read after write: (6)(7) of layer l start once delta^l has ended
            assert at[f"gradients[{l}]"].start >= at[f"delta[{l}]"].end
        join = min(at[f"update[{l}]"].start for l in range(2, L + 1))  # the join: every worker done
        assert all(i.end <= join for i in step if i.stream != "main")
        for stream in {i.stream for i in step}:  # a stream runs one launch at a time, in launch order
            mine = [i for i in step if i.stream == stream]
            assert all(a.end <= b.start for a, b in zip(mine, mine[1:]))
        if n:  # the next step's chain starts after this one's update
            assert min(i.start for i in step) >= max(i.end for i in steps[n - 1] if i.stream == "main")


def test_off_by_default_and_one_step_at_a_time(backend):
    assert backend.timeline is None
    intervals = stamped_steps(backend, Sequential(), steps=1)
    assert {i.stream for i in intervals} == {"main"} and {i.step for i in intervals} == {0}
    assert len(intervals) == len(expected_launches(backend, 1))  # the unstamped step before is not in it
    assert intervals[0].start == 0
    stamps = Timeline(backend)
    with stamps.step(7) as n:
        assert n == 7 and backend.timeline is stamps
        with pytest.raises(RuntimeError, match="a timeline is already recording"):
            with Timeline(backend).step():
                pass
    assert backend.timeline is None and stamps.next_step == 8 and stamps.intervals() == []


def test_cuda_stamps_are_timing_events_recorded_on_the_launch_stream(standin, monkeypatch):
    recorded = {}

    class Spy(standin.cuda.Event):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            recorded[id(self)] = ("made", kwargs.get("disable_timing", False))

        def record(self, stream=None):
            recorded[id(self)] = ("recorded on", stream)
            super().record(stream)

    monkeypatch.setattr(standin.cuda, "Event", Spy)
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as backend, MLP(SIZES, backend=backend) as net:
        stamps = Timeline(backend)
        with stamps.step():
            net.sgd_step(*batch(SIZES, 2, dtype=np.float32), 0.1, Leapfrog(2))
        streams = {"main": backend.main, "worker0": backend.workers(2)[0], "worker1": backend.workers(2)[1]}
    assert len(stamps.stamps) == len(expected_launches(backend, 2))
    for stamp in stamps.stamps:
        assert recorded[id(stamp.start)] == recorded[id(stamp.end)] == ("recorded on", streams[stamp.stream])


def test_host_stamps_bracket_the_operation_where_it_runs():
    """Taken on the stream's thread when the operation runs, not on the caller when it is enqueued."""
    ran = {}

    def work(name, seconds):
        ran[name] = (time.perf_counter_ns(), threading.current_thread().name)
        time.sleep(seconds)

    with get_backend("numpy") as backend:
        worker = backend.workers(1)[0]
        stamps = Timeline(backend)
        with stamps.step():
            backend.launch(backend.main, "first", work, "first", 0.02)
            backend.launch(worker, "second", work, "second", 0.01)
            backend.launch(backend.main, "third", work, "third", 0.0)
        enqueued = time.perf_counter_ns()  # the clock, read once everything was enqueued
        backend.synchronize()
    marks = {stamp.name: stamp for stamp in stamps.stamps}  # host stamps are perf_counter_ns readings
    for name, stream, seconds in (("first", "main", 0.02), ("second", "worker0", 0.01), ("third", "main", 0.0)):
        stamp = marks[name]
        assert stamp.stream == stream and ran[name][1] == f"leapfrog-{stream}"
        assert stamp.start <= ran[name][0] <= stamp.end and stamp.end - stamp.start >= seconds * 1e9
    assert marks["third"].start >= marks["first"].end > enqueued  # run in stream order, after the enqueueing


def test_a_launch_that_raises_is_left_out(backend):
    """Its error reaches ``intervals()``, which synchronizes, as after any step; it and the launches
    after it, which a failed step does not run, leave no interval."""
    def fail():
        raise ZeroDivisionError("planted")

    xp = backend.xp
    counts = xp.zeros(3)
    backend.synchronize()  # CuPy fills it on the default stream, which main does not wait for
    stamps = Timeline(backend)
    with stamps.step():
        backend.launch(backend.main, "fine", xp.add, counts, 1, counts)
        backend.launch(backend.main, "fails", fail)
        backend.launch(backend.main, "after", xp.add, counts, 1, counts)
    with pytest.raises(ZeroDivisionError, match="planted"):
        stamps.intervals()
    assert [i.name for i in stamps.intervals()] == ["fine"]
    assert to_numpy(counts).tolist() == [1, 1, 1]  # "after" did not run


def test_a_graph_step_is_refused_while_stamping(backend):
    """A graph step is one launch, with nothing inside to stamp (and CUDA cannot read timing events back
    from a captured graph): inside ``timeline.step()`` it is refused before anything is enqueued,
    whether its graph is still to be captured or already is; outside, graph and eager steps run on."""
    with MLP(SIZES, backend=backend) as net:
        x, y = batch(SIZES, 3, dtype=np.float32)
        stamps = Timeline(backend)
        for captured in (False, True):
            before = [to_numpy(w) for w in net.weights]
            with stamps.step(), pytest.raises(ValueError, match="a graph step is one launch"):
                net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)
            assert all(np.array_equal(a, to_numpy(b)) for a, b in zip(before, net.weights)), captured
            assert stamps.stamps == [] and backend.timeline is None
            net.sgd_step(x, y, 0.1, Leapfrog(2), graph=True)  # captured on the first pass, launched on the second
        with stamps.step():
            net.sgd_step(x, y, 0.1, Leapfrog(2))
        assert sorted((i.stream, i.name) for i in stamps.intervals()) == expected_launches(backend, 2)


# -- every network's launches, named by role and unit ------------------------------------------------

TAU = 3
NETWORKS = {  # name -> (the network on a backend, a batch of it)
    "MLP": (lambda backend: MLP(SIZES, backend=backend), lambda net: batch(SIZES, 3)),
    **{f"RNN {cell}": (lambda backend, cell=cell: RNN([4, 6, 5, 3], cell=cell, output="every", backend=backend),
                       lambda net: batch([4, 3], 3, tau=TAU)) for cell in ("elman", "gru")},
    "DagNet residual": (residual_net, lambda net: dag_data(net, 3)),
}


@pytest.fixture
def figures(monkeypatch):
    """Every matplotlib figure saved while the test runs."""
    import matplotlib.figure

    saved, savefig = [], matplotlib.figure.Figure.savefig

    def keep(figure, *args, **kwargs):
        savefig(figure, *args, **kwargs)
        saved.append(figure)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return saved


@pytest.mark.parametrize("name", NETWORKS)
def test_every_gradient_launch_is_named_and_drawn_as_one_on_its_units_worker(name, figures, tmp_path):
    """Under Leapfrog(2) the workers run exactly the gradients (docs/design.md §2), of unit u on worker
    index(u) mod 2 (a layer's number, a node's place in topological order, from 2): each is classified
    ``gradients`` by its name, with u in its brackets, and drawn in the gradients' colour."""
    make, data = NETWORKS[name]
    with get_backend("numpy") as backend, make(backend) as net:
        stamps = Timeline(backend)
        with stamps.step():
            net.sgd_step(*data(net), 0.1, Leapfrog(2))
        intervals = stamps.intervals()
        index = getattr(net, "index", {l: l for l in net.parameters()})
        units = {str(u): f"worker{index[u] % 2}" for u in net.parameters()}
    on_workers = [i for i in intervals if i.stream != "main"]
    assert [i.name for i in on_workers if launches.role(i.name) != "gradients"] == []
    assert [i.name for i in intervals if i.stream == "main" and launches.role(i.name) == "gradients"] == []
    assert sorted({launches.unit(i.name) for i in on_workers}) == sorted(units)
    assert all(i.stream == units[launches.unit(i.name)] for i in on_workers), on_workers
    if name.startswith("RNN"):  # the recurrent layers' nabla_u among them
        assert {f"nabla_u[{l}]" for l in (2, 3)} <= {i.name for i in on_workers}
    timeline.save(tmp_path / "t.png", [{"label": name, "intervals": intervals}], {}, name)
    (figure,) = figures
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert legend == [role for role in [*launches.ROLES, launches.OTHER]
                      if role in {launches.role(i.name) for i in intervals}]
    assert {"forward", "chain", "gradients", "update"} <= set(legend)
    streams = sorted({i.stream for i in intervals}, key=lambda s: (s != "main", s))
    gradients = matplotlib_colour(timeline.COLOURS["gradients"])
    for bars in figure.axes[0].collections:
        row = round(float(bars.get_paths()[0].vertices[:, 1].mean()))
        assert (matplotlib_colour(bars.get_facecolor()[0]) == gradients) == (streams[row] != "main"), row


def matplotlib_colour(colour):
    import matplotlib.colors

    return matplotlib.colors.to_hex(colour)


def test_a_launch_is_named_what_unit():
    for name, role, unit in (("z[3]", "forward", "3"), ("delta[3]+update[4]", "chain", "3"),
                             ("scan[2, 4]", "chain", "2, 4"), ("nabla_b_hn[2]", "gradients", "2"),
                             ("gradients[norm]", "gradients", "norm"),
                             ("fused_update[5]", "gradients + update, fused", "5"),
                             ("update_b[5]", "update", "5"), ("copy_in", "copy", ""),
                             ("allreduce[2..4]", "sums across ranks", "2..4"), ("eta / B", "other", ""),
                             ("check_finite", "other", ""), ("clear", "other", "")):
        assert (launches.role(name), launches.unit(name)) == (role, unit), name


# -- the analysis, on intervals worked by hand (ns) --------------------------------------------------


def step_of(rows, step=0):
    return [Interval(step, stream, name, start, end) for stream, name, start, end in rows]


HAND = step_of([
    ("main", "z[2]", 100, 300), ("main", "delta[3]", 300, 400), ("main", "delta[2]", 600, 700),
    ("main", "update[2]", 1000, 1100),
    ("worker0", "gradients[3]", 350, 650),   # overlaps main on [350, 400] and [600, 650]: 100 of 300
    ("worker1", "gradients[2]", 700, 900),   # overlaps main nowhere: 0 of 200
    ("worker1", "nabla_b[2]", 850, 950),   # overlaps the launch before it: busy [700, 950] is 250
])


def test_busy_time_overlap_and_idle_gaps_of_one_step():
    result = timeline.analyse_step(HAND)
    assert result["span_ms"] == pytest.approx(1000e-6) and result["launches"] == 7
    assert result["busy_ms"] == pytest.approx({"main": 500e-6, "worker0": 300e-6, "worker1": 250e-6})
    assert list(result["busy_ms"]) == ["main", "worker0", "worker1"]
    assert result["overlap_with_main"] == pytest.approx({"worker0": 100 / 300, "worker1": 0.0})
    assert result["worker_overlap"] == pytest.approx(100 / 550)
    assert result["main_idle_ms"] == pytest.approx((200 + 300) * 1e-6)
    assert result["main_gaps"] == [{"ms": pytest.approx(300e-6), "at_ms": pytest.approx(600e-6), "after": "delta[2]",
                                    "before": "update[2]"},
                                   {"ms": pytest.approx(200e-6), "at_ms": pytest.approx(300e-6), "after": "delta[3]",
                                    "before": "delta[2]"}]


def test_the_communication_streams_sums_are_no_worker_time():
    """Under data parallelism the sums run on a stream of their own (``comm``), waiting on the chain: the share of
    worker time overlapping the main stream is the workers' alone (counted in, they took it from 18 % to 2 %)."""
    result = timeline.analyse_step(HAND + step_of([("comm", "allreduce[3]", 1100, 5100)]))
    assert result["busy_ms"]["comm"] == pytest.approx(4000e-6) and result["overlap_with_main"]["comm"] == 0.0
    assert result["worker_overlap"] == pytest.approx(100 / 550)


def test_a_main_launch_inside_another_leaves_no_gap_and_no_worker_means_no_share():
    result = timeline.analyse_step(step_of([("main", "a", 0, 500), ("main", "b", 100, 200), ("main", "c", 500, 600),
                                            ("main", "d", 650, 700)]))
    assert result["main_gaps"] == [{"ms": pytest.approx(50e-6), "at_ms": pytest.approx(600e-6), "after": "c",
                                    "before": "d"}]
    assert result["worker_overlap"] is None and result["overlap_with_main"] == {}


def main_alone(spans):
    """A step per ``{step: span}`` (ns), main alone in it, busy for the whole span."""
    return [i for n, span in spans.items() for i in step_of([("main", "z[2]", 10 * n, 10 * n + span)], n)]


def test_summary_takes_medians_and_shows_the_median_step():
    """The summary's span and busy time are the medians of the steps': one slow step (9000 ns among two of 1000, a
    preempted one) leaves them at 1000 ns, where the mean would be 3667."""
    summary = timeline.analyse(main_alone({0: 1000, 1: 3000, 2: 2000}))["summary"]
    assert summary["shown_step"] == 2 and summary["shown"] == "the median span" and summary["steps"] == 3
    assert summary["span_ms"] == pytest.approx(2000e-6) and summary["busy_ms"] == {"main": pytest.approx(2000e-6)}
    skewed = timeline.analyse(main_alone({0: 1000, 1: 1000, 2: 9000}))["summary"]
    assert skewed["span_ms"] == pytest.approx(0.001) and skewed["busy_ms"] == {"main": pytest.approx(0.001)}
    assert "worker time overlapping main: - (no worker stream)" in timeline.describe(summary)
    assert timeline.describe(summary).endswith("(medians of 3 steps)")
    assert timeline.describe({**summary, "steps": 1}).endswith("(medians of 1 step)")
    with pytest.raises(ValueError, match="the timeline holds no launch"):
        timeline.analyse([])


def test_the_chart_shows_the_step_with_the_most_overlap_where_any_has_some():
    """Worker overlap in steps 1 (100 of 200 ns) and 2 (100 of 100 ns, twice: the shorter one, 3, shown)."""
    steps = {0: [("main", "z[2]", 0, 1000), ("worker0", "gradients[2]", 1000, 1200)],
             1: [("main", "z[2]", 0, 1000), ("worker0", "gradients[2]", 900, 1100)],
             2: [("main", "z[2]", 0, 5000), ("worker0", "gradients[2]", 100, 200)],
             3: [("main", "z[2]", 0, 3000), ("worker0", "gradients[2]", 100, 200)]}
    summary = timeline.analyse([i for n, rows in steps.items() for i in step_of(rows, n)])["summary"]
    assert (summary["shown_step"], summary["shown"]) == (3, "the most overlap")
    assert summary["worker_overlap"] == pytest.approx(0.75)  # the median of 0, 1/2, 1 and 1


def test_save_writes_the_chart_and_every_interval(tmp_path):
    panels = timeline.save(tmp_path / "t.png", [{"label": "by hand", "intervals": HAND}], {"command": "test"},
                           "a network by hand")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["command"] == "test" and saved["title"] == "a network by hand"
    assert saved["panels"][0]["label"] == "by hand"
    assert [Interval(*row) for row in saved["panels"][0]["intervals"]] == HAND
    assert saved["panels"][0]["analysis"]["summary"]["worker_overlap"] == pytest.approx(100 / 550)
    assert panels[0]["analysis"] == saved["panels"][0]["analysis"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.png"]  # no temporary file left


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason=NO_GPU)
def test_training_window_on_the_gpu(tmp_path):
    from leapfrog_gpu.tools.train import command as train

    assert train.main(["--hidden", "5x24", "--quiet", "--epochs", "1", "--backend", "cupy", "--timeline",
                       str(tmp_path / "t.png"), "--profile-steps", "3:6"]) == 0
    panel = json.loads((tmp_path / "t.json").read_text())["panels"][0]
    intervals = [Interval(*row) for row in panel["intervals"]]
    assert {i.step for i in intervals} == {3, 4, 5} and all(0 <= i.start <= i.end for i in intervals)
    assert set(panel["analysis"]["summary"]["busy_ms"]) == {"main", "worker0", "worker1"}


def test_a_folder_that_cannot_be_written_is_refused_before_any_step(tmp_path, monkeypatch):
    """Said at the start, as --metrics and --checkpoint-dir are, not once the steps it stamps have run (exit 5): by
    the check every command's outputs take (``cli.output_refusal``), which tries to make a file there, since root
    passes any permission (``os.access``) but still cannot write in /proc."""
    assert timeline.refusal(str(tmp_path / "t.png")) is None
    if os.path.isdir("/proc/self"):
        assert timeline.refusal("/proc/t.png").startswith(
            "--timeline /proc/t.png: no file can be made in the folder /proc (")
        assert timeline.refusal("/proc/t.png") == cli.output_refusal("--timeline", "/proc/t.png")

    def refused(dir):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), dir)

    monkeypatch.setattr(cli.tempfile, "TemporaryFile", lambda dir: refused(dir) if dir == str(tmp_path) else None)
    assert timeline.refusal(str(tmp_path / "t.png")) == (f"--timeline {tmp_path / 't.png'}: no file can be made in "
                                                          f"the folder {tmp_path} ({os.strerror(errno.EACCES)}); give "
                                                          "a file in one where one can")


def test_the_overlap_of_an_nsys_trace_leaves_nccls_streams_out_as_the_docstrings_say():
    """overlap.py's share, as the timeline's, counts the worker streams alone, not a stream of NCCL's kernels
    (tests/tools/test_profiling_scripts.py measures it): both modules say so."""
    said = " ".join(timeline.__doc__.split())
    assert "every stream but the main one and those that run NCCL's kernels alone" in said
    assert "NCCL's too" not in said
