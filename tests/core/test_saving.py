"""``net.save(path)`` and ``leapfrog_gpu.load(path)``: every network comes back as it was, bit for bit, and goes
on as the unbroken one does; a file that is not one is refused in one line; a write is whole or not at all.

The expected values are the unbroken network's own: its parameters, outputs and next step, which the loaded
network must give bit for bit."""

import contextlib
import io
import json
import os
import pickle
import re
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import leapfrog_gpu
from helpers import Gate, assert_bitwise_equal, batch, dense_net, flip_last_byte, residual_net, spoil_member
from leapfrog_gpu import MLP, RNN, SGD, Adam, AdamW, Add, Concat, DagNet, Dense, Layer, LayerNorm
from leapfrog_gpu.backends import to_host
from leapfrog_gpu.core import files, saving
from leapfrog_gpu.dag.network import residual
from networks import Mirror, network

TAU = 3

NETWORKS = {
    "MLP": lambda backend: MLP([3, 6, 5, 2], activation="relu", cost="cross_entropy", seed=1, backend=backend),
    "RNN-elman": lambda backend: RNN([3, 6, 5, 2], activation="relu", output="every", seed=1, backend=backend),
    "RNN-gru": lambda backend: RNN([3, 6, 2], cell="gru", output="last", dtype="float64", seed=1, backend=backend),
    "RNN-lstm": lambda backend: RNN([3, 4, 5, 2], cell="lstm", cost="cross_entropy", output="every", seed=1,
                                    check_finite=True, backend=backend),
    "DagNet-residual": lambda backend: residual([3, 6, 6, 6, 2], skip=1, activation="tanh", seed=1, backend=backend),
    "DagNet-concat-layernorm": lambda backend: network("DagNet", backend),
    "DagNet-densenet": lambda backend: dense_net(backend, cost="cross_entropy"),
    "DagNet-two-skips": lambda backend: residual_net(backend),
    "DagNet-no-parameters": lambda backend: DagNet(3, [("c", Concat(), ["x", "x"]), ("out", Add(), ["c", "c"])],
                                                   backend=backend),
}
"""Every kind of network: an RNN of each cell, DAGs of every kind of node (``Dense``, ``Add``, ``Concat``,
``LayerNorm``), and one of no parameter, whose optimizer state is its step count and slots of nothing."""


def data(net, seed=0):
    """A batch of 4 samples for ``net``, in its dtype."""
    if isinstance(net, RNN):
        return batch(net.sizes, 4, seed, net.dtype, tau=TAU, output=net.output)
    sizes = [net.n["x"], net.n[net.output]] if isinstance(net, DagNet) else net.sizes
    return batch(sizes, 4, seed, net.dtype)


def host(params):
    """``{unit: {name: array}}`` as a list of host arrays, in order."""
    return [np.array(to_host(a)) for named in params.values() for a in named.values()]


def held(net):
    """The optimizer state of ``net`` as a list of host arrays, slot by slot, and its step count."""
    state = net.optimizer_state()
    return [a for slot, params in state.items() if slot != "step" for a in host(params)], state["step"]


@pytest.mark.parametrize("name", list(NETWORKS))
@pytest.mark.parametrize("optimizer", [Adam(lr=0.01), AdamW(lr=0.01, betas=(0.8, 0.99)),
                                       SGD(0.1, momentum=0.9, nesterov=True), SGD(0.1)], ids=repr)
def test_a_loaded_network_goes_on_as_the_unbroken_one(tmp_path, backend_name, name, optimizer):
    """Saved after two steps and loaded: the same kind, architecture, parameters, outputs and optimizer state,
    and the next step (at another lr, which only the step's optimizer brings) the same, bit for bit."""
    with NETWORKS[name](backend_name) as net:
        for seed in (1, 2):
            net.train_step(*data(net, seed), optimizer)
        assert net.save(tmp_path / "net") == tmp_path / "net.npz"
        with leapfrog_gpu.load(tmp_path / "net.npz", backend=backend_name) as loaded:
            assert type(loaded) is type(net) and loaded.architecture() == net.architecture()
            assert loaded.dtype == net.dtype and loaded.check_finite == net.check_finite
            assert loaded.structure() == net.structure()
            assert_bitwise_equal(host(loaded.parameters()), host(net.parameters()))
            x, y = data(net, 3)
            assert_bitwise_equal([to_host(loaded.feedforward(x))], [to_host(net.feedforward(x))])
            (slots, steps), (expected, expected_steps) = held(loaded), held(net)
            assert_bitwise_equal(slots, expected)
            assert steps == expected_steps == (0 if optimizer.plain else 2)
            assert repr(loaded.held_optimizer()) == repr(net.held_optimizer())
            (state, arrays), (again, again_arrays) = saving.read(tmp_path / "net"), saving.read(loaded.save(
                tmp_path / "again"))  # saved again before a step: the same file but for its zip's dates
            assert again == state and list(again_arrays) == list(arrays)
            assert_bitwise_equal(list(again_arrays.values()), list(arrays.values()))
            following = type(optimizer)(**{**optimizer.hyper(), "lr": optimizer.lr / 2})
            for each in (net, loaded):
                each.train_step(x, y, following)
            assert_bitwise_equal(host(loaded.parameters()), host(net.parameters()))
            assert_bitwise_equal(held(loaded)[0], held(net)[0])


@pytest.mark.parametrize("name", ["MLP", "RNN-gru", "DagNet-concat-layernorm"])
def test_a_network_on_the_cupy_stand_in_goes_on_as_the_unbroken_one(tmp_path, standin, name):
    """Device arrays go into the file through the host and come back: on the CuPy backend (its kernels on the CPU
    harness) the loaded network's next Adam step is the unbroken one's; on NumPy the same parameters load."""
    from leapfrog_gpu.backends.cuda import CupyBackend

    with CupyBackend() as backend, NETWORKS[name](backend) as net:
        net.train_step(*data(net, 1), Adam(lr=0.01))
        net.save(tmp_path / "net")
        saved = host(net.parameters())
        with leapfrog_gpu.load(tmp_path / "net", backend=backend) as loaded:
            x, y = data(net, 2)
            for each in (net, loaded):
                each.train_step(x, y, Adam(lr=0.01))
            assert_bitwise_equal(host(loaded.parameters()), host(net.parameters()))
    with leapfrog_gpu.load(tmp_path / "net", backend="numpy") as on_host:
        assert on_host.backend.name == "numpy"
        assert_bitwise_equal(host(on_host.parameters()), saved)


