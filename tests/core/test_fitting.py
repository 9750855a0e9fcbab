"""``fit``, ``evaluate`` and ``predict`` (``core.fitting``): ``fit`` is the loop of ``train_step`` over seeded
permutations, bit for bit, and a run resumed from its state after any step goes on bit for bit; its metrics and
``evaluate``'s are the float64 computation from the network's outputs, ties in the argmax going to the first
class as numpy's; integer class labels are their one-hot targets, step for step; a bad argument is refused with
what to do, and nothing changes."""

import codecs
import contextlib
import gc
import inspect
import io
import json
import math
import os
import sys
import threading
import weakref

import numpy as np
import pytest
from tqdm import tqdm

from helpers import assert_bitwise_equal
from networks import NAMES, Mirror, network, network_batch
from leapfrog_gpu import MLP, RNN, SGD, Adam, Add, DagNet, Dense, ForwardNewton, Leapfrog, reference
from leapfrog_gpu.core import fitting
from leapfrog_gpu.rnn import reference as rnn_reference


def blobs(samples, seed=0):
    """Three clusters in 4 dimensions, ``x`` (4, samples), and their class labels (samples,)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, samples)
    centres = np.array([[2.0, 0, 0, 1], [0, 2.0, 0, -1], [0, 0, 2.0, 0]])
    return (centres[labels] + 0.5 * rng.standard_normal((samples, 4))).T, labels


def classifier(seed=1, **options):
    return MLP([4, 8, 3], activation="tanh", cost="cross_entropy", dtype="float64", seed=seed, backend="numpy",
               **options)


def host(params):
    return [np.array(array) for named in params.values() for array in named.values()]


# -- fit --------------------------------------------------------------------------------------------------


def test_fit_learns_and_every_metric_is_the_direct_computation():
    x, labels = blobs(120)
    x_test, labels_test = blobs(60, seed=1)
    with classifier() as net:
        metrics = net.fit(x, labels, 6, 16, 0.5, validation=(x_test, labels_test), progress=False)
        a = reference.feedforward(net.weights, net.biases, x_test, "tanh", "sigmoid")
        train = reference.cost(net.weights, net.biases, x, np.eye(3)[:, labels], "tanh", "cross_entropy") / 120
        test = reference.cost(net.weights, net.biases, x_test, np.eye(3)[:, labels_test], "tanh", "cross_entropy") / 60
    assert [list(m) for m in metrics] == [["epoch", "step", "train_loss", "test_loss", "test_accuracy",
                                           "samples_per_s", "seconds"]] * 6
    assert [(m["epoch"], m["step"]) for m in metrics] == [(e, 8 * e) for e in range(1, 7)]  # 8 batches: 7 of 16, 8
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"] / 2  # it learns
    assert metrics[-1]["train_loss"] == pytest.approx(train, rel=1e-12)
    assert metrics[-1]["test_loss"] == pytest.approx(test, rel=1e-12)
    assert metrics[-1]["test_accuracy"] == np.mean(np.argmax(a, axis=0) == labels_test) > 0.9
    assert all(m["samples_per_s"] > 0 and m["seconds"] > 0 for m in metrics)


@pytest.mark.parametrize("name", NAMES)
def test_fit_is_the_loop_of_train_step_over_seeded_permutations(name):
    """Ten samples in batches of 4 (4, 4, 2), two epochs, Adam under Leapfrog(2): every parameter bit for bit as
    the loop written out over ``default_rng(seed).permutation``; another seed gives other parameters, and
    ``shuffle=False`` is the loop in the samples' order."""
    x, y = network_batch(name, size=10)
    runs = {}
    for seed, shuffle in ((3, True), (3, True), (4, True), (3, False)):
        with network(name, "numpy", dtype="float64") as net:
            net.fit(x, y, 2, 4, Adam(0.01), Leapfrog(2), seed=seed, shuffle=shuffle, progress=False)
            runs.setdefault((seed, shuffle), []).append(host(net.parameters()))
    for seed, shuffle in ((3, True), (3, False)):
        rng = np.random.default_rng(seed)
        with network(name, "numpy", dtype="float64") as net:
            for _ in range(2):
                order = rng.permutation(10) if shuffle else np.arange(10)
                for start in (0, 4, 8):
                    columns = order[start:start + 4]
                    net.train_step(x[..., columns], y[..., columns], Adam(0.01), Leapfrog(2))
            assert_bitwise_equal(runs[seed, shuffle][0], host(net.parameters()))
    assert_bitwise_equal(runs[3, True][1], runs[3, True][0])  # the same seed: the same run
    assert not all(np.array_equal(a, b) for a, b in zip(runs[4, True][0], runs[3, True][0]))


def test_a_run_resumed_from_its_state_after_any_step_goes_on_bit_for_bit():
    """Stopped after step 5 (of 8 per epoch, by the step hook), its state through JSON, then resumed by a new
    ``Fitting`` on the same network: the straight run's parameters, and the hooks see every step once."""
    x, labels = blobs(60)
    with classifier() as straight:
        straight.fit(x, labels, 2, 8, SGD(0.3, momentum=0.9), progress=False)
        want = host(straight.parameters())
    seen = []

    @contextlib.contextmanager
    def stop_after_step_5(n):
        seen.append(n)
        yield
        if n == 5:
            raise KeyboardInterrupt

    with classifier() as net:
        first = fitting.Fitting(net, x, labels, 2, 8, SGD(0.3, momentum=0.9))
        with pytest.raises(KeyboardInterrupt):
            first.run(step=stop_after_step_5, progress=False)
        state = json.loads(json.dumps(first.state()))
        assert (state["epoch"], state["step_in_epoch"], state["step"]) == (0, 6, 6)
        rest = fitting.Fitting(net, x, labels, 2, 8, SGD(0.3, momentum=0.9), state=state)
        records = rest.run(step=lambda n: seen.append(n) or contextlib.nullcontext(),
                           epoch=lambda metrics: {"said": metrics["epoch"]}, progress=False)
        assert_bitwise_equal(host(net.parameters()), want)
    assert seen == list(range(16)) and records == [{"said": 1}, {"said": 2}]


