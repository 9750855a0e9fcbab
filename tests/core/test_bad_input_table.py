"""Generates the table of bad inputs in docs/bad-input.md from what the library really answers, and checks it.

The table in docs/bad-input.md (between the ``bad-inputs`` markers) must equal what this test generates; run
``LEAPFROG_WRITE_TABLE=1 python -m pytest tests/core/test_bad_input_table.py`` to rewrite it.
"""

import contextlib
import io
import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from leapfrog_gpu import MLP, SGD, Adam, AdamW, DagNet, Dense, Leapfrog, NaumovJacobi, get_backend, load, reference
from helpers import Gate, flip_last_byte

PAGE = Path(__file__).resolve().parents[2] / "docs/bad-input.md"
START, END = "<!-- bad-inputs:start -->", "<!-- bad-inputs:end -->"
SIZES = [4, 6, 3]
X, Y = np.ones((4, 3)), np.zeros((3, 3))


def cases(net):
    """(what is passed, a call that passes it), in the order of the table."""
    def backprop(x=X, y=Y, schedule=None, targets=None):
        """``targets``: what the reference takes for ``y`` (default ``y`` itself)."""
        def call():
            nabla_b, nabla_w = net.backprop(x, y, schedule)
            x64 = np.asarray(x, dtype=np.float64).reshape(SIZES[0], -1)
            y64 = np.asarray(y if targets is None else targets, dtype=np.float64).reshape(SIZES[-1], -1)
            want_b, want_w = reference.backprop(net.weights, net.biases, x64, y64)
            for got, want in zip(nabla_b + nabla_w, want_b + want_w):
                np.testing.assert_allclose(got, want, rtol=1e-12)
        return call

    class FakeCupyArray:
        __module__ = "cupy"
        dtype, shape, ndim = np.dtype("float32"), (4, 3), 2

    return [
        ("`MLP([5])`", lambda: MLP([5], backend="numpy")),
        ("`MLP([5, 0, 3])`", lambda: MLP([5, 0, 3], backend="numpy")),
        ("`MLP([5, 2.5])`", lambda: MLP([5, 2.5], backend="numpy")),
        ("`MLP(sizes, activation='softmax')`", lambda: MLP(SIZES, activation="softmax", backend="numpy")),
        ("`MLP(sizes, cost='hinge')`", lambda: MLP(SIZES, cost="hinge", backend="numpy")),
        ("`MLP(sizes, dtype='float16')`", lambda: MLP(SIZES, dtype="float16", backend="numpy")),
        ("`MLP(sizes, dtype=None)` (NumPy's float64)", lambda: MLP(SIZES, dtype=None, backend="numpy")),
        ("`MLP(sizes, backend='tpu')`", lambda: MLP(SIZES, backend="tpu")),
        ("`MLP(sizes, seed=-1)`", lambda: MLP(SIZES, seed=-1, backend="numpy")),
        ("`MLP(sizes, check_finite='yes')`", lambda: MLP(SIZES, check_finite="yes", backend="numpy")),
        ("`MLP(sizes, cost='cross_entropy', output_activation='relu')`",
         lambda: MLP(SIZES, cost="cross_entropy", output_activation="relu", backend="numpy")),
        ("`Leapfrog(0)`", lambda: Leapfrog(0)),
        ("`Leapfrog(2.5)`", lambda: Leapfrog(2.5)),
        ("`Leapfrog(10**9)` (huge k)", backprop(schedule=Leapfrog(10**9))),
        ("`get_backend('opencl')`", lambda: get_backend("opencl")),
        ("x of shape (5, 3)", backprop(x=np.ones((5, 3)))),
        ("x of shape (4, 3, 1)", backprop(x=np.ones((4, 3, 1)))),
        ("x of shape (4,) (one sample)", backprop(x=np.ones(4), y=np.zeros(3))),
        ("y of shape (3, 2) for 3 samples", backprop(y=np.zeros((3, 2)))),
        ("y None", backprop(y=None)),
        ("an empty batch, x (4, 0)", backprop(x=np.ones((4, 0)), y=np.zeros((3, 0)))),
        ("x of dtype int64", backprop(x=np.ones((4, 3), dtype=np.int64))),
        ("x of dtype float16", backprop(x=np.ones((4, 3), dtype=np.float16))),
        ("x of dtype complex128", backprop(x=X.astype(complex))),
        ("x of dtype object", backprop(x=X.astype(object))),
        ("x nested lists of unequal lengths", backprop(x=[[1.0, 1.0, 1.0]] * 3 + [[1.0]])),
        ("y of dtype bool", backprop(y=Y.astype(bool))),
        ("y integer class labels [0, 2, 1] for 3 samples", backprop(y=[0, 2, 1], targets=np.eye(3)[:, [0, 2, 1]])),
        ("y class labels [0, 3, 1] of 3 outputs", backprop(y=[0, 3, 1])),
        ("y class labels [0, 2] for 3 samples", backprop(y=[0, 2])),
        ("y class labels [0, 2, 1] (as many as the outputs) for 6 samples", backprop(x=np.ones((4, 6)), y=[0, 2, 1])),
        ("y class labels as floats, [0.0, 2.0, 1.0]", backprop(y=[0.0, 2.0, 1.0])),
        ("x Fortran-ordered", backprop(x=np.asfortranarray(X))),
        ("x a strided view", backprop(x=np.ones((4, 6))[:, ::2])),
        ("x with a NaN", backprop(x=np.where(np.eye(4, 3) > 0, np.nan, 1.0))),
        ("x float64 with a 1e300, to `MLP(sizes)` (float32)",
         lambda: in_float32(lambda f32: f32.backprop(X * 1e300, Y))),
        ("y with an Inf", backprop(y=np.full((3, 3), np.inf))),
        ("a CuPy array on the numpy backend", backprop(x=FakeCupyArray())),
        ("x a masked array (a NaN under its mask)", backprop(x=np.ma.masked_invalid(np.where(X > 0, np.nan, X)))),
        ("`sgd_step(x, y, eta=-0.1)`", lambda: net.sgd_step(X, Y, -0.1)),
        ("`sgd_step(x, y, 0.1, graph=1)`", lambda: net.sgd_step(X, Y, 0.1, graph=1)),
        ("`sgd_step(x, y, 0.1, NaumovJacobi(warm_start=True), graph=True)`",
         lambda: net.sgd_step(X, Y, 0.1, NaumovJacobi(warm_start=True), graph=True)),
        ("`backprop(x, y, schedule=2)`", backprop(schedule=2)),
        ("`SGD(0.1, nesterov=True)`", lambda: SGD(0.1, nesterov=True)),
        ("`Adam(betas=(0.9, 1.0))`", lambda: Adam(betas=(0.9, 1.0))),
        ("`Adam(eps=0)`", lambda: Adam(eps=0)),
        ("`SGD(lr='0.1')`", lambda: SGD(lr="0.1")),
        ("`optimizer.lr = -0.1`", lambda: setattr(Adam(), "lr", -0.1)),
        ("`optimizer.momentum = 0.9` on `SGD(0.1)`", lambda: setattr(SGD(0.1), "momentum", 0.9)),
        ("`del optimizer.momentum` on `SGD(0.1)`", lambda: delattr(SGD(0.1), "momentum")),
        ("`SGD(10**400)`", lambda: SGD(10**400)),
        ("`train_step(x, y, 0.1)`", lambda: net.train_step(X, Y, 0.1)),
        ("`train_step(x, y, Adam(), clip='1.0')`", lambda: net.train_step(X, Y, Adam(), clip="1.0")),
        ("`train_step(x, y, Adam(), Leapfrog(2, fused=True), clip=1.0)`",
         lambda: net.train_step(X, Y, Adam(), Leapfrog(2, fused=True), clip=1.0)),
        ("`fit(x, y, epochs=0, batch_size=2, optimizer=0.1)`", lambda: net.fit(X, Y, 0, 2, 0.1)),
        ("`fit(x, y, 1, batch_size=4, optimizer=0.1)` for 3 samples", lambda: net.fit(X, Y, 1, 4, 0.1)),
        ("`fit(x, y, 1, 2, optimizer='adam')`", lambda: net.fit(X, Y, 1, 2, "adam")),
        ("`fit(x, y, 1, 2, 0.1, shuffle='no')`", lambda: net.fit(X, Y, 1, 2, 0.1, shuffle="no")),
        ("`fit(x, y, 1, 2, 0.1, jsonl='missing/metrics.jsonl')`, a folder that does not exist",
         lambda: net.fit(X, Y, 1, 2, 0.1, jsonl="missing/metrics.jsonl")),
        ("`fit(x, y, 1, 2, 0.1, jsonl=open('metrics.jsonl', 'wb'))`, a binary file",
         lambda: net.fit(X, Y, 1, 2, 0.1, jsonl=io.BytesIO())),
        ("`fit(x, y, 1, 2, 0.1, validation=(x, [0, 2]))`", lambda: net.fit(X, Y, 1, 2, 0.1, validation=(X, [0, 2]))),
        ("`evaluate(x, y, batch_size=0)`", lambda: net.evaluate(X, Y, batch_size=0)),
        ("`train_step(x, y, AdamW())` after a step of `Adam()`",
         lambda: (net.train_step(X, Y, Adam()), net.train_step(X, Y, AdamW()))),
        ("`net.save('missing/model')`, a folder that does not exist", lambda: net.save("missing/model")),
        ("`net.save('')`", lambda: net.save("")),
        ("`net.save('models')`, a folder", lambda: net.save("models")),
        *((f"`load('{name}')`, {what}", lambda name=name: load(name, backend="numpy")) for name, what in FILES),
        ("`load('own.npz', layers=[Gate()])`, an instance", lambda: load("own.npz", backend="numpy", layers=[Gate()])),
        ("`load('model', backend='tpu')`", lambda: load("model", backend="tpu")),
    ]