def test_the_file_holds_the_arrays_by_their_names_and_the_state_in_json(tmp_path):
    """As the command's checkpoints name them; the optimizer with the lr of its last step."""
    with RNN([3, 4, 2], cell="gru", backend="numpy") as net:
        net.train_step(*data(net), Adam(lr=0.01))
        net.train_step(*data(net), Adam(lr=0.02, weight_decay=0.0))
        net.save(tmp_path / "gru.npz")
    with np.load(tmp_path / "gru.npz") as archive:
        names = ["w2", "u2", "b2", "b_hn2", "w3", "b3"]
        assert archive.files == [*names, *(f"{slot}.{name}" for slot in ("exp_avg", "exp_avg_sq") for name in names),
                                 "state"]
        state = json.loads(archive["state"].item())
    assert state == {"format": 1, "network": "RNN",
                     "architecture": {"sizes": [3, 4, 2], "activation": "tanh", "cost": "quadratic",
                                      "output_activation": "tanh", "dtype": "float32", "check_finite": False,
                                      "output": "last", "cell": "gru"},
                     "optimizer": {"kind": "Adam", "hyper": {"lr": 0.02, "betas": [0.9, 0.999], "eps": 1e-8,
                                                             "weight_decay": 0.0}, "step": 2}}


def test_a_subclass_is_refused_naming_every_network_load_builds_whatever_was_imported(tmp_path):
    """leapfrog_gpu.load imports the three networks' packages; a saved subclass's refusal named only those imported
    so far (an MLP's alone: "load builds MLP again"). The networks it names are those that register themselves."""
    code = ("import sys; from leapfrog_gpu.mlp import MLP\n"
            "class Wider(MLP): pass\n"
            "try: Wider([2, 3], backend='numpy').save(sys.argv[1])\n"
            "except TypeError as error: print(error)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout == "a Wider cannot be saved: load builds DagNet, MLP, RNN again, and no subclass of them\n"
    assert list(saving.NETWORKS) == sorted(saving.KINDS) == sorted(cls.__name__ for cls in (DagNet, MLP, RNN))
    assert list(tmp_path.iterdir()) == []


def test_a_dag_is_written_node_by_node(tmp_path):
    with network("DagNet", "numpy") as net:
        net.save(tmp_path / "dag")
        architecture = saving.read(tmp_path / "dag")[0]["architecture"]
    assert architecture == {"n_input": 3, "cost": "quadratic", "dtype": "float32", "check_finite": False, "nodes": [
        ["h", "Dense", {"n": 5, "activation": "relu"}, ["x"]], ["n", "LayerNorm", {"eps": 1e-5}, ["h"]],
        ["g", "Dense", {"n": 5, "activation": "relu"}, ["n"]], ["s", "Add", {}, ["g", "h"]],
        ["c", "Concat", {}, ["s", "x"]], ["out", "Dense", {"n": 2, "activation": "relu"}, ["c"]]]}


def test_a_name_with_or_without_npz_names_one_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with MLP([2, 3], backend="numpy") as net:
        assert net.save("model") == net.save("model.npz") == Path("model.npz")
        assert net.save("model.v2") == Path("model.v2.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz", "model.v2.npz"]
    for name in ("model", "model.npz", tmp_path / "model"):
        with leapfrog_gpu.load(name, backend="numpy") as loaded:
            assert loaded.sizes == [2, 3]


@pytest.mark.parametrize("name", [".npz", "m.NPZ", "h.npy", "d.", "c.npz.npz", "x.npzz", ".hidden"])
def test_save_names_the_file_numpy_savez_names(tmp_path, name):
    """The file numpy.savez writes for the same name, its suffix decided on the whole name (``Path(".npz").suffix``
    is empty: ".npz" was written as ".npz.npz")."""
    (tmp_path / "ours").mkdir()
    (tmp_path / "numpy").mkdir()
    np.savez(tmp_path / "numpy" / name, a=np.zeros(1))
    with MLP([2, 3], backend="numpy") as net:
        assert net.save(tmp_path / "ours" / name).name == os.listdir(tmp_path / "numpy")[0]


def test_a_data_parallel_network_loads_to_run_alone(tmp_path):
    with network("MLP", "numpy", comm=Mirror()) as net:
        net.save(tmp_path / "net")
    with leapfrog_gpu.load(tmp_path / "net", backend="numpy") as loaded:
        assert loaded.comm is None


# -- refusals ------------------------------------------------------------------------------------------------

FILES = {
    "missing": lambda path: path.unlink(),
    "folder": lambda path: (path.unlink(), path.mkdir()),
    "text": lambda path: path.write_text("w2,b2\n1,2\n"),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "flipped": lambda path: flip_last_byte(path, "w2.npy"),
    "first-byte": lambda path: path.write_bytes(bytes([path.read_bytes()[0] ^ 0xFF]) + path.read_bytes()[1:]),
    "pickle-then-zip": lambda path: path.write_bytes(pickle.dumps({"w2": 1}) + path.read_bytes()),
    "unknown-method": lambda path: _in_directory(path, 10, 0x55),
    "encrypted": lambda path: _in_directory(path, 8, 0x01),
    "deflate-damaged": lambda path: _compressed(path, zipfile.ZIP_DEFLATED, 0, lambda byte: byte | 0b110),
    "lzma-damaged": lambda path: _compressed(path, zipfile.ZIP_LZMA, 4, lambda byte: 0xFF),
    "bzip2-damaged": lambda path: _compressed(path, zipfile.ZIP_BZIP2, 0, lambda byte: byte ^ 0xFF),
    "foreign": lambda path: np.savez(path, w2=np.ones((3, 2))),
    "pickled": lambda path: np.savez(path, state=np.array([{}], dtype=object), allow_pickle=True),
    "state-a-number": lambda path: np.savez(path, state=np.array(5)),
    "state-two-texts": lambda path: np.savez(path, state=np.array(["{}", "{}"])),
    "state-not-json": lambda path: np.savez(path, state=np.array("{x")),
    "state-a-list": lambda path: np.savez(path, state=np.array("[1]")),
    "state-null": lambda path: np.savez(path, state=np.array("null")),
    "no-format": lambda path: _rewritten(path, lambda state: {"sizes": [2, 3], "config": {}}),
    "newer": lambda path: _rewritten(path, lambda state: {**state, "format": 2}),
    "format-a-string": lambda path: _rewritten(path, lambda state: {**state, "format": "1"}),
    "format-negative": lambda path: _rewritten(path, lambda state: {**state, "format": -7}),
    "format-zero": lambda path: _rewritten(path, lambda state: {**state, "format": 0}),
    "unknown-kind": lambda path: _rewritten(path, lambda state: {**state, "network": "Transformer"}),
    "kind-a-list": lambda path: _rewritten(path, lambda state: {**state, "network": ["MLP"]}),
    "unbuildable": lambda path: _rewritten(path, lambda state: {**state, "architecture": {"sizes": [2]}}),
    "other-shapes": lambda path: _rewritten(path, lambda state: {**state, "architecture": {"sizes": [2, 4]}}),
    "deeper": lambda path: _rewritten(path, lambda state: {**state, "architecture": {"sizes": [2, 3, 3]}}),
    "huge": lambda path: _rewritten(path, lambda state: {**state, "architecture": {"sizes": [2, 10**7, 10**7, 3]}}),
    "huge-array": lambda path: _claiming(path, "w2.npy", (10**7, 10**7)),
    "float64-weights": lambda path: _rewritten(path, lambda state: state, retyped=("w2", np.float64)),
    "float16-moments": lambda path: _rewritten(path, lambda state: state, retyped=("exp_avg_sq.b2", np.float16)),
    "no-slots": lambda path: _rewritten(path, lambda state: state, drop="exp_avg.w2"),
    "bad-optimizer": lambda path: _rewritten(path, lambda state: {**state, "optimizer": {"kind": "Lion"}}),
    "extra": lambda path: _rewritten(path, lambda state: state, extra="w9"),
}
"""Ways to spoil the file of ``MLP([2, 3])`` after an Adam step (``REFUSALS`` says what each gives)."""

REFUSALS = {
    "missing": r"neither {path} nor {path}\.npz exists: check the name \(save appends \.npz to a name without it\)",
    "folder": r"{path} is a folder, not a saved network: give the path of the file that save wrote",
    "text": r"{path} is not an \.npz archive \(damaged, or another kind of file\): save the network again, or "
            r"load another file",
    "truncated": r"{path} is not an \.npz archive \(damaged, or another kind of file\)",
    "first-byte": r"{path} is not an \.npz archive \(damaged, or another kind of file\): save the network again",
    "pickle-then-zip": r"{path} is not an \.npz archive \(damaged, or another kind of file\)",
    "flipped": r"{path} is damaged \(BadZipFile: Bad CRC-32 for file '\w+\.npy'\): save the network again",
    "unknown-method": r"{path} is damaged \(NotImplementedError: That compression method is not supported\): save the "
                      r"network again",
    "encrypted": r"{path} is damaged \(RuntimeError: File '\w+\.npy' is encrypted, password required for extraction\)",
    "deflate-damaged": r"{path} is damaged \(zlib\.error: Error -3 while decompressing data: invalid block type\): "
                       r"save the network again",
    "lzma-damaged": r"{path} is damaged \(LZMAError: Invalid or unsupported options\): save the network again",
    "bzip2-damaged": r"{path} is damaged \(OSError: Invalid data stream\): save the network again",
    "foreign": r"{path} holds no network saved by leapfrog_gpu \(an \.npz archive without its 'state'\): load it "
               r"with numpy\.load",
    "pickled": r"{path} is damaged \(ValueError: Object arrays cannot be loaded when allow_pickle=False\)",
    "state-a-number": r"{path} is damaged \(TypeError: the JSON object must be str, bytes or bytearray, not int\)",
    "state-two-texts": r"{path} is damaged \(ValueError: can only convert an array of size 1 to a Python scalar\)",
    "state-not-json": r"{path} is damaged \(JSONDecodeError: Expecting property name enclosed in double quotes",
    "state-a-list": r"{path} is damaged \(its 'state' is \[1\], not the JSON object that save writes\): save the "
                    r"network again",
    "state-null": r"{path} is damaged \(its 'state' is None, not the JSON object that save writes\)",
    "no-format": r"{path} holds no architecture to build a network from \(a checkpoint of an older leapfrog-train\?\):"
                 r" load it with leapfrog_gpu\.tools\.train\.models\.load",
    "newer": r"{path} is of format 2; this leapfrog_gpu reads format 1 and older: upgrade leapfrog_gpu to load it",
    "format-a-string": r"{path} is damaged \(its format is '1', not a version number: 1, 2, \.\.\.\): save the network "
                       r"again",
    "format-negative": r"{path} is damaged \(its format is -7, not a version number: 1, 2, \.\.\.\)",
    "format-zero": r"{path} is damaged \(its format is 0, not a version number: 1, 2, \.\.\.\)",
    "unknown-kind": r"{path} holds a network of unknown kind 'Transformer'; this leapfrog_gpu builds DagNet, MLP, "
                    r"RNN: load it with a leapfrog_gpu that knows it",
    "kind-a-list": r"{path} holds a network of unknown kind \['MLP'\]; this leapfrog_gpu builds DagNet, MLP, RNN",
    "unbuildable": r"{path} holds an architecture that builds no MLP \(sizes must list at least 2 layers",
    "other-shapes": r"{path} does not fit its MLP \(weights of layer 2 must have shape \(4, 2\); got \(3, 2\)\): "
                    r"save the network again, or load another file",
    "deeper": r"{path} does not fit its MLP \(no array 'w3' \(the parameter w of unit 3\)\)",
    "huge": r"{path} holds an architecture whose MLP is too large for this machine's memory to build: load it where "
            r"more memory is free",
    "huge-array": r"{path} holds an array larger than this machine can hold \(Unable to allocate 364\. TiB for an "
                  r"array with shape .* and data type float32\): load it on a machine with more memory if it is not "
                  r"damaged$",
    "float64-weights": r"{path} does not fit its MLP \(array 'w2' is float64, not the network's float32\): save the "
                       r"network again",
    "float16-moments": r"{path} does not fit its MLP \(array 'exp_avg_sq\.b2' is float16, not the network's float32\)",
    "no-slots": r"{path} does not fit its MLP \(no array 'exp_avg\.w2' for the state of Adam\(lr=0\.01",
    "bad-optimizer": r"{path} does not fit its MLP \(its optimizer 'Lion' is none of SGD, Adam, AdamW",
    "extra": r"{path} does not fit its MLP \(arrays \['w9'\] fit no parameter of it\)",
}


def _in_directory(path, offset, mask):
    """The byte at ``offset`` of the first entry of the zip's central directory at ``path`` xor ``mask``: at 8 its
    flags (bit 0: encrypted), at 10 its compression method."""
    content = bytearray(path.read_bytes())
    content[content.index(b"PK\x01\x02") + offset] ^= mask
    path.write_bytes(bytes(content))


def _compressed(path, method, offset, change):
    """The file at ``path`` written again with its members compressed by ``method``, then the byte at ``offset`` of
    w2.npy's compressed data replaced by ``change(byte)``: at 0 of a deflate stream its block type (RFC 1951: bits 1-2
    of the first byte; 0b11 is reserved), at 4 of a zip's LZMA member its lc/lp/pb byte (at most 224), at 0 of a
    bzip2 stream its magic "BZh"."""
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    with leapfrog_gpu.load(path, backend="numpy") as intact:  # compressed, it loads
        assert intact.sizes == [2, 3]
    spoil_member(path, "w2.npy", offset, change)


def _claiming(path, entry, shape):
    """The file at ``path`` written again with the header of ``entry`` claiming ``shape``, and no data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, header.getvalue() if name == entry else content)


def _rewritten(path, change, drop=None, extra=None, retyped=None):
    """The file at ``path`` written again with its state ``change``d, the array ``drop`` left out, an array
    ``extra`` added, the array ``retyped[0]`` cast to the dtype ``retyped[1]``."""
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files if name != drop}
    if retyped:
        arrays[retyped[0]] = arrays[retyped[0]].astype(retyped[1])
    arrays["state"] = np.array(json.dumps(change(json.loads(arrays["state"].item()))))
    if extra:
        arrays[extra] = np.ones(3)
    np.savez(path, **arrays)


@pytest.mark.parametrize("spoil", list(FILES))
def test_a_file_that_is_not_a_saved_network_is_refused_in_one_line(tmp_path, spoil):
    """Whatever is wrong, a ValueError of one line that says what, and what to do; the file is left as it was."""
    path = tmp_path / "model.npz"
    with MLP([2, 3], backend="numpy") as net:
        net.train_step(*data(net), Adam(lr=0.01))
        net.save(path)
    FILES[spoil](path)
    given = tmp_path / "model" if spoil == "missing" else path
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(ValueError) as error:
        leapfrog_gpu.load(given, backend="numpy")
    message = str(error.value)
    assert "\n" not in message and "pickle" not in message.replace("allow_pickle", ""), message
    assert error.match("^" + REFUSALS[spoil].format(path=re.escape(str(given))))
    assert (path.read_bytes() if path.is_file() else None) == before


def test_an_empty_path_is_refused_as_such_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with MLP([2, 3], backend="numpy") as net:
        with pytest.raises(ValueError, match="^the path is empty: give a file's name, such as 'model.npz'$"):
            net.save("")
    with pytest.raises(ValueError, match="^the path is empty: give a file's name, such as 'model.npz'$"):
        leapfrog_gpu.load("", backend="numpy")
    assert list(tmp_path.iterdir()) == []


def test_a_bad_backend_is_refused_as_such_before_the_file(tmp_path):
    with MLP([2, 3], backend="numpy") as net:
        net.save(tmp_path / "model")
    with pytest.raises(ValueError, match="^backend must be one of 'auto', 'numpy', 'cupy'; got 'tpu'$"):
        leapfrog_gpu.load(tmp_path / "model", backend="tpu")


class Scaled(Gate):
    """``Gate`` times ``scale``, an option: a = (x * tanh(v) + c) * scale."""

    def __init__(self, scale):
        self.scale = scale

    def options(self):
        return {"scale": self.scale}

    def forward(self, backend, params, inputs):
        a, saved = super().forward(backend, params, inputs)
        return a * self.scale, saved

    def error(self, backend, params, saved, abar):
        return abar * self.scale


def test_a_dagnet_of_ones_own_layers_loads_given_their_classes(tmp_path):
    """Saved with each node's class name and ``options()``; ``load`` builds them by the classes it is given (the
    options too: a scale of 0.5 loaded as any other changes the outputs), the parameters and the next step's bit
    for bit; without them it names what to pass."""
    x, y = batch([3, 2], 4, seed=1, dtype=np.float64)
    nodes = [("h", Dense(4, "tanh"), "x"), ("g", Scaled(0.5), "h"), ("k", Gate(), "g"), ("out", Dense(2), "k")]
    with DagNet(3, nodes, dtype="float64", seed=5, backend="numpy") as net:
        net.train_step(x, y, Adam(0.01))
        path = net.save(tmp_path / "own")
        for given, more in [([Gate], ""), ([], " (and 1 more of one's own)")]:  # every class it needs, not one
            with pytest.raises(saving.UnreadableFileError, match=re.escape(  # at a time, nor those left out
                    f"{path} holds a DagNet whose node 'g' is a Scaled, a Layer of one's own{more}: give the classes "
                    "of its own to load: load(path, layers=[Scaled, Gate])")):
                leapfrog_gpu.load(path, backend="numpy", layers=given)
        with leapfrog_gpu.load(path, backend="numpy", layers=[Gate, Scaled, Gate]):  # one class given twice is one
            pass
        namesake = type("Scaled", (Gate,), {})
        with pytest.raises(ValueError, match=r"^layers holds two classes named Scaled: a file names a node's class by "
                                             r"its name alone, so give one of them$"):  # the last one was taken
            leapfrog_gpu.load(path, backend="numpy", layers=[Gate, Scaled, namesake])
        for bad in ([Scaled(0.5)], Scaled, "Scaled", 5):  # a class, or a name, alone: no list
            with pytest.raises(TypeError, match=r"^layers must be a list of classes \(of one's own Layer, which a "
                                                rf"saved DagNet's nodes are\); got {re.escape(repr(bad))}$"):
                leapfrog_gpu.load(path, backend="numpy", layers=bad)
        with leapfrog_gpu.load(path, backend="numpy", layers=[Gate, Scaled]) as loaded:
            assert [type(loaded.layer[v]) for v in loaded.order] == [Dense, Scaled, Gate, Dense]
            assert loaded.layer["g"].scale == 0.5
            assert_bitwise_equal(loaded.feedforward(x), net.feedforward(x))
            net.train_step(x, y, Adam(0.01))
            loaded.train_step(x, y, Adam(0.01))
            for unit, named in net.parameters().items():
                for name, array in named.items():
                    assert_bitwise_equal(loaded.parameters()[unit][name], array)


class Unsaid(Gate):
    """A ``Gate`` of a setting its constructor needs, and ``options()`` as ``Layer``'s: none, from which load
    cannot build it."""

    def __init__(self, scale):
        self.scale = scale


class UnsaidDefault(Gate):
    """The same of a default setting, from which load builds it with the default."""

    def __init__(self, scale=1.0):
        self.scale = scale


class UnsaidBounds(Gate):
    """A default setting of a tuple, which options() do not say."""

    def __init__(self, bounds=(-1.0, 1.0)):
        self.bounds = tuple(bounds)


class Counting(Scaled):
    """``Scaled`` keeping what is no setting of its own: its width once sized, and a count of its passes."""

    def __init__(self, scale):
        super().__init__(scale)
        self.width, self.passes = None, 0

    def size(self, sizes):
        self.width = super().size(sizes)
        return self.width

    def forward(self, backend, params, inputs):
        self.passes += 1
        return super().forward(backend, params, inputs)


def test_a_layer_that_keeps_state_beyond_its_settings_is_saved(tmp_path):
    """What is compared with the layer its options() build again is its constructor's arguments alone."""
    with DagNet(2, [("g", Counting(0.5), "x")], backend="numpy") as dag:
        dag.feedforward(np.ones(2))
        with leapfrog_gpu.load(dag.save(tmp_path / "counting"), backend="numpy", layers=[Counting]) as loaded:
            assert loaded.layer["g"].scale == 0.5