def test_an_epoch_resumed_after_its_last_step_reports_no_speed():
    """Interrupted once an epoch's last step is counted, the run resumed runs no step of that epoch: its record says
    no speed (None, not 0 samples/s); the next epoch's is a speed."""
    x, labels = blobs(64)

    @contextlib.contextmanager
    def stop_after_step_7(n):
        yield
        if n == 7:
            raise KeyboardInterrupt

    with classifier() as net:
        first = fitting.Fitting(net, x, labels, 2, 8, SGD(0.3))
        with pytest.raises(KeyboardInterrupt):
            first.run(step=stop_after_step_7, progress=False)
        state = first.state()
        assert (state["epoch"], state["step_in_epoch"], state["step"]) == (0, 8, 8)
        records = fitting.Fitting(net, x, labels, 2, 8, SGD(0.3), state=state).run(progress=False)
    assert [r["step"] for r in records] == [8, 16]
    assert records[0]["samples_per_s"] is None and records[1]["samples_per_s"] > 0


def test_a_run_resumed_from_its_state_at_an_epochs_end_draws_the_next_epochs_order(monkeypatch):
    """A state taken as an epoch ends (step_in_epoch 0) holds the generator after that epoch's draw: resumed from it,
    the run is the straight one bit for bit, and both see in epoch e the samples in the order of the e-th
    permutation that ``default_rng(seed)`` draws (the state before the draw redrew the epoch just done)."""
    x, labels = blobs(60)
    index = {x[:, i].tobytes(): i for i in range(60)}
    seen, train_step = [], MLP.train_step

    def recorded(net, x_batch, *args, **kwargs):
        seen.extend(index[x_batch[:, j].tobytes()] for j in range(x_batch.shape[-1]))
        return train_step(net, x_batch, *args, **kwargs)

    monkeypatch.setattr(MLP, "train_step", recorded)
    rng = np.random.default_rng(5)
    orders = [rng.permutation(60).tolist() for _ in range(3)]  # one permutation an epoch
    with classifier() as straight:
        fitting.Fitting(straight, x, labels, 3, 8, SGD(0.3), seed=5).run(progress=False)
        want = host(straight.parameters())
    assert seen == orders[0] + orders[1] + orders[2]
    seen.clear()
    with classifier() as net:
        first = fitting.Fitting(net, x, labels, 1, 8, SGD(0.3), seed=5)
        first.run(progress=False)
        state = json.loads(json.dumps(first.state()))
        assert (state["epoch"], state["step_in_epoch"], state["step"]) == (1, 0, 8)
        fitting.Fitting(net, x, labels, 3, 8, SGD(0.3), seed=5, state=state).run(progress=False)
        assert seen == orders[0] + orders[1] + orders[2]
        assert_bitwise_equal(host(net.parameters()), want)


def state_after(first, **changes):
    """``first.state()`` (a run of 60 samples, 8 a batch: 8 steps an epoch) with ``changes``; a key changed to None
    left out."""
    state = {**first.state(), **changes}
    return {key: value for key, value in state.items() if value is not None}


BAD_STATES = [
    (lambda first: 5, TypeError, "state must be what state() returned, a dict; got int"),
    (lambda first: state_after(first, rng=None), ValueError, "state lacks rng: give what state() returned"),
    (lambda first: state_after(first, epoch=None, step=None), ValueError, "state lacks epoch, step: "),
    (lambda first: state_after(first, epoch=-2, step=-16), ValueError, "state's epoch must be an integer >= 0; got -2"),
    (lambda first: state_after(first, step=1.0), TypeError, "state's step must be an integer >= 0; got 1.0"),
    (lambda first: state_after(first, step_in_epoch=9, step=9), ValueError,
     "state's position (epoch 0, step_in_epoch 9, step 9) is not one of a run of epochs of 8 steps (batch_size 8 "
     "over 60 samples)"),
    (lambda first: state_after(first, epoch=1, step_in_epoch=2, step=2), ValueError,
     "state's position (epoch 1, step_in_epoch 2, step 2) is not one of a run"),
    (lambda first: state_after(first, rng={"bit_generator": "PCG64", "state": 1}), ValueError,
     "state's rng is {'bit_generator': 'PCG64', 'state': 1}, not a state of NumPy's PCG64"),
]


