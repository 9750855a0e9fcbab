"""Data loaders on small files written here: IDX (raw and gzipped), .npz, and what they reject."""

import gzip
import sys
import types

import numpy as np
import pytest

from leapfrog_gpu.tools.train import data

N_TRAIN, N_TEST, SIDE = 7, 3, 5  # odd, small sizes: 5x5 "images"


def idx_bytes(array):
    """An IDX file of unsigned bytes: two zero bytes, type 0x08, the rank, big-endian dims, the data."""
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
    for role, stem in data.MNIST_FILES.items():
        raw = idx_bytes(arrays[role])
        (directory / (stem + ".gz" if gzipped else stem)).write_bytes(gzip.compress(raw) if gzipped else raw)


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
    check_mnist(data.mnist(tmp_path), arrays)


def test_mnist_npz_as_directory_and_as_file(tmp_path):
    arrays = small_mnist(seed=1)
    np.savez(tmp_path / "mnist.npz", **arrays)
    check_mnist(data.mnist(tmp_path), arrays)
    check_mnist(data.mnist(tmp_path / "mnist.npz"), arrays)


def test_mnist_float64(tmp_path):
    arrays = small_mnist()
    write_idx(tmp_path, arrays)
    assert data.mnist(tmp_path, dtype="float64").x_train.dtype == np.float64


def test_read_idx_shape_and_values(tmp_path):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a.idx").write_bytes(idx_bytes(array))
    np.testing.assert_array_equal(data.read_idx(tmp_path / "a.idx"), array)


@pytest.mark.parametrize("mangle, message", [
    (lambda raw: raw[:-1], "truncated or corrupt"),
    (lambda raw: raw + b"\0", "truncated or corrupt"),
    (lambda raw: b"\x01" + raw[1:], "bad magic number"),
    (lambda raw: raw[:2] + b"\x0d" + raw[3:], "IDX type 0x0d"),
    (lambda raw: raw[:6], "truncated inside its IDX header"),
    (lambda raw: gzip.compress(raw)[:-8], "not a readable gzip file"),
])
def test_read_idx_rejects_malformed(tmp_path, mangle, message):
    path = tmp_path / "bad"
    path.write_bytes(mangle(idx_bytes(np.zeros((3, 2, 2), dtype=np.uint8))))
    with pytest.raises(data.DataError, match=message) as caught:
        data.read_idx(path)
    assert str(path) in str(caught.value)


def test_missing_idx_file_is_named(tmp_path):
    write_idx(tmp_path, small_mnist())
    (tmp_path / data.MNIST_FILES["y_test"]).unlink()
    with pytest.raises(data.DataError, match="t10k-labels-idx1-ubyte"):
        data.mnist(tmp_path)


def test_missing_path(tmp_path):
    with pytest.raises(data.DataError, match="does not exist"):
        data.mnist(tmp_path / "nowhere")


@pytest.mark.parametrize("role, value, message", [
    ("y_train", np.array([0, 1, 2, 3, 4, 5, 10], dtype=np.uint8), "label 10 at index 6; labels must lie in 0..9"),
    ("y_test", np.array([-1, 0, 1]), "label -1 at index 0"),
    ("y_test", np.array([0.0, 1.0, 2.0]), "integer labels"),
    ("y_train", np.zeros(N_TRAIN - 1, dtype=np.uint8), "has 7 samples but .* has 6 labels"),
    ("x_test", np.zeros((N_TEST, SIDE, SIDE + 1), dtype=np.uint8), "train samples have 25 inputs but test samples have 30"),
    ("x_train", np.full((N_TRAIN, SIDE, SIDE), 300, dtype=np.uint16), "pixels must lie in 0..255"),
    ("x_train", np.full((N_TRAIN, SIDE * SIDE), np.nan), "NaN or Inf"),
    ("y_train", np.zeros((N_TRAIN, 2), dtype=np.uint8), "vector of labels"),
])
def test_npz_rejects_bad_arrays(tmp_path, role, value, message):
    arrays = small_mnist()
    arrays[role] = value
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(data.DataError, match=message):
        data.mnist(tmp_path / "bad.npz")