class SaidBounds(UnsaidBounds):
    """``UnsaidBounds`` whose options() say its tuple as JSON does, a list."""

    def options(self):
        return {"bounds": list(self.bounds)}


class SaidAsFloat(Scaled):
    """``Scaled`` whose options() say its scale as a float, however given."""

    def options(self):
        return {"scale": float(self.scale)}


class Dropped(Scaled):
    """``Scaled`` that drops its setting once sized: the layer built again holds it, the one saved does not."""

    def size(self, sizes):
        self.factor = self.scale
        del self.scale
        return super().size(sizes)

    def options(self):
        return {"scale": self.factor}

    def forward(self, backend, params, inputs):
        a, saved = Gate.forward(self, backend, params, inputs)
        return a * self.factor, saved


def test_a_layer_whose_options_build_its_settings_again_as_json_reads_them_is_saved(tmp_path):
    """A tuple said as a list, an int as a float, and a setting the layer saved no longer holds build it again."""
    for layer, same in [(SaidBounds((0.0, 0.1)), lambda g: g.bounds == (0.0, 0.1)),
                        (SaidAsFloat(2), lambda g: g.scale == 2.0), (Dropped(0.5), lambda g: g.factor == 0.5)]:
        with DagNet(2, [("g", layer, "x")], backend="numpy") as dag:
            dag.feedforward(np.ones(2))
            with leapfrog_gpu.load(dag.save(tmp_path / "said"), backend="numpy", layers=[type(layer)]) as loaded:
                loaded.feedforward(np.ones(2))
                assert same(loaded.layer["g"])