@pytest.mark.parametrize("case", range(len(BAD_STATES)))
def test_a_state_no_run_of_these_reaches_is_refused_saying_what_and_changes_nothing(case):
    """What ``state()`` gives is what ``state=`` takes: a position of epochs of these steps and a generator's
    state, each refused otherwise (a KeyError, or a run of other steps, before), the network left as it was."""
    make, error, message = BAD_STATES[case]
    x, labels = blobs(60)
    with classifier() as net:
        bad = make(fitting.Fitting(net, x, labels, 2, 8, SGD(0.3)))
        before = host(net.parameters())
        with pytest.raises(error) as info:
            fitting.Fitting(net, x, labels, 2, 8, SGD(0.3), state=bad).run(progress=False)
        assert str(info.value).startswith(message) and "\n" not in str(info.value)
        assert_bitwise_equal(host(net.parameters()), before)


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd, a process's files by descriptor")
def test_metrics_lines_to_the_file_of_the_scripts_own_output_go_among_its_lines(tmp_path, monkeypatch):
    """``jsonl="/dev/stdout"`` of a script whose output goes to a file (``> log``): the file is not emptied, and the
    lines printed before and after fit (buffered) and its records go in turn, none over another."""
    x, labels = blobs(40)
    log = tmp_path / "log"
    with open(log, "w", encoding="utf-8") as out, classifier() as net:
        monkeypatch.setattr(sys, "stdout", out)
        print("before")
        net.fit(x, labels, 2, 16, 0.5, jsonl=f"/dev/fd/{out.fileno()}", progress=False)
        print("after")
    lines = log.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "before" and lines[3] == "after" and len(lines) == 4
    assert [json.loads(line)["epoch"] for line in lines[1:3]] == [1, 2]


def test_the_metrics_lines_are_what_fit_returns(tmp_path):
    x, labels = blobs(40)
    with classifier() as net:
        returned = net.fit(x, labels, 3, 16, 0.5, validation=(x, labels), jsonl=tmp_path / "m.jsonl", progress=False)
    assert [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()] == returned
    written = io.StringIO()
    with classifier() as net:
        net.fit(x, labels, 1, 16, 0.5, jsonl=written, progress=False)
    (line,) = written.getvalue().splitlines()
    assert list(json.loads(line)) == ["epoch", "step", "train_loss", "samples_per_s", "seconds"]

    class Lines(io.TextIOBase):  # a writer of its own, which io.TextIOBase calls not writable
        text = ""

        def write(self, text):
            self.text += text
            return len(text)

    with classifier() as net, codecs.open(tmp_path / "c.jsonl", "w", "utf-8") as encoded:  # its mode says "wb"
        lines = Lines()
        net.fit(x, labels, 2, 16, 0.5, jsonl=lines, progress=False)
        net.fit(x, labels, 2, 16, 0.5, jsonl=encoded, progress=False)
    assert len(lines.text.splitlines()) == 2 and len((tmp_path / "c.jsonl").read_text().splitlines()) == 2


def test_rank_0_alone_writes_the_metrics_and_its_refusal_stops_every_rank(tmp_path):
    """Of a data-parallel network (two mirrored ranks in one process) rank 0 writes ``jsonl``; where it cannot open
    it, rank 1, which opens nothing, raises its refusal too rather than train on alone."""
    x, labels = blobs(40)
    for rank in (0, 1):
        with classifier(comm=Mirror(rank)) as net:
            returned = net.fit(x, labels, 2, 16, 0.5, jsonl=tmp_path / f"rank{rank}.jsonl", progress=False)
        assert len(returned) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["rank0.jsonl"]
    assert len((tmp_path / "rank0.jsonl").read_text().splitlines()) == 2
    with classifier(comm=Mirror(1)) as net:  # rank 1, then told that rank 0 could not open the file
        net.comm.allgather = lambda value: [(ValueError, "cannot write the metrics to m.jsonl (No such file or "
                                                         "directory)"), value]
        before = host(net.parameters())
        with pytest.raises(ValueError, match=r"^rank 0: cannot write the metrics to m\.jsonl"):
            net.fit(x, labels, 2, 16, 0.5, jsonl=tmp_path / "m.jsonl", progress=False)
        assert_bitwise_equal(host(net.parameters()), before)


def test_the_bar_counts_the_samples_of_the_whole_run_on_a_terminal(monkeypatch, capsys):
    x, labels = blobs(40)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with classifier() as net:
        net.fit(x, labels, 2, 16, 0.5, progress=False)
        assert capsys.readouterr().err == ""
        net.fit(x, labels, 2, 16, 0.5)
    err = capsys.readouterr().err
    assert err.startswith("\repoch 1/2:   0%") and "epoch 2/2: " in err and "epoch 3" not in err, err
    assert "/80.0 [" in err and "/40.0 [" not in err, err  # one bar for the run: 2 epochs of 40 samples
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    with classifier() as net:
        net.fit(x, labels, 1, 16, 0.5)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("stderr", [None, object()], ids=["none", "without-isatty"])
def test_fit_without_a_console_shows_no_bar(monkeypatch, stderr):
    """Where there is no console (``sys.stderr`` None under pythonw, or a stand-in without ``isatty``) the default
    bar is off, as on any stream that is no terminal, rather than an AttributeError."""
    monkeypatch.setattr(sys, "stderr", stderr)
    x, labels = blobs(40)
    with classifier() as net:
        assert len(net.fit(x, labels, 2, 16, 0.5)) == 2


@pytest.mark.parametrize("progress, terminal", [(False, True), (True, False), (True, True)])
def test_fit_leaves_no_thread_behind(monkeypatch, capsys, progress, terminal):
    """tqdm starts a monitor thread with a bar, shown or not, which outlives it; fit's bar starts none."""
    monkeypatch.setattr(tqdm, "monitor", None)  # one that an earlier bar left would stand in for a new one
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    x, labels = blobs(40)
    before = set(threading.enumerate())
    with classifier() as net:
        net.fit(x, labels, 2, 16, 0.5, progress=progress)
    assert ("epoch 2/2" in capsys.readouterr().err) == (progress and terminal)
    left = [thread for thread in threading.enumerate() if thread not in before]
    for thread in left:
        thread.join(timeout=1.0)  # the network's own, ending after close
    assert not [thread.name for thread in left if thread.is_alive()]


