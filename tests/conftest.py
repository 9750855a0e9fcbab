"""Shared fixtures and hooks: the backends a test body runs on, the GPU half skipped with one reason that
says why, the CuPy stand-in (``tests/harness/fake_cupy``) under each order in which it interleaves its queues,
each kind of network, the matplotlib figures a test saves, a last line that counts the skipped tests by
reason, and pytest-xdist's workers by default on a machine without a GPU. Shared helpers live in
``tests/harness`` (``helpers.py``, ``networks.py``)."""

import collections
import sys

import pytest

import no_gpu_cupy
from leapfrog_gpu.backends import cuda_status

pytest.register_assert_rewrite("helpers")  # its asserts explain themselves as a test module's do
from helpers import STANDIN_ORDERS, gpu, install_standin  # noqa: E402
import networks  # noqa: E402

BACKENDS = ["numpy", pytest.param("cupy", marks=[pytest.mark.gpu, gpu])]


@pytest.fixture(params=BACKENDS)
def backend_name(request):
    return request.param


@pytest.fixture(params=networks.NAMES)
def network_name(request):
    """Each kind of network: "MLP", "RNN", "DagNet" (``networks.network`` makes it, ``networks.network_batch``
    its batches)."""
    return request.param


@pytest.fixture(params=STANDIN_ORDERS)
def standin(request, monkeypatch):
    """The CuPy stand-in, under each of its orders."""
    return install_standin(monkeypatch, request.param, seed=len(request.node.name))


@pytest.fixture
def backend(standin):
    """A ``CupyBackend`` on the CuPy stand-in (``standin``), closed after the test."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as cupy_backend:
        yield cupy_backend


@pytest.fixture
def cupy_without_gpu(monkeypatch):
    """``import cupy`` gives ``no_gpu_cupy``'s CuPy, which imports but finds no usable GPU."""
    from leapfrog_gpu import backends

    cupy = no_gpu_cupy.module()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(backends, "_said", set())
    return cupy


@pytest.fixture
def figures(monkeypatch):
    """Every matplotlib figure saved while the test runs, with the renderer that drew it."""
    import matplotlib.figure

    saved, savefig = [], matplotlib.figure.Figure.savefig

    def keep(figure, *args, **kwargs):
        savefig(figure, *args, **kwargs)
        figure.renderer = figure.canvas.get_renderer()  # before the figure is closed
        saved.append(figure)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return saved


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which resolves -n auto
def pytest_cmdline_main(config):
    """``python -m pytest`` runs on every core: ``-n auto --dist loadfile`` where pytest-xdist is installed and
    neither ``-n`` nor ``--dist`` is given (``-n 0``: one process). Not where a GPU is usable: the GPU tests
    share its one device and run in one process, in the order given (profiling/device_check.sh), unless
    ``-n`` says otherwise. Without pytest-xdist, or with ``-p no:xdist``, the tests run in this process; in
    pyproject's ``addopts``, ``-n`` would be an unknown option wherever pytest-xdist is missing (a GPU machine
    with pytest alone)."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):  # a worker: never again
        return
    if config.option.numprocesses is None and config.option.dist == "no" and not config.option.distload \
            and not cuda_status().usable:
        config.option.numprocesses = "auto"
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # the order of pytest_collection_modifyitems


def pytest_collection_modifyitems(config, items):
    """In a pytest-xdist worker, the modules marked ``slow`` first, each module's tests in their order: under
    ``pytest_cmdline_main``'s ``--dist loadfile`` the workers are handed the modules in this order, so the long
    ones start first and the short ones fill in until both end (xdist's own order, most tests first, left the
    modules of a few long tests to the end: one worker ran 14 s longer than the other). In one process (a GPU
    machine's run) the order given."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_terminal_summary(terminalreporter):
    """``skipped by reason: 1032 no usable GPU: ...; 2 the PyTorch anchor needs torch ...``, most first."""
    reasons = collections.Counter()
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.write_line(
            "skipped by reason: " + "; ".join(f"{count} {reason}" for reason, count in reasons.most_common()))


def pytest_addoption(parser):
    parser.addoption("--chaos-full", action="store_true",
                     help="run the full chaos suite (over 500 steps) instead of the short CI one")


@pytest.fixture
def chaos_steps(request):
    """Steps per chaos configuration: 12 with --chaos-full (576 steps in all), else 4."""
    return 12 if request.config.getoption("--chaos-full") else 4


@pytest.fixture(params=STANDIN_ORDERS)
def standin_without_nvmath(request, monkeypatch):
    """The CuPy stand-in, under each of its orders, where nvmath-python is missing: cuBLAS through CuPy only."""
    return install_standin(monkeypatch, request.param, seed=len(request.node.name), nvmath=False)