class Halved(Gate):
    """A ``Gate`` whose option names an entry of ``SCALES``, as a layer of one's own may look its options up."""

    SCALES = {"half": 0.5}

    def __init__(self, mode):
        self.mode, self.scale = mode, self.SCALES[mode]

    def options(self):
        return {"mode": self.mode}


def test_a_layer_of_ones_own_that_raises_a_lookup_error_as_it_is_built_is_a_file_load_cannot_build(tmp_path,
                                                                                                   monkeypatch):
    """Its KeyError named in one line (it was an IndexError of load's own), not taken for a class not given."""
    nodes = [("h", Dense(4, "tanh"), "x"), ("g", Halved("half"), "h"), ("out", Dense(2), "g")]
    with DagNet(3, nodes, dtype="float64", seed=5, backend="numpy") as net:
        path = net.save(tmp_path / "own")
    monkeypatch.setattr(Halved, "SCALES", {})
    with pytest.raises(saving.UnreadableFileError, match=re.escape(f"{path} holds an architecture that builds no "
                                                                   "DagNet (KeyError: 'half'): ")):
        leapfrog_gpu.load(path, backend="numpy", layers=[Halved])


def test_what_cannot_be_written_is_refused_by_name_and_writes_nothing(tmp_path):
    """A missing folder, a value the state cannot hold, two parameters of one name in a file, a node of one's own
    layer under the name of one of ours or with options that are not JSON-able, a subclass: each refused before
    anything is written, and the file already there is left as it was."""
    path = tmp_path / "model.npz"
    with MLP([2, 3], backend="numpy") as net:
        net.save(path)
        before = path.read_bytes()
        missing = re.escape(str(tmp_path / "no"))
        with pytest.raises(ValueError, match=f"^cannot save to {missing}/model.npz: there is no folder {missing}$"):
            net.save(tmp_path / "no" / "model")
        with pytest.raises(TypeError, match="is not JSON serializable"):
            saving.save(net, path, note=object())
    with DagNet(3, [("eta2", Dense(3), "x"), ("2", LayerNorm(), "eta2"), ("out", Dense(2), "2")],
                backend="numpy") as dag, pytest.raises(ValueError, match="^two arrays of this DagNet would both be "
                                                                         "read from a file as 'beta2' "):
        dag.save(path)  # b of "eta2", beta of "2"
    clash = type("Dense", (Gate,), {})  # a class of one's own under the name of leapfrog_gpu's
    with DagNet(2, [("h", Gate(), "x"), ("g", clash(), "h")], backend="numpy") as dag:
        with pytest.raises(TypeError, match="^node 'g' is a [\\w.]+\\.Dense, which has the name of leapfrog_gpu's "
                                            "Dense: give its class another name to save it$"):
            dag.save(path)
    with DagNet(2, [("g", Scaled(object()), "x")], backend="numpy") as dag:
        with pytest.raises(TypeError, match="^node 'g': the options\\(\\) of its Scaled, which build it again, must "
                                            "be JSON-able \\(numbers, strings, lists, dicts\\): Object of type object"):
            dag.save(path)
    remedy = "define options() to return the keyword arguments that build it, as load builds it"
    for layer, said in [(Unsaid(0.5), "Unsaid(**{}) fails (Unsaid.__init__() missing 1 required positional argument: "
                                   "'scale')"),
                        (UnsaidDefault(0.5), "UnsaidDefault(**{}) builds one whose scale is 1.0, not 0.5"),
                        (UnsaidBounds([0, 0.1]), "UnsaidBounds(**{}) builds one whose bounds is (-1.0, 1.0), not "
                                                 "(0, 0.1)")]:
        with DagNet(2, [("g", layer, "x")], backend="numpy") as dag:  # options() left as Layer's: none
            with pytest.raises(TypeError, match=f"^{re.escape(f'node {chr(39)}g{chr(39)}: {said}: {remedy}')}$"):
                dag.save(path)

    class Wider(MLP):
        pass

    with Wider([2, 3], backend="numpy") as wider, pytest.raises(TypeError, match="^a Wider cannot be saved: load "
                                                                                 "builds DagNet, MLP, RNN again"):
        wider.save(path)

    class Warm(Adam):
        pass

    with MLP([2, 3], backend="numpy") as net:  # a file load would have refused as damaged
        net.train_step(*data(net), Warm())
        with pytest.raises(TypeError, match="^this MLP holds the state of a Warm, which cannot be saved: load makes "
                                            "SGD, Adam, AdamW again, and no subclass of them$"):
            net.save(path)
    with DagNet(2, [("h", Dense(3), "x"), ("h.npy", Dense(2), "h")], backend="numpy") as dag:  # "wh.npy" read as "wh"
        with pytest.raises(ValueError, match="^two arrays of this DagNet would both be read from a file as 'wh' "):
            dag.save(path)
    with DagNet(2, [("tate", Scale(), "x"), ("out", Dense(2), "tate")], backend="numpy") as dag:  # s of tate: "state"
        with pytest.raises(ValueError, match="^two arrays of this DagNet would both be read from a file as 'state' "
                                             r"\(a parameter's name, then its unit's, and the file's 'state'"):
            dag.save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]