def test_a_non_finite_loss_stops_the_run_naming_the_step(monkeypatch):
    monkeypatch.setattr(fitting, "LOSS_CHECK_SECONDS", 0.0)  # the batch loss after every step
    x, y = blobs(20)[0], np.full((2, 20), 1e3)
    with MLP([4, 8, 2], activation="relu", dtype="float64", backend="numpy", output_activation="identity") as net:
        with pytest.raises(FloatingPointError, match=r"^the training loss is (inf|nan) after epoch 1, step 1$"):
            net.fit(x, y, 2, 10, 1e200, progress=False)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # NumPy's, of the NaN steps
@pytest.mark.parametrize("rank", [0, 1])
def test_data_parallel_a_non_finite_loss_stops_every_rank_at_the_epochs_end(monkeypatch, capsys, rank):
    """The latest batch's loss is one rank's (rank 0's, for its bar): a NaN there stopped rank 0 alone, at its step,
    while the others waited for it in their next sum. Every rank stops at the end of the epoch, on the training
    loss summed over them, ``every_rank``."""
    monkeypatch.setattr(fitting, "LOSS_CHECK_SECONDS", 0.0)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # rank 0's bar shows the loss
    x, y = blobs(20)[0], np.full((2, 20), 1e3)
    with MLP([4, 8, 2], activation="relu", dtype="float64", backend="numpy", output_activation="identity",
             comm=Mirror(rank)) as net:
        with pytest.raises(FloatingPointError, match=r"^the training loss is (inf|nan) after epoch 1, step 2$") as got:
            net.fit(x, y, 2, 10, 1e200)
    assert got.value.every_rank
    assert ("loss=" in capsys.readouterr().err) == (rank == 0)


def test_a_refused_update_stops_the_run_at_its_step():
    """``check_finite``: w^2 x overflows at the first step, whose update is refused: the run stops there, named
    step 1 as the metrics count steps, the parameters as they were."""
    with MLP([2, 3, 2], activation="relu", dtype="float64", backend="numpy", output_activation="identity",
             check_finite=True) as net:
        net.set_parameters({2: {"w": np.full((3, 2), 1e200)}})
        before = host(net.parameters())
        with pytest.raises(FloatingPointError, match=r"^at epoch 1, step 1: nabla_w\[3\] holds NaN or Inf; update "
                                                     r"refused, parameters unchanged$"):
            net.fit(np.full((2, 6), 1e200), np.zeros((2, 6)), 2, 3, 0.1, progress=False)
        assert_bitwise_equal(host(net.parameters()), before)


@pytest.mark.parametrize("refused", [False, True])
def test_a_run_stopped_by_a_non_finite_loss_or_update_leaves_nothing_holding_the_network(monkeypatch, refused):
    """The error raised alone holds its traceback's frames, fit's and the network's among them: once it is caught
    and dropped, the network goes with its last name, no collection needed (a frame that named the error held
    it, a cycle). The runs of the two tests above."""
    monkeypatch.setattr(fitting, "LOSS_CHECK_SECONDS", 0.0)
    sizes, x, y, lr = ([2, 3, 2], np.full((2, 6), 1e200), np.zeros((2, 6)), 0.1) if refused else (
        [4, 8, 2], blobs(20)[0], np.full((2, 20), 1e3), 1e200)
    net = MLP(sizes, activation="relu", dtype="float64", backend="numpy", output_activation="identity",
              check_finite=refused)
    if refused:
        net.set_parameters({2: {"w": np.full((3, 2), 1e200)}})
    gc.disable()
    try:
        try:
            net.fit(x, y, 2, 3 if refused else 10, lr, progress=False)
        except FloatingPointError as error:
            raised = str(error)
        assert raised.startswith("at epoch 1, step 1: nabla_w" if refused else "the training loss is")
        dropped = weakref.ref(net)
        del net
        assert dropped() is None
    finally:
        gc.enable()


# -- evaluate and predict -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cost", ["quadratic", "cross_entropy"])
def test_evaluate_is_the_float64_computation_in_any_chunking(cost):
    rng = np.random.default_rng(3)
    x, labels = rng.random((6, 23)), rng.integers(0, 4, 23)
    y = np.eye(4)[:, labels]
    with MLP([6, 9, 9, 4], activation="tanh", cost=cost, dtype="float64", backend="numpy") as net:
        whole, chunked, given = net.evaluate(x, y, 23), net.evaluate(x, y, 5), net.evaluate(x, labels, 5)
        output = "sigmoid" if cost == "cross_entropy" else "tanh"
        expected = reference.cost(net.weights, net.biases, x, y, "tanh", cost, output) / 23
        a = reference.feedforward(net.weights, net.biases, x, "tanh", output)
    assert whole["loss"] == pytest.approx(expected, rel=1e-12) and chunked["loss"] == pytest.approx(expected, rel=1e-12)
    assert whole["accuracy"] == chunked["accuracy"] == np.mean(a.argmax(axis=0) == labels)
    assert given == chunked  # integer labels: their one-hot targets


