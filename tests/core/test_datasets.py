"""The datasets (``leapfrog_gpu.datasets``): loaders on small files written here (IDX, raw and gzipped, .npz) and
what they reject, the digits and their split, the teachers, and the sequence tasks."""

import gzip
import re
import sys
import types

import numpy as np
import pytest

from helpers import spoil_member
from leapfrog_gpu import RNN, datasets
from leapfrog_gpu.rnn import reference as rnn_reference

N_TRAIN, N_TEST, SIDE = 7, 3, 5  # odd, small sizes: 5x5 "images"


def idx_bytes(array):
    """An IDX file of unsigned bytes: two zero bytes, type 0x08, the rank, big-endian dims, the datasets."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def small_mnist(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "x_train": rng.integers(0, 256, (N_TRAIN, SIDE, SIDE), dtype=np.uint8),
        "y_train": rng.integers(0, 10, N_TRAIN, dtype=np.uint8),
        "x_test": rng.integers(0, 256, (N_TEST, SIDE, SIDE), dtype=np.uint8),
        "y_test": rng.integers(0, 10, N_TEST, dtype=np.uint8),
    }


def write_idx(directory, arrays, gzipped=False):
    for role, stem in datasets.MNIST_FILES.items():
        raw = idx_bytes(arrays[role])
        (directory / (stem + ".gz" if gzipped else stem)).write_bytes(gzip.compress(raw) if gzipped else raw)


def reserved_block(data, start):
    """``data`` with the deflate stream at ``start`` damaged: its first block's type set to 0b11, which RFC 1951
    reserves (bits 1-2 of the first byte)."""
    return data[:start] + bytes([data[start] | 0b110]) + data[start + 1:]


def check_mnist(dataset, arrays):
    assert dataset.classes == 10 and dataset.inputs == SIDE * SIDE and dataset.outputs == 10
    for split in ("train", "test"):
        x, y, images, labels = (getattr(dataset, f"x_{split}"), getattr(dataset, f"y_{split}"),
                                arrays[f"x_{split}"], arrays[f"y_{split}"])
        assert x.shape == (SIDE * SIDE, len(labels)) and x.dtype == np.float32 and x.flags.c_contiguous
        np.testing.assert_allclose(x, images.reshape(len(labels), -1).T / 255.0, rtol=1e-6)
        assert y.shape == (10, len(labels))
        np.testing.assert_array_equal(y.argmax(axis=0), labels)
        np.testing.assert_array_equal(y.sum(axis=0), 1)


@pytest.mark.parametrize("gzipped", [False, True], ids=["raw", "gz"])
def test_mnist_idx(tmp_path, gzipped):
    arrays = small_mnist()
    write_idx(tmp_path, arrays, gzipped)
    check_mnist(datasets.mnist(tmp_path), arrays)


@pytest.mark.parametrize("name", ["mnist.npz", ".npz"])  # ".npz" has no suffix to Path
def test_mnist_npz_as_directory_and_as_file(tmp_path, name):
    arrays = small_mnist(seed=1)
    np.savez(tmp_path / name, **arrays)
    check_mnist(datasets.mnist(tmp_path), arrays)
    check_mnist(datasets.mnist(tmp_path / name), arrays)


def test_mnist_float64(tmp_path):
    arrays = small_mnist()
    write_idx(tmp_path, arrays)
    assert datasets.mnist(tmp_path, dtype="float64").x_train.dtype == np.float64


def test_read_idx_shape_and_values(tmp_path):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a.idx").write_bytes(idx_bytes(array))
    np.testing.assert_array_equal(datasets.read_idx(tmp_path / "a.idx"), array)


@pytest.mark.parametrize("mangle, message", [
    (lambda raw: raw[:-1], "truncated or corrupt"),
    (lambda raw: raw + b"\0", "truncated or corrupt"),
    (lambda raw: b"\x01" + raw[1:], "bad magic number"),
    (lambda raw: raw[:2] + b"\x0d" + raw[3:], "IDX type 0x0d"),
    (lambda raw: raw[:6], "truncated inside its IDX header"),
    (lambda raw: gzip.compress(raw)[:-8], "not a readable gzip file"),
    (lambda raw: reserved_block(gzip.compress(raw), 10),  # gzip's header: 10 bytes, no name
     r"not a readable gzip file \(zlib.error: Error -3 while decompressing data: invalid block type\)"),
])
def test_read_idx_rejects_malformed(tmp_path, mangle, message):
    path = tmp_path / "bad"
    path.write_bytes(mangle(idx_bytes(np.zeros((3, 2, 2), dtype=np.uint8))))
    with pytest.raises(datasets.DataError, match=message) as caught:
        datasets.read_idx(path)
    assert str(path) in str(caught.value)


def test_a_fault_of_no_gzip_stream_is_no_damaged_file(tmp_path, monkeypatch):
    """What a damaged gzip stream raises is a DataError of one line; another error (a fault of the code, here a
    ValueError or a RuntimeError of the decompressor) is raised as it is, not called a damaged file."""
    path = tmp_path / "images.gz"
    path.write_bytes(gzip.compress(b"\0\0\x08\x01\0\0\0\x01\x07"))
    assert datasets.read_idx(path).tolist() == [7]
    for fault in (ValueError, RuntimeError):
        monkeypatch.setattr(gzip, "decompress", lambda raw, fault=fault: (_ for _ in ()).throw(fault("a fault")))
        with pytest.raises(fault, match="^a fault$"):
            datasets.read_idx(path)


def test_missing_idx_file_is_named(tmp_path):
    write_idx(tmp_path, small_mnist())
    (tmp_path / datasets.MNIST_FILES["y_test"]).unlink()
    with pytest.raises(datasets.DataError, match="t10k-labels-idx1-ubyte"):
        datasets.mnist(tmp_path)


@pytest.mark.parametrize("extra, message", [
    ("gz", r"holds both train-images-idx3-ubyte and train-images-idx3-ubyte\.gz, which differ: keep one$"),
    ("npz", r"holds the four MNIST IDX files and mnist\.npz: keep one or the other, or give the \.npz's own path$"),
    ("partial+npz", r"lacks MNIST file\(s\) t10k-labels-idx1-ubyte \(each may end in \.gz\)$"),
    ("two npz", r"holds neither the four MNIST IDX files \(.*\) nor one \.npz \(it holds 2: keep one\)$"),
])
def test_a_folder_of_two_readings_or_a_part_of_one_is_refused_saying_which(tmp_path, extra, message):
    """Two copies of one IDX file (which differ: the raw one was read before), the IDX files beside an .npz, or
    some IDX files beside an .npz: refused in one line, rather than one of them read without a word."""
    arrays = small_mnist()
    if extra != "two npz":
        write_idx(tmp_path, arrays)
    if extra == "gz":
        stem = datasets.MNIST_FILES["x_train"]
        (tmp_path / f"{stem}.gz").write_bytes(gzip.compress(idx_bytes(arrays["x_train"][:, :2, :2])))
    if extra == "partial+npz":
        (tmp_path / datasets.MNIST_FILES["y_test"]).unlink()
    for name in {"npz": ["mnist"], "partial+npz": ["mnist"], "two npz": ["a", "b"]}.get(extra, []):
        np.savez(tmp_path / f"{name}.npz", **arrays)
    with pytest.raises(datasets.DataError, match=f"^{tmp_path} {message}"):
        datasets.mnist(tmp_path)


@pytest.mark.parametrize("make, error, message", [
    (lambda: datasets.adding(tau=1), ValueError, "tau must be an integer >= 2; got 1"),
    (lambda: datasets.adding(samples=0), ValueError, "samples must be an integer >= 1; got 0"),
    (lambda: datasets.teacher_rnn(tau=0), ValueError, "tau must be an integer >= 1; got 0"),
    (lambda: datasets.teacher_rnn(inputs=2.5), TypeError, "inputs must be an integer >= 1; got 2.5"),
    (lambda: datasets.teacher([3, 2], samples=0), ValueError, "samples must be an integer >= 1; got 0"),
    (lambda: datasets.digits(dtype="int32"), ValueError, "dtype must be one of 'float32', 'float64'; got 'int32'"),
    (lambda: datasets.adding(dtype="int8"), ValueError, "dtype must be one of 'float32', 'float64'; got 'int8'"),
    (lambda: datasets.teacher([4, 2.7, 3]), TypeError, "sizes must hold integers (layer widths); got [4, 2.7, 3]"),
    (lambda: datasets.teacher([4, True]), TypeError, "sizes must hold integers (layer widths); got [4, True]"),
    (lambda: datasets.teacher(None), TypeError, "sizes must be a list of layer widths such as [8, 32, 1]; got None"),
    (lambda: datasets.teacher([4, 0]), ValueError, "every width in sizes must be >= 1; got [4, 0]"),
    (lambda: datasets.teacher([3, 2], seed=-1), ValueError, "seed must be an integer >= 0 or None; got -1"),
    (lambda: datasets.adding(seed="a"), TypeError, "seed must be an integer >= 0 or None; got 'a'"),
    (lambda: datasets.teacher_rnn(seed=2.0), TypeError, "seed must be an integer >= 0 or None; got 2.0"),
])
def test_a_dataset_asked_for_with_a_bad_argument_says_which(make, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        make()


@pytest.mark.parametrize("make", [lambda seed: datasets.teacher([3, 4, 2], 8, seed),
                                  lambda seed: datasets.teacher_rnn(samples=8, seed=seed),
                                  lambda seed: datasets.adding(samples=8, seed=seed)])
def test_every_dataset_of_a_seed_is_drawn_afresh_by_none_and_alike_by_a_numpy_integer(make):
    fresh = [make(None).x_train for _ in range(2)]
    assert not np.array_equal(*fresh)
    np.testing.assert_array_equal(make(np.int64(3)).x_train, make(3).x_train)


def test_a_folder_with_each_idx_file_beside_its_gz_as_torchvision_keeps_them_is_read(tmp_path):
    arrays = small_mnist()
    write_idx(tmp_path, arrays)
    write_idx(tmp_path, arrays, gzipped=True)
    check_mnist(datasets.mnist(tmp_path), arrays)


def test_missing_path(tmp_path):
    with pytest.raises(datasets.DataError, match="does not exist"):
        datasets.mnist(tmp_path / "nowhere")


@pytest.mark.parametrize("role, value, message", [
    ("y_train", np.array([0, 1, 2, 3, 4, 5, 10], dtype=np.uint8), "label 10 at index 6; labels must lie in 0..9"),
    ("y_test", np.array([-1, 0, 1]), "label -1 at index 0"),
    ("y_test", np.array([0.0, 1.0, 2.0]), "integer labels"),
    ("y_train", np.zeros(N_TRAIN - 1, dtype=np.uint8), "has 7 samples but .* has 6 labels"),
    ("x_test", np.zeros((N_TEST, SIDE, SIDE + 1), dtype=np.uint8), "train samples have 25 inputs but test samples have 30"),
    ("x_train", np.full((N_TRAIN, SIDE, SIDE), 300, dtype=np.uint16), "pixels must lie in 0..255"),
    ("x_train", np.full((N_TRAIN, SIDE * SIDE), np.nan), "NaN or Inf"),
    ("y_train", np.zeros((N_TRAIN, 2), dtype=np.uint8), "vector of labels"),
    ("x_train", np.zeros((N_TRAIN, 0)), r"samples of no input, shape \(7, 0\)"),
    ("x_test", np.full((N_TEST, SIDE * SIDE), -1e39), "holds 1e\\+39, beyond float32's largest number: scale the inputs"),
])
def test_npz_rejects_bad_arrays(tmp_path, role, value, message):
    arrays = small_mnist()
    arrays[role] = value
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(datasets.DataError, match=message):
        datasets.mnist(tmp_path / "bad.npz")


def test_idx_label_out_of_range_names_the_file(tmp_path):
    arrays = small_mnist()
    arrays["y_train"][3] = 11
    write_idx(tmp_path, arrays, gzipped=True)
    with pytest.raises(datasets.DataError, match=r"train-labels-idx1-ubyte\.gz holds label 11 at index 3"):
        datasets.mnist(tmp_path)


def test_npz_missing_array_and_not_an_npz(tmp_path):
    arrays = small_mnist()
    del arrays["x_test"]
    np.savez(tmp_path / "partial.npz", **arrays)
    with pytest.raises(datasets.DataError, match="lacks array.*x_test"):
        datasets.mnist(tmp_path / "partial.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    with pytest.raises(datasets.DataError, match="not a readable .npz"):
        datasets.mnist(tmp_path / "junk.npz")


def test_a_damaged_compressed_stream_is_refused_as_a_data_error(tmp_path):
    """zlib's own error, where a deflate stream is damaged, is a DataError of one line: of a compressed .npz (as Keras
    ships mnist.npz), and of a gzipped IDX file beside its raw one, which is compared with it."""
    arrays = small_mnist()
    np.savez_compressed(tmp_path / "mnist.npz", **arrays)
    check_mnist(datasets.mnist(tmp_path / "mnist.npz"), arrays)
    spoil_member(tmp_path / "mnist.npz", "x_train.npy", 0, lambda byte: byte | 0b110)
    with pytest.raises(datasets.DataError, match=r"mnist\.npz is not a readable \.npz file \(zlib\.error: Error -3 "
                                                 r"while decompressing data: invalid block type\)$"):
        datasets.mnist(tmp_path / "mnist.npz")
    folder = tmp_path / "idx"
    folder.mkdir()
    write_idx(folder, arrays)
    stem = datasets.MNIST_FILES["x_train"]
    (folder / f"{stem}.gz").write_bytes(reserved_block(gzip.compress((folder / stem).read_bytes()), 10))
    with pytest.raises(datasets.DataError, match=f"holds both {stem} and {stem}.gz, which differ: keep one$"):
        datasets.mnist(folder)


def test_digits_split():
    digits = datasets.digits()
    assert digits.x_train.shape == (64, 1437) and digits.x_test.shape == (64, 360)
    assert digits.y_train.shape == (10, 1437) and digits.classes == 10
    assert 0.0 <= digits.x_train.min() and digits.x_train.max() == 1.0
    # Stratified: each class's share of the test split is within one sample of its share overall.
    train, test = digits.y_train.sum(axis=1), digits.y_test.sum(axis=1)
    assert np.all(np.abs(test - (train + test) * 0.2) <= 1)
    np.testing.assert_array_equal(datasets.digits().x_test, digits.x_test)  # the split's seed is fixed


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_digits_are_scikit_learns_under_its_split(dtype):
    """Read from scikit-learn's file without importing it, the digits are what ``load_digits`` gives,
    split as ``train_test_split(test_size=0.2, stratify, random_state=0)`` splits them, in its order."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x_train, x_test, labels_train, labels_test = train_test_split(
        bunch.data / 16.0, bunch.target, test_size=0.2, stratify=bunch.target, random_state=0)
    digits = datasets.digits(dtype)
    for x, labels, got_x, got_y in ((x_train, labels_train, digits.x_train, digits.y_train),
                                    (x_test, labels_test, digits.x_test, digits.y_test)):
        assert got_x.dtype == dtype and got_x.tobytes() == np.ascontiguousarray(x.T, dtype=dtype).tobytes()
        np.testing.assert_array_equal(got_y, np.eye(10, dtype=dtype)[:, labels])