class Scale(Layer):
    """a = s * x, elementwise: a layer whose parameter ``s`` names an array "state" in node "tate"."""

    params = ("s",)

    def size(self, sizes):
        return sizes[0]

    def init(self, rng, sizes):
        return {"s": np.ones(sizes[0])}

    def forward(self, backend, params, inputs):
        return inputs[0] * params["s"][:, None], {}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [g * params["s"][:, None]]

    def vjp_params(self, backend, params, inputs, saved, g):
        return {"s": (g * inputs[0]).sum(axis=1)}


def test_a_folder_or_what_is_no_path_is_refused_and_nothing_is_written(tmp_path):
    """An existing folder, or a name that ends as a folder's, is refused (save would write "<folder>.npz" beside
    it); so is a path that is no str or Path, with a TypeError."""
    (tmp_path / "runs").mkdir()
    with MLP([2, 3], backend="numpy") as net:
        for given in (tmp_path / "runs", f"{tmp_path / 'runs'}/", f"{tmp_path / 'new'}/"):
            where = re.escape(str(given))
            with pytest.raises(ValueError, match=f"^cannot save to {where}: it names a folder; give a file's name, "
                                                 f"such as {re.escape(str(Path(given) / 'model.npz'))}$"):
                net.save(given)
        for given in (None, b"model.npz", 3):
            with pytest.raises(TypeError, match=f"^the path must be a file's name, a str or a pathlib.Path; got "
                                                f"{re.escape(repr(given))}$"):
                net.save(given)
            with pytest.raises(TypeError, match=f"^the path must be a file's name, a str or a pathlib.Path; got "
                                                f"{re.escape(repr(given))}$"):
                leapfrog_gpu.load(given, backend="numpy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"] and not any((tmp_path / "runs").iterdir())