@pytest.mark.parametrize("rank", [0, 1])
def test_a_data_parallel_evaluate_gives_floats_as_one_process_does(rank):
    """Each rank scores its share and sums across ranks (``Mirror``: one rank's sum is its own): the sums came back as
    numpy.float64 where one process gives floats. Rank 0 of 23 samples scores samples 0..11, rank 1 12..22."""
    x, labels = blobs(23)
    y = np.random.default_rng(4).random((3, 23))  # not classes: the mse
    share = slice(0, 12) if rank == 0 else slice(12, 23)
    for targets in (labels, y):
        with classifier() as alone, classifier(comm=Mirror(rank)) as parallel:
            mine, scored = alone.evaluate(x[:, share], targets[..., share]), parallel.evaluate(x, targets)
        assert [type(value) for value in scored.values()] == [float, float], scored
        assert scored == pytest.approx({key: value * (share.stop - share.start) / 23 for key, value in mine.items()},
                                       rel=1e-14)


def test_of_equal_outputs_the_first_class_counts():
    """w^L = 0 and b^L = (0, 1, 1): every sample's outputs are sigma(0), sigma(1), sigma(1), and class 1 is its
    argmax, as numpy's (the first of the largest); b^L = 0: class 0."""
    x, labels = blobs(30)
    with classifier() as net:
        for b, winner in (([0.0, 1.0, 1.0], 1), ([0.0, 0.0, 0.0], 0)):
            net.set_parameters({3: {"w": np.zeros((3, 8)), "b": np.array(b)}})
            assert net.evaluate(x, labels)["accuracy"] == np.mean(labels == winner) > 0


def test_regression_targets_give_the_mean_squared_error():
    x = np.random.default_rng(1).random((4, 12))
    y = np.random.default_rng(2).standard_normal((2, 12))  # not classes: no accuracy
    with MLP([4, 5, 2], activation="tanh", dtype="float64", backend="numpy", output_activation="identity") as net:
        scored = net.evaluate(x, y, batch_size=5)
        a = reference.feedforward(net.weights, net.biases, x, "tanh", "identity")
    assert list(scored) == ["loss", "mse"]
    assert scored["mse"] == pytest.approx(np.mean((a - y) ** 2), rel=1e-12)
    assert scored["loss"] == pytest.approx(0.5 * np.sum((a - y) ** 2) / 12, rel=1e-12)


def test_an_rnn_with_an_output_at_every_step_scores_every_step():
    """The accuracy over every step of every sequence; the loss the mean cost per sequence (docs/python.md), the cost
    summed over the steps (docs/rnn.md), units and sequences, divided by the 7 sequences, not the 35 outputs."""
    rng = np.random.default_rng(4)
    x, labels = rng.standard_normal((5, 3, 7)), rng.integers(0, 3, (5, 7))
    with RNN([3, 6, 3], "tanh", "cross_entropy", "every", dtype="float64", seed=2, backend="numpy") as net:
        scored, outputs = net.evaluate(x, labels, batch_size=3), net.predict(x, batch_size=3)
        a = rnn_reference.feedforward(net.weights, net.recurrent, net.biases, x, "tanh", "sigmoid", "every")
    assert outputs.shape == (5, 3, 7) and isinstance(outputs, np.ndarray)
    np.testing.assert_allclose(outputs, a, rtol=1e-12)
    assert scored["accuracy"] == np.mean(np.argmax(a, axis=1) == labels)  # over 5 steps x 7 sequences
    total = 0.0
    for t in range(5):
        for unit in range(3):
            for n in range(7):  # -y ln a - (1 - y) ln(1 - a), y = 1 for the step's label only
                p = float(a[t, unit, n])
                total -= math.log(p) if unit == labels[t, n] else math.log(1 - p)
    assert scored["loss"] == pytest.approx(total / 7, rel=1e-12)


def test_predict_is_feedforward_in_batches():
    x, _ = blobs(10)
    with classifier() as net:
        predicted = net.predict(x, batch_size=4)
        a = reference.feedforward(net.weights, net.biases, x, "tanh", "sigmoid")
    assert predicted.shape == (3, 10)
    np.testing.assert_allclose(predicted, a, rtol=1e-12)


def test_cross_entropy_is_finite_when_a_sigmoid_saturates_and_nan_when_the_network_is():
    """An a of exactly 0 or 1 counts as the dtype's nearest number inside (0, 1): -ln(2^-24) per unit in float32;
    any other a as it is."""
    y = np.array([[1.0, 0.0]])
    saturated = fitting.cost("cross_entropy", np.array([[0.0, 1.0]], dtype=np.float32), y, np.float32)
    assert saturated == pytest.approx(-np.log(np.nextafter(np.float32(0), np.float32(1)).astype(np.float64))
                                      - np.log1p(-np.nextafter(np.float32(1), np.float32(0)).astype(np.float64)))
    assert fitting.cost("cross_entropy", np.array([[0.5, 0.5]]), y, np.float64) == pytest.approx(2 * np.log(2))
    assert np.isnan(fitting.cost("cross_entropy", np.array([[np.nan, 0.5]]), y, np.float64))
    assert np.isnan(fitting.cost("quadratic", np.array([[np.nan, 0.5]]), y, np.float64))