def test_idx_label_out_of_range_names_the_file(tmp_path):
    arrays = small_mnist()
    arrays["y_train"][3] = 11
    write_idx(tmp_path, arrays, gzipped=True)
    with pytest.raises(data.DataError, match=r"train-labels-idx1-ubyte\.gz holds label 11 at index 3"):
        data.mnist(tmp_path)


def test_npz_missing_array_and_not_an_npz(tmp_path):
    arrays = small_mnist()
    del arrays["x_test"]
    np.savez(tmp_path / "partial.npz", **arrays)
    with pytest.raises(data.DataError, match="lacks array.*x_test"):
        data.mnist(tmp_path / "partial.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    with pytest.raises(data.DataError, match="not a readable .npz"):
        data.mnist(tmp_path / "junk.npz")


def test_digits_split():
    digits = data.digits()
    assert digits.x_train.shape == (64, 1437) and digits.x_test.shape == (64, 360)
    assert digits.y_train.shape == (10, 1437) and digits.classes == 10
    assert 0.0 <= digits.x_train.min() and digits.x_train.max() == 1.0
    # Stratified: each class's share of the test split is within one sample of its share overall.
    train, test = digits.y_train.sum(axis=1), digits.y_test.sum(axis=1)
    assert np.all(np.abs(test - (train + test) * 0.2) <= 1)
    np.testing.assert_array_equal(data.digits().x_test, digits.x_test)  # the split's seed is fixed


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_digits_are_scikit_learns_under_its_split(dtype):
    """Read from scikit-learn's file without importing it, the digits are what ``load_digits`` gives,
    split as ``train_test_split(test_size=0.2, stratify, random_state=0)`` splits them, in its order."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x_train, x_test, labels_train, labels_test = train_test_split(
        bunch.data / 16.0, bunch.target, test_size=0.2, stratify=bunch.target, random_state=0)
    digits = data.digits(dtype)
    for x, labels, got_x, got_y in ((x_train, labels_train, digits.x_train, digits.y_train),
                                    (x_test, labels_test, digits.x_test, digits.y_test)):
        assert got_x.dtype == dtype and got_x.tobytes() == np.ascontiguousarray(x.T, dtype=dtype).tobytes()
        np.testing.assert_array_equal(got_y, np.eye(10, dtype=dtype)[:, labels])


def test_digits_without_scikit_learn_or_its_file(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(data.DataError, match="pip install scikit-learn"):
        data.digits()
    monkeypatch.setitem(sys.modules, "sklearn", types.SimpleNamespace(
        __spec__=types.SimpleNamespace(submodule_search_locations=[str(tmp_path)])))  # no datasets/data in it
    with pytest.raises(data.DataError, match="reinstall scikit-learn"):
        data.digits()


def test_teacher_shapes_and_determinism():
    task = data.teacher([9, 13, 13, 5], samples=41)
    assert task.x_train.shape == (9, 41) and task.y_train.shape == (5, 41)
    assert task.x_test.shape == (9, 10) and task.y_test.shape == (5, 10) and task.classes is None
    again = data.teacher([9, 13, 13, 5], samples=41)
    np.testing.assert_array_equal(task.y_train, again.y_train)
    assert np.isfinite(task.y_train).all() and task.y_train.std() > 0.1  # targets carry signal
    assert not np.array_equal(data.teacher([9, 13, 13, 5], samples=41, seed=2).y_train, task.y_train)


def test_a_teachers_targets_are_the_same_bits_whatever_blas_threads_run():
    """A run and the run that resumes it may see other BLAS threads (another process, another machine's
    default): they must train on the same targets. The sizes are those where OpenBLAS splits a product."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    targets = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            targets.append(data.teacher([16, 32, 32, 32, 4], 20000).y_train)
    assert targets[0].tobytes() == targets[1].tobytes()