def test_a_write_the_system_refuses_names_the_file_not_its_temporary(tmp_path, monkeypatch):
    """The OSError of a write that fails (here: a folder this process may not write, as a non-root user finds
    it) names the file asked for, as ``open`` would, not the temporary file beside it."""
    path = tmp_path / "model.npz"

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".model.npz-abc.tmp"))

    monkeypatch.setattr(files, "_created", refused)
    with MLP([2, 3], backend="numpy") as net, pytest.raises(PermissionError) as raised:
        net.save(path)
    assert str(raised.value) == f"[Errno 13] Permission denied: '{path}'"
    assert list(tmp_path.iterdir()) == []


# -- the write is atomic -------------------------------------------------------------------------------------


def test_a_failed_write_keeps_the_previous_file_and_leaves_no_debris(tmp_path, monkeypatch):
    path = tmp_path / "model.npz"
    with MLP([2, 4, 3], seed=0, backend="numpy") as net:
        net.save(path)
        before = path.read_bytes()
        net.sgd_step(*data(net), 1.0)
        write_array, calls = np.lib.format.write_array, []

        def fail_on_the_third_array(*args, **kwargs):
            calls.append(None)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            write_array(*args, **kwargs)

        monkeypatch.setattr(np.lib.format, "write_array", fail_on_the_third_array)
        with pytest.raises(OSError, match="No space left"):
            net.save(path)
    assert len(calls) == 3 and path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]
    assert zipfile.is_zipfile(path)