def test_the_cross_entropy_of_confident_wrong_outputs_is_the_exact_one_in_float64():
    """Outputs sigmoid(+-32), each on the wrong side: the loss is 2 ln(1 + e^32), about 64, within what rounding
    a = 1 - 1.3e-14 to float64 leaves of 1 - a (it was capped at 2 x 27.6 by a clip of a^L to [1e-12, 1 - 1e-12])."""
    with MLP([1, 2], cost="cross_entropy", dtype="float64", backend="numpy") as net:
        net.set_parameters({2: {"w": np.array([[32.0], [-32.0]]), "b": np.zeros(2)}})
        loss = net.evaluate(np.ones((1, 1)), np.array([[0.0], [1.0]]))["loss"]
    assert loss == pytest.approx(2 * np.logaddexp(0, 32), rel=1e-4)


# -- integer class labels ------------------------------------------------------------------------------------


def labelled(kind):
    """A network of kind ``kind`` with a sigmoid (the MLP's: tanh) output of 3 classes, a batch of 5, its labels and their
    one-hot targets."""
    rng = np.random.default_rng(5)
    if kind == "MLP":
        make = lambda: MLP([4, 6, 3], "tanh", dtype="float64", backend="numpy")  # noqa: E731
        x, labels = rng.random((4, 5)), rng.integers(0, 3, 5)
    elif kind == "DagNet":
        make = lambda: DagNet(4, [("h", Dense(6, "tanh"), "x"), ("out", Dense(3, "sigmoid"), "h")],  # noqa: E731
                              cost="cross_entropy", dtype="float64", backend="numpy")
        x, labels = rng.random((4, 5)), rng.integers(0, 3, 5)
    else:
        output = kind.split("-")[1]
        make = lambda: RNN([4, 6, 3], "tanh", "cross_entropy", output, dtype="float64", backend="numpy")  # noqa: E731
        x, labels = rng.standard_normal((6, 4, 5)), rng.integers(0, 3, (6, 5) if output == "every" else 5)
    return make, x, labels, np.moveaxis(np.eye(3)[labels], -1, -2)


@pytest.mark.parametrize("kind", ["MLP", "DagNet", "RNN-last", "RNN-every"])
def test_integer_labels_step_as_their_one_hot_targets(kind):
    make, x, labels, one_hot = labelled(kind)
    assert one_hot.shape == ((6, 3, 5) if kind == "RNN-every" else (3, 5))
    got = {}
    for name, y in (("labels", labels), ("one-hot", one_hot), ("int32", labels.astype(np.int32))):
        with make() as net:
            net.train_step(x, y, Adam(0.01), Leapfrog(2))
            got[name] = host(net.parameters())
    assert_bitwise_equal(got["labels"], got["one-hot"])
    assert_bitwise_equal(got["int32"], got["one-hot"])


def test_one_sample_takes_its_class_as_a_number():
    """x (n_1,) and y 2: the one-hot column (0, 0, 1); its output is still a^L of that one sample."""
    x = np.random.default_rng(9).random(4)
    with MLP([4, 6, 3], dtype="float64", backend="numpy") as net:
        given, one_hot = net.gradients(x, 2), net.gradients(x, [0.0, 0.0, 1.0])
        assert_bitwise_equal(host(given), host(one_hot))
        assert net.feedforward(x).shape == (3, 1)
    with RNN([4, 6, 3], "tanh", "cross_entropy", dtype="float64", backend="numpy") as net:
        assert net.feedforward(np.ones((5, 4))).shape == (3, 1)  # one sequence, its output at the last step


@pytest.mark.parametrize("tau", [3, 5])  # 3: the count of the outputs too, where the two axes could be swapped
def test_one_sequences_labels_at_every_step_are_a_one_hot_row_a_step(tau):
    """x (tau, n_1), one sequence without its batch axis, and its labels (tau,) for an output at every step: the
    targets ``np.eye(3)[labels]``, (tau, 3), a step's one-hot row each; one output takes its (tau,) values as
    (tau, 1). Each gives the gradients of that sequence with its batch axis and targets (tau, n_L, 1)."""
    rng = np.random.default_rng(tau)
    x, labels, values = rng.standard_normal((tau, 4)), rng.integers(0, 3, tau), rng.standard_normal(tau)
    with RNN([4, 6, 3], "tanh", "cross_entropy", "every", dtype="float64", backend="numpy") as net:
        assert_bitwise_equal(host(net.gradients(x, labels)),
                             host(net.gradients(x[..., None], np.eye(3)[labels][..., None])))
    with RNN([4, 6, 1], "tanh", output="every", output_activation="identity", dtype="float64",
             backend="numpy") as net:
        assert_bitwise_equal(host(net.gradients(x, values)), host(net.gradients(x[..., None], values[:, None, None])))


def test_a_single_output_takes_its_targets_without_their_axis():
    x, y = np.random.default_rng(6).random((4, 7)), np.arange(7.0)
    nets = [MLP([4, 5, 1], dtype="float64", backend="numpy", output_activation="identity") for _ in range(2)]
    nets[0].train_step(x, y, SGD(0.1))
    nets[1].train_step(x, y[None], SGD(0.1))
    assert_bitwise_equal(host(nets[0].parameters()), host(nets[1].parameters()))
    for net in nets:
        net.close()