FILES = [("none", "no such file"), ("models", "a folder"), ("notes.txt", "a text file"),
         ("half.npz", "half of a saved network"), ("flipped.npz", "a byte of it changed"),
         ("arrays.npz", "someone else's .npz"), ("newer.npz", "of a newer format"),
         ("unknown.npz", "of an unknown network"), ("deeper.npz", "an architecture its arrays do not fit"),
         ("own.npz", "a DagNet with a node of one's own Layer, its class not given"),
         ("wide.npz", "its w2 in float64, the network float32")]
"""The files that ``load`` refuses, made by ``files`` (the network of ``model.npz`` is ``MLP(sizes)``)."""


@contextlib.contextmanager
def files():
    """A scratch folder, the current one meanwhile, holding ``model.npz`` and the files of ``FILES``."""
    with tempfile.TemporaryDirectory() as folder:
        here = os.getcwd()
        os.chdir(folder)
        try:
            with MLP(SIZES, backend="numpy") as net:
                whole = net.save("model").read_bytes()
            with DagNet(4, [("g", Gate(), "x"), ("out", Dense(3), "g")], backend="numpy") as own:
                own.save("own")
            Path("models").mkdir()
            Path("notes.txt").write_text("w2, b2\n")
            Path("half.npz").write_bytes(whole[: len(whole) // 2])
            Path("flipped.npz").write_bytes(whole)
            flip_last_byte("flipped.npz", "w2.npy")
            np.savez("arrays.npz", w2=np.ones((6, 4)))
            with np.load("model.npz") as archive:
                arrays = {name: archive[name] for name in archive.files if name != "state"}
                state = json.loads(archive["state"].item())
            np.savez("wide", **{**arrays, "w2": arrays["w2"].astype(np.float64)}, state=np.array(json.dumps(state)))
            for name, changed in [("newer", {"format": 2}), ("unknown", {"network": "Transformer"}),
                                  ("deeper", {"architecture": {**state["architecture"], "sizes": [4, 6, 6, 3]}})]:
                np.savez(name, **arrays, state=np.array(json.dumps({**state, **changed})))
            yield
        finally:
            os.chdir(here)


def in_float32(call):
    """``call(net)`` on a fresh ``MLP(SIZES)``, float32."""
    with MLP(SIZES, backend="numpy") as net:
        call(net)


def outcome(call):
    try:
        call()
    except (ValueError, TypeError, AttributeError) as error:  # AttributeError: a hyper-parameter that is read-only
        return f"`{type(error).__name__}`: {error}"
    return "accepted: gradients as for the same values in float64"


def table():
    with files(), MLP(SIZES, dtype="float64", backend="numpy") as net:
        rows = [f"| {what} | {outcome(call)} |" for what, call in cases(net)]
    return "\n".join(["| input | answer |", "| --- | --- |", *(row.replace("\n", " ") for row in rows)])


def test_the_table_is_what_the_library_answers():
    generated = table()
    text = PAGE.read_text()
    block = re.compile(re.escape(START) + r"\n(.*?)" + re.escape(END), re.S)
    if os.environ.get("LEAPFROG_WRITE_TABLE") == "1":
        PAGE.write_text(block.sub(lambda _: f"{START}\n{generated}\n{END}", text))
        text = PAGE.read_text()
    found = block.search(text)
    assert found, f"docs/bad-input.md has no {START} ... {END} block"
    assert found.group(1) == generated + "\n", "docs/bad-input.md is stale: rerun with LEAPFROG_WRITE_TABLE=1"


def test_every_row_is_accepted_or_a_clear_error():
    for line in table().splitlines()[2:]:
        assert "accepted" in line or "Error`: " in line, line