def test_arrays_of_the_other_byte_order_load_as_they_are(tmp_path):
    """A file written where NumPy's native byte order is big-endian: the same numbers, the network's dtype."""
    path = tmp_path / "model.npz"
    with MLP([2, 3], backend="numpy") as net:
        net.train_step(*data(net), Adam(lr=0.01))
        net.save(path)
        want = net.parameters()
    with np.load(path) as archive:
        arrays = {name: archive[name] if name == "state" else archive[name].astype(archive[name].dtype.newbyteorder())
                  for name in archive.files}
    np.savez(path, **arrays)
    with leapfrog_gpu.load(path, backend="numpy") as loaded:
        got = loaded.parameters()
        assert all(np.array_equal(got[unit][name], want[unit][name]) and got[unit][name].dtype == np.float32
                   for unit in want for name in want[unit])


def test_a_save_removes_a_killed_writers_temporary_file_not_one_being_written(tmp_path):
    """A temporary file untouched for ``STALE`` seconds is a killed writer's; a fresh one may be another process's
    (every rank saving the same network), which removed under it made that save fail."""
    for name, age in ((".model.npz-abc123.tmp", saving.STALE + 1), (".model.npz-def456.tmp", saving.STALE - 60),
                      (".other.npz-abc123.tmp", saving.STALE + 1)):
        (tmp_path / name).write_bytes(b"PK half a file")
        os.utime(tmp_path / name, (time.time() - age,) * 2)
    with MLP([2, 3], backend="numpy") as net:
        net.save(tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.npz-def456.tmp", ".other.npz-abc123.tmp",
                                                          "model.npz"]


def test_the_file_is_synced_before_the_rename_and_its_folder_after(tmp_path, monkeypatch):
    """What survives a loss of power: the new file's bytes are on disk before the rename makes it the
    file, and the rename itself (the folder) after it."""
    calls, fsync, replace = [], os.fsync, os.replace

    def recorded_fsync(fd):
        calls.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def recorded_replace(source, target):
        calls.append(("replace", os.path.realpath(source), os.path.realpath(target)))
        replace(source, target)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    with MLP([2, 3], backend="numpy") as net:
        path = os.path.realpath(net.save(tmp_path / "model"))
    replaced = [i for i, call in enumerate(calls) if call[0] == "replace"]
    assert len(replaced) == 1, calls
    (_, temporary, target), i = calls[replaced[0]], replaced[0]
    assert target == path and os.path.dirname(temporary) == os.path.dirname(path)
    assert ("fsync", temporary) in calls[:i], f"the file is not synced before the rename: {calls}"
    assert ("fsync", os.path.dirname(path)) in calls[i + 1:], f"the folder is not synced after the rename: {calls}"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_file_gets_the_mode_of_any_new_file(tmp_path, umask):
    """Not the 0600 of a temporary file: what open() gives under the umask."""
    previous = os.umask(umask)
    try:
        with MLP([2, 3], backend="numpy") as net:
            path = net.save(tmp_path / "model")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604])