REFUSALS = [
    (lambda net, x, labels: net.train_step(x, [0, 3, 1, 2, 0], SGD(0.1)), ValueError,
     "y holds class label 3 at index 1; labels must lie in 0..2 (an MLP's 3 outputs, one per class): one-hot "
     "encode other targets as shape (3, 5)"),
    (lambda net, x, labels: net.fit(x, -labels - 1, 1, 5, 0.1), ValueError, "y holds class label -1 at index 0; "),
    (lambda net, x, labels: net.gradients(x, labels.astype(float)), ValueError,
     "y must be integer class labels or targets of shape (3, 5); got shape (5,) of dtype float64: for class labels, "
     "pass y.astype(int)"),
    (lambda net, x, labels: net.train_step(x, labels[:4], SGD(0.1)), ValueError,
     "y holds class labels of shape (4,); x's batch needs one per sample, shape (5,)"),
    (lambda net, x, labels: net.train_step(x[:, 0], labels[:1], SGD(0.1)), ValueError,  # one sample, one label
     "y holds class labels of shape (1,), a batch of one sample's, and x is one sample with no batch axis, whose "
     "label is an int, shape (): give y of that shape, or x with its batch axis"),
    (lambda net, x, labels: net.train_step(x.T, labels, SGD(0.1)), ValueError,  # samples as rows: x is what is wrong
     "x must have shape (4, B) or (4,) for sizes [4, 6, 3]; got (5, 4)"),
    (lambda net, x, labels: net.train_step(x, labels[:4].astype(float), SGD(0.1)), ValueError,
     "y must have shape (3, B) or (3,) for sizes [4, 6, 3]; got (4,)"),
    (lambda net, x, labels: net.fit(x, np.eye(3)[:, labels][:, :4], 1, 2, 0.1), ValueError,
     "x and y must hold the same number of samples; got 5 and 4"),
    (lambda net, x, labels: net.fit(x, labels, 0, 2, 0.1), ValueError, "epochs must be an integer >= 1; got 0"),
    (lambda net, x, labels: net.fit(x, labels, 1.5, 2, 0.1), TypeError, "epochs must be an integer >= 1; got 1.5"),
    (lambda net, x, labels: net.fit(x, labels, 1, 6, 0.1), ValueError,
     "batch_size must be an integer >= 1, at most the 5 samples of x; got 6"),
    (lambda net, x, labels: net.fit(x, labels, 1, 0, 0.1), ValueError, "batch_size must be an integer >= 1"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, -0.1), ValueError,
     "eta (the learning rate) must be a finite number >= 0; got -0.1"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, "adam"), TypeError,
     "optimizer must be a learning rate eta (for SGD(eta)), or SGD(...), Adam(...) or AdamW(...); got 'adam'"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, validation=x), TypeError,
     "validation must be a pair (x, y) of inputs and targets; got ndarray"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, validation=(x, labels + 3)), ValueError,
     "validation=(x, y): y holds class label 3 at index 0"),
    (lambda net, x, labels: net.evaluate(x, labels[:, None]), ValueError, "y must have shape (3, B) or (3,)"),
    (lambda net, x, labels: net.predict(x, batch_size=0), ValueError, "batch_size must be an integer >= 1; got 0"),
    (lambda net, x, labels: net.evaluate(x, labels, batch_size=0), ValueError,
     "batch_size must be an integer >= 1; got 0"),
    (lambda net, x, labels: net.evaluate(x, labels, batch_size=-1), ValueError,
     "batch_size must be an integer >= 1; got -1"),
    (lambda net, x, labels: net.evaluate(x, labels, batch_size=2.5), TypeError,
     "batch_size must be an integer >= 1; got 2.5"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, shuffle="no"), TypeError,
     "shuffle must be True or False; got 'no'"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, seed=-1), ValueError,
     "seed must be an integer >= 0 or None; got -1"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, seed="abc"), TypeError,
     "seed must be an integer >= 0 or None; got 'abc'"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, jsonl="missing/metrics.jsonl"), ValueError,
     "cannot write the metrics to missing/metrics.jsonl (No such file or directory): give jsonl the path of a file "
     "this process may write, in a folder that exists"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, jsonl=999), TypeError,
     "jsonl must be a path or an open text file; got int"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, jsonl=io.BytesIO()), TypeError,
     "jsonl must be a path or a file open for text; got a binary file: open it without 'b'"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, jsonl=io.TextIOWrapper(io.BufferedReader(io.BytesIO()))),
     ValueError, "jsonl must be open for writing; got a read-only file: open it with 'w' or 'a'"),
    (lambda net, x, labels: net.fit(x, labels, 1, 2, 0.1, jsonl=closed(io.StringIO())), ValueError,
     "jsonl must be open for writing; got a closed file"),
]


def test_a_single_samples_integer_targets_are_targets_not_labels():
    """y of shape (3,) in integers for one sample of an MLP of 3 outputs: that sample's targets, as floats would be."""
    x = np.random.default_rng(7).random((4, 1))
    with MLP([4, 6, 3], dtype="float64", backend="numpy") as net:
        assert_bitwise_equal(host(net.gradients(x, np.array([0, 1, 0]))),
                             host(net.gradients(x, np.array([[0.0], [1.0], [0.0]]))))


def closed(file):
    file.close()
    return file


@pytest.mark.parametrize("call, error, message", REFUSALS, ids=[f"refusal-{i}" for i in range(len(REFUSALS))])
def test_bad_arguments_are_refused_with_what_to_do_and_change_nothing(call, error, message):
    x, labels = np.random.default_rng(7).random((4, 5)), np.array([0, 2, 1, 1, 0])
    with MLP([4, 6, 3], dtype="float64", backend="numpy") as net:
        before = host(net.parameters())
        with pytest.raises(error) as raised:
            call(net, x, labels)
        assert str(raised.value).startswith(message), str(raised.value)
        assert_bitwise_equal(host(net.parameters()), before)