def test_digits_without_scikit_learn_or_its_file(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(datasets.DataError, match="pip install scikit-learn"):
        datasets.digits()
    monkeypatch.setitem(sys.modules, "sklearn", types.SimpleNamespace(
        __spec__=types.SimpleNamespace(submodule_search_locations=[str(tmp_path)])))  # no datasets/data in it
    with pytest.raises(datasets.DataError, match="reinstall scikit-learn"):
        datasets.digits()


def test_teacher_shapes_and_determinism():
    task = datasets.teacher([9, 13, 13, 5], samples=41)
    assert task.x_train.shape == (9, 41) and task.y_train.shape == (5, 41)
    assert task.x_test.shape == (9, 10) and task.y_test.shape == (5, 10) and task.classes is None
    again = datasets.teacher([9, 13, 13, 5], samples=41)
    np.testing.assert_array_equal(task.y_train, again.y_train)
    assert np.isfinite(task.y_train).all() and task.y_train.std() > 0.1  # targets carry signal
    assert not np.array_equal(datasets.teacher([9, 13, 13, 5], samples=41, seed=2).y_train, task.y_train)


def test_a_teachers_targets_are_the_same_bits_whatever_blas_threads_run():
    """A run and the run that resumes it may see other BLAS threads (another process, another machine's
    default): they must train on the same targets. The sizes are those where OpenBLAS splits a product."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    targets = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            targets.append(datasets.teacher([16, 32, 32, 32, 4], 20000).y_train)
    assert targets[0].tobytes() == targets[1].tobytes()


def test_digits_rows_are_the_images_rows():
    task = datasets.digits_by_rows()
    assert task.x_train.shape == (8, 8, 1437) and task.y_train.shape == (10, 1437)
    images = datasets.digits().x_train.reshape(8, 8, -1)
    assert np.array_equal(task.x_train[3, :, 5], images[3, :, 5])  # time step 4 = pixel row 3 of image 5
    assert str(task) == "digits-by-rows: 1437 train, 360 test 8-step sequences"
    pixels = datasets.digits_by_pixels()
    assert pixels.x_train.shape == (64, 1, 1437) and np.array_equal(pixels.x_train[19, 0], images[2, 3])


def test_the_adding_problem_sums_the_two_marked_values():
    task = datasets.adding(tau=10, samples=40)
    assert task.x_train.shape == (10, 2, 40) and task.y_train.shape == (1, 40) and task.x_test.shape == (10, 2, 10)
    markers = task.x_train[:, 1]
    assert np.array_equal(markers.sum(axis=0), np.full(40, 2.0))
    assert np.array_equal(markers[:5].sum(axis=0), np.ones(40))  # one in each half
    want = [task.x_train[np.flatnonzero(markers[:, i]), 0, i].sum() for i in range(40)]
    np.testing.assert_allclose(task.y_train[0], want, rtol=1e-6)
    assert str(task) == "adding: 40 train, 10 test 10-step sequences" and task.classes is None


def test_the_adding_problem_marks_two_steps_and_scores_a_sixth_at_chance():
    task = datasets.adding(tau=12, samples=20000, seed=3)
    markers, values = task.x_train[:, 1], task.x_train[:, 0]
    assert set(np.unique(markers)) == {0.0, 1.0} and np.all(markers.sum(axis=0) == 2)
    assert np.all(markers[:6].sum(axis=0) == 1) and np.all(markers[6:].sum(axis=0) == 1)
    np.testing.assert_allclose(task.y_train[0], (values * markers).sum(axis=0), rtol=1e-6)
    assert 0 <= values.min() and values.max() < 1
    chance = float(np.mean((task.y_test - task.y_train.mean()) ** 2))  # the best constant, learnt on the training set
    assert abs(chance - 1 / 6) < 0.01 and abs(task.y_train.mean() - 1) < 0.01, chance


@pytest.mark.parametrize("tau", range(2, 9))
def test_the_adding_problem_marks_one_step_in_each_half_anywhere_in_it(tau):
    """docs/rnn.md: one marker in each half, the first in steps 0 .. tau//2 - 1, the second in tau//2 .. tau - 1
    (an odd tau's middle step in the second half), the target the sum of the two marked values; over 3750
    sequences every step of each half is marked at least once (each with a chance of at least 1/4 a sequence):
    a half drawn one step short leaves one of its steps never marked."""
    task = datasets.adding(tau=tau, samples=3000, seed=tau, dtype="float64")
    x = np.concatenate([task.x_train, task.x_test], axis=2)
    y = np.concatenate([task.y_train, task.y_test], axis=1)
    half, count = tau // 2, x.shape[2]
    marked = {"first": np.zeros(half, int), "second": np.zeros(tau - half, int)}
    for i in range(count):
        steps = [t for t in range(tau) if x[t, 1, i] != 0]
        assert all(x[t, 1, i] == 1 for t in steps) and len(steps) == 2, (i, steps)
        first, second = steps
        assert first < half <= second, (i, steps)
        marked["first"][first] += 1
        marked["second"][second - half] += 1
        assert y[0, i] == pytest.approx(x[first, 0, i] + x[second, 0, i], rel=1e-12), i
    for which, counts in marked.items():
        assert np.all(counts > 0), f"{which} half: steps marked {counts.tolist()} times in {count} sequences"


def test_the_teacher_rnn_is_the_rnn_its_docstring_draws():
    """The targets of ``RNN([3, 16, 5], seed=5)`` (tanh, identity output at every step), its biases scaled by 0.1,
    computed by the float64 reference on the task's inputs."""
    task = datasets.teacher_rnn(3, 5, tau=7, samples=40, seed=4, dtype="float64")
    assert task.x_train.shape == (7, 3, 40) and task.y_train.shape == (7, 5, 40) and task.x_test.shape[-1] == 10
    with RNN([3, 16, 5], "tanh", "quadratic", "every", dtype="float64", seed=5, backend="numpy",
             output_activation="identity") as net:
        weights, recurrent, biases = net.weights, net.recurrent, net.biases
    for x, y in ((task.x_train, task.y_train), (task.x_test, task.y_test)):
        want = rnn_reference.feedforward(weights, recurrent, [0.1 * b for b in biases], x, "tanh", "identity", "every")
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-15)
    assert np.allclose(np.linalg.norm(recurrent[0], 2), 0.9) and task.classes is None