def test_a_file_saved_over_keeps_its_mode(tmp_path, mode):
    """As open() leaves an existing file's mode: a checkpoint made private stays private (the umask does not
    widen it)."""
    path = tmp_path / "model.npz"
    previous = os.umask(0o022)
    try:
        with MLP([2, 3], backend="numpy") as net:
            net.save(path)
            path.chmod(mode)
            net.save(path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == mode


@pytest.mark.parametrize("root", [False, True], ids=["by-mode", "by-access"])
def test_a_file_this_process_may_not_write_is_refused_as_open_refuses_it_and_kept(tmp_path, monkeypatch, root):
    """A read-only file: the PermissionError of ``open(path, "wb")``, naming it, and its bytes kept (the rename used
    to replace it). As root, who may write any file, the refusal is checked through ``os.access`` saying no."""
    path = tmp_path / "model.npz"
    with MLP([2, 3], backend="numpy") as net:
        net.save(path)
        kept = path.read_bytes()
        path.chmod(0o444)
        if root or os.access(path, os.W_OK):
            access = os.access
            monkeypatch.setattr(os, "access", lambda name, mode, **kw: mode != os.W_OK and access(name, mode, **kw))
        net.sgd_step(*data(net), 1.0)
        with pytest.raises(PermissionError) as refused:
            net.save(path)
    assert refused.value.filename == str(path) and path.read_bytes() == kept
    assert sorted(tmp_path.iterdir()) == [path]  # no temporary file left


@pytest.mark.parametrize("where", ["weights", "exp_avg_sq"])
def test_a_network_holding_nan_or_inf_is_refused_before_anything_is_written(tmp_path, where):
    """What load would refuse, save refuses first: a diverged parameter, or Adam's second moment overflowing float32
    from gradients that are finite (as torch.optim's does), named; the file already there is kept."""
    path = tmp_path / "model.npz"
    with MLP([4, 3], activation="relu", output_activation="relu", backend="numpy") as net:
        net.save(path)
        kept = path.read_bytes()
        x, y = np.full((4, 8), 1e12 if where == "exp_avg_sq" else 1e30), np.full((3, 8), 0.5)
        net.train_step(x, y, Adam(0.01) if where == "exp_avg_sq" else SGD(1.0))
        state = net.optimizer_state()
        if where == "exp_avg_sq":
            assert np.isinf(state["exp_avg_sq"][2]["w"]).any() and np.isfinite(net.weights[0]).all()
        slot = where + " of " if where != "weights" else ""
        with pytest.raises(ValueError, match=rf"^cannot save this MLP: its {slot}weights of layer 2 holds NaN or Inf, "
                                             r"and load takes finite "):
            net.save(path)
    assert path.read_bytes() == kept and sorted(tmp_path.iterdir()) == [path]


def test_a_link_to_no_file_yet_stays_a_link_and_its_target_is_written(tmp_path):
    """A symbolic link whose target does not exist yet: the target is written, the link kept."""
    (tmp_path / "runs").mkdir()
    target, link = tmp_path / "runs" / "model.npz", tmp_path / "model.npz"
    link.symlink_to(target)
    with MLP([2, 3], seed=0, backend="numpy") as net:
        net.save(link)
        want = [np.array(a) for named in net.parameters().values() for a in named.values()]
    assert link.is_symlink() and os.readlink(link) == str(target)
    with leapfrog_gpu.load(target) as loaded:
        assert_bitwise_equal([np.array(a) for named in loaded.parameters().values() for a in named.values()], want)


def test_a_link_keeps_pointing_at_the_file_it_names(tmp_path):
    """A symbolic link to a saved network: the save replaces the file it points at, the link stays a link (an
    atomic rename onto the link itself would have replaced the link by the file)."""
    (tmp_path / "runs").mkdir()
    target, link = tmp_path / "runs" / "model.npz", tmp_path / "model.npz"
    with MLP([2, 3], seed=0, backend="numpy") as net:
        net.save(target)
        link.symlink_to(target)
        net.sgd_step(*data(net), 1.0)
        net.save(link)
        want = [np.array(a) for named in net.parameters().values() for a in named.values()]
    assert link.is_symlink() and os.readlink(link) == str(target)
    with leapfrog_gpu.load(target) as loaded:
        assert_bitwise_equal([np.array(a) for named in loaded.parameters().values() for a in named.values()], want)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["model.npz"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe (os.mkfifo)")
def test_a_path_that_is_no_file_is_written_as_it_is(tmp_path):
    """A named pipe (as ``/dev/stdout`` may be) is written into, not replaced by a file beside it renamed onto
    it: the pipe stays a pipe, and its reader gets the whole file (a few kB, which the pipe's buffer holds)."""
    pipe = tmp_path / "model.npz"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # open first, so that the writer's open does not wait
    try:
        with MLP([2, 3], seed=0, backend="numpy") as net:
            net.save(pipe)
            want = [np.array(a) for named in net.parameters().values() for a in named.values()]
        got = b""
        with contextlib.suppress(BlockingIOError):  # nothing (more) in the pipe
            while chunk := os.read(reader, 1 << 16):
                got += chunk
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(pipe).st_mode) and zipfile.is_zipfile(io.BytesIO(got))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]
    (tmp_path / "read.npz").write_bytes(got)  # what the pipe's reader got is the whole network
    with leapfrog_gpu.load(tmp_path / "read.npz") as loaded:
        assert_bitwise_equal([np.array(a) for named in loaded.parameters().values() for a in named.values()], want)


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_a_device_that_says_it_is_at_0_is_written_in_order():
    """``/dev/null`` lets ``zipfile`` seek but tells 0 wherever it is: written as a pipe is, in order, it takes the
    file (``zipfile`` had seeked back to fill in sizes and failed on offsets below 0, a ``struct.error``)."""
    with MLP([2, 3], seed=0, backend="numpy") as net:
        assert net.save("/dev/null") == Path("/dev/null")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe (os.mkfifo)")
def test_a_pipe_is_written_under_its_own_name_without_npz(tmp_path):
    """``save("/dev/stdout")``: a pipe or a device is written as it is named, no ``.npz`` appended (which made a
    regular file beside it)."""
    pipe = tmp_path / "out"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with MLP([2, 3], seed=0, backend="numpy") as net:
            assert net.save(pipe) == pipe
        got = os.read(reader, 1 << 16)  # a few kB, all in the pipe's buffer once save returns
    finally:
        os.close(reader)
    assert zipfile.is_zipfile(io.BytesIO(got))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe (os.mkfifo)")
@pytest.mark.parametrize("name", ["out", "out.npz"])
def test_load_refuses_a_pipe_by_what_it_is(tmp_path, name):
    """A zip file is read by seeking in it: ``load`` of a pipe says it is one (it said it did not exist), and opens
    nothing (an open of a pipe with no writer would wait)."""
    pipe = tmp_path / name
    os.mkfifo(pipe)
    message = f"{pipe} is a pipe or a device, not a saved network: save to a file and give its path"
    with pytest.raises(saving.UnreadableFileError, match=f"^{re.escape(message)}$"):
        leapfrog_gpu.load(pipe)