@pytest.mark.parametrize("options, error, message", [
    ({"graph": "yes"}, TypeError, "graph must be True or False"),
    ({"schedule": Leapfrog(2, fused=True), "clip": 1.0}, ValueError, "clip needs every gradient before any update"),
    ({"solver": ForwardNewton()}, TypeError, "takes a forward solver in feedforward only"),
    ({"optimizer": SGD(0.1, momentum=0.9)}, ValueError, "holds the state of Adam"),
    ({"progress": "no"}, TypeError, "progress must be True or False; got 'no'"),
])
def test_what_a_step_refuses_is_refused_before_the_metrics_file_is_emptied(tmp_path, options, error, message):
    """fit checks what train_step would refuse at its first step before it opens ``jsonl``: a file of an earlier
    run is left as it was, and so is the network."""
    x, labels = np.random.default_rng(7).random((4, 5)), np.array([0, 2, 1, 1, 0])
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"epoch": 1}\n')
    with MLP([4, 6, 3], dtype="float64", backend="numpy") as net:
        net.train_step(x, labels, Adam(0.01))
        before = host(net.parameters())
        with pytest.raises(error, match=message):
            net.fit(x, labels, 1, 2, options.pop("optimizer", Adam(0.01)), jsonl=metrics, **options)
        assert metrics.read_text() == '{"epoch": 1}\n' and net.optimizer_state()["step"] == 1
        assert_bitwise_equal(host(net.parameters()), before)


@pytest.mark.parametrize("earlier", [True, False], ids=["earlier file", "no file"])
@pytest.mark.parametrize("failure", ["overflow", "third step"])
def test_a_run_that_fails_leaves_the_metrics_file_as_its_last_record_left_it(tmp_path, monkeypatch, failure, earlier):
    """What only a step finds stops a run after ``jsonl`` was opened: a loss that overflows, a step that raises.
    The file of an earlier run is emptied by this run's first record only: a run that fails in its first epoch
    leaves it as it was (no file where there was none), one that fails in its second leaves its own first line."""
    monkeypatch.setattr(fitting, "LOSS_CHECK_SECONDS", 0.0)  # the batch loss after every step
    metrics = tmp_path / "metrics.jsonl"
    if earlier:
        metrics.write_text('{"epoch": 1}\n')
    x, labels = blobs(20)
    with MLP([4, 8, 3], activation="relu", dtype="float64", backend="numpy", output_activation="identity") as net:
        take, steps = net.train_step, []

        def third_fails(*args, **kwargs):  # two steps an epoch: the second epoch's first step raises
            steps.append(None)
            if len(steps) == 3:
                raise RuntimeError("the third step")
            return take(*args, **kwargs)

        monkeypatch.setattr(net, "train_step", third_fails)
        error, message = {"overflow": (FloatingPointError, "the training loss is"),
                          "third step": (RuntimeError, "the third step")}[failure]
        with pytest.raises(error, match=message):
            if failure == "overflow":
                net.fit(x, np.full((3, 20), 1e3), 2, 10, 1e200, progress=False, jsonl=metrics)
            else:
                net.fit(x, np.eye(3)[labels].T, 2, 10, Adam(0.01), progress=False, jsonl=metrics)
    if failure == "overflow" and not earlier:
        assert not metrics.exists() and len(steps) <= 2
        return
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    if failure == "third step":
        assert len(lines) == 1 and (lines[0]["epoch"], lines[0]["step"]) == (1, 2) and "train_loss" in lines[0]
    else:
        assert lines == [{"epoch": 1}] and len(steps) <= 2


def test_labels_for_an_output_that_is_not_one_of_classes_are_refused_with_the_hint():
    x, labels = np.random.default_rng(8).random((4, 5)), np.array([0, 2, 1, 1, 0])
    with MLP([4, 6, 3], dtype="float64", backend="numpy", output_activation="identity") as net:
        with pytest.raises(ValueError) as raised:
            net.fit(x, labels, 1, 5, 0.1)
    assert str(raised.value) == ("y must have shape (3, 5) for an MLP of identity outputs: class labels of shape (5,) "
                                 "are one-hot encoded for outputs of classes (sigmoid, tanh or relu) only; pass targets")
    summed = DagNet(4, [("h", Dense(3, "tanh"), "x"), ("g", Dense(3, "sigmoid"), "h"), ("out", Add(), ["g", "h"])],
                    dtype="float64", backend="numpy")
    with summed, pytest.raises(ValueError, match=r"^y must have shape \(3, 5\) for a DagNet of Add\(\) outputs"):
        summed.fit(x, labels, 1, 5, 0.1)
    with RNN([4, 6, 3], "tanh", "quadratic", "every", dtype="float64", backend="numpy", output_activation="identity") \
            as net, pytest.raises(ValueError, match=r"^y must have shape \(6, 3, 5\) for an RNN of identity outputs"):
        net.gradients(np.zeros((6, 4, 5)), np.zeros((6, 5), dtype=int))


def test_fit_shows_every_keyword_it_takes_with_its_default():
    """``help(net.fit)`` shows what ``fit`` takes, not ``**options``: the signature of ``core.fitting.fit``."""
    with MLP([2, 3, 2]) as net:
        parameters = inspect.signature(net.fit).parameters
    assert list(parameters)[:6] == ["x", "y", "epochs", "batch_size", "optimizer", "schedule"]
    assert {name: p.default for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY} == {
        "validation": None, "shuffle": True, "seed": 0, "progress": True, "jsonl": None, "graph": False,
        "solver": None, "clip": None}
