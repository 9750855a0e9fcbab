"""Datasets to train on, as the networks take them: the samples are the last axis.

``digits``            scikit-learn's 8x8 digits, (64, N) pixels in [0, 1], one-hot targets (10, N).
``mnist``             MNIST from local files (IDX or one .npz), (784, N), one-hot targets (10, N).
``teacher``           a regression on a random deep teacher network: x ~ N(0, 1), y = T(x).
``digits_by_rows``    the digits as sequences, one row per time step: x (8, 8, N), the class at the last step.
``digits_by_pixels``  the digits one pixel per time step, row by row: x (64, 1, N), the class at the last step; a
                      constant output scores 10 % (ten classes about equally frequent), the trivial baseline.
``teacher_rnn``       a regression on a random teacher RNN (tanh recurrent layer, identity output, u of spectral
                      norm 0.9): x ~ N(0, 1) (tau, n_1, N), a target at every step (tau, n_L, N).
``adding``            the adding problem (Hochreiter and Schmidhuber, 1997): two inputs per step, a value U(0, 1)
                      and a marker set at two steps, one in each half; the target, at the last step, the sum of
                      the two marked values, (1, N). The mean, 1, scores an MSE of 1/6.

Each returns a ``Dataset`` of training and test data in one dtype: ``x`` (n_1, N) and ``y`` (n_L, N), or for
sequences ``x`` (tau, n_1, N) and ``y`` (n_L, N) or (tau, n_L, N). ``leapfrog-train`` trains on them
(``--data``); ``Network.fit`` takes them as they are. A missing, malformed or inconsistent file raises
``DataError`` (a ``ValueError``) naming the file.
"""

import dataclasses
import functools
import gzip
import importlib.util
import math
import zipfile
from pathlib import Path

import numpy as np
import threadpoolctl

from . import reference
from .core.checks import check_count, check_dtype, check_sizes
from .core.files import DAMAGED, GZIP_DAMAGED, named
from .core.parameters import digest, generator

MNIST_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
"""The four MNIST IDX files by role; each may also end in ``.gz``."""

MNIST_CLASSES = 10

DIGITS_SPLIT = Path(__file__).with_name("digits_split.npz")
"""The digits' split: arrays ``train`` and ``test`` of sample indices, each in its split's order."""


class DataError(ValueError):
    """A data file is missing, malformed, or disagrees with the others."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Inputs ``x`` (n_1, N) and targets ``y`` (n_L, N) for training and test, in one dtype; for sequences
    ``x`` is (tau, n_1, N) and ``y`` (n_L, N), a target at the last step, or (tau, n_L, N), one at every step.
    The samples are the last axis.

    ``classes`` is the number of classes (targets one-hot), or ``None`` for regression.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int | None

    @functools.cached_property
    def digest(self):
        """The SHA-256 of the data (each array's dtype, shape and bytes), in hex: what a checkpoint keeps so that a
        run resumes on the data it was trained on, and what the ranks of a data-parallel run compare."""
        return digest((self.x_train, self.y_train, self.x_test, self.y_test))

    @property
    def inputs(self):
        return self.x_train.shape[-2]

    @property
    def outputs(self):
        return self.y_train.shape[-2]

    def __str__(self):
        train, test = self.x_train.shape[-1], self.x_test.shape[-1]
        if self.x_train.ndim == 3:
            return f"{self.name}: {train} train, {test} test {self.x_train.shape[0]}-step sequences"
        return f"{self.name}: {train} train, {test} test samples"


def digits(dtype="float32"):
    """scikit-learn's bundled 8x8 digits (1797 samples): a stratified 80/20 split with a fixed seed,
    pixels scaled from 0..16 to [0, 1].

    The samples are read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``)
    without importing scikit-learn, which takes seconds; the split is the one of
    ``train_test_split(test_size=0.2, stratify=labels, random_state=0)``, kept in ``DIGITS_SPLIT``
    (tests/core/test_datasets.py checks both against scikit-learn).
    """
    dtype = check_dtype(dtype)
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is None:
        raise DataError("the digits come with scikit-learn, which is not installed: pip install scikit-learn")
    path = Path(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
    if not path.is_file():
        raise DataError(f"the digits are not where scikit-learn keeps them, {path}: reinstall scikit-learn")
    with gzip.open(path, "rt") as file:
        table = np.loadtxt(file, delimiter=",")  # one row per sample: 64 pixels, then the label
    with np.load(DIGITS_SPLIT) as split:
        train, test = split["train"], split["test"]
    x, labels = table[:, :-1] / 16.0, table[:, -1].astype(int)
    return classification("digits", x[train], labels[train], x[test], labels[test], 10, dtype)


def mnist(path, dtype="float32"):
    """MNIST from local files: a directory with the four IDX files (``MNIST_FILES``, gzipped or not),
    or one ``.npz`` holding ``x_train, y_train, x_test, y_test`` (a directory with exactly one, or its
    path). Integer pixels are scaled from 0..255 to [0, 1]; float pixels are taken as they are."""
    dtype, path = check_dtype(dtype), Path(path)
    if path.is_file() and path.name.endswith(".npz"):  # ".npz" itself too, which has no suffix
        return _mnist_npz(path, dtype)
    if not path.exists():
        raise DataError(f"MNIST path {path} does not exist")
    if not path.is_dir():
        raise DataError(f"MNIST path {path} is neither a directory nor a .npz file")
    found = {role: _find_idx(path, stem) for role, stem in MNIST_FILES.items()}
    missing = [MNIST_FILES[role] for role, file in found.items() if file is None]
    archives = sorted(path.glob("*.npz"))
    if not missing and archives:
        raise DataError(f"{path} holds the four MNIST IDX files and {archives[0].name}: keep one or the other, or "
                        "give the .npz's own path")
    if not missing:
        arrays = {role: read_idx(file) for role, file in found.items()}
        return _mnist_arrays(arrays, {role: file.name for role, file in found.items()}, dtype)
    if len(missing) == len(MNIST_FILES) and len(archives) == 1:
        return _mnist_npz(archives[0], dtype)
    if len(missing) < len(MNIST_FILES):
        raise DataError(f"{path} lacks MNIST file(s) {', '.join(missing)} (each may end in .gz)")
    raise DataError(f"{path} holds neither the four MNIST IDX files ({', '.join(MNIST_FILES.values())}, each may "
                    f"end in .gz) nor one .npz" + (f" (it holds {len(archives)}: keep one)" if archives else ""))


def teacher(sizes, samples=4096, seed=1, dtype="float32"):
    """A regression: targets ``y = T(x)`` from a random teacher network ``T`` of widths ``sizes``
    (tanh hidden layers, identity output, w ~ N(0, 1/n_{l-1}), b ~ N(0, 0.1^2)), inputs x ~ N(0, 1).

    ``samples`` training samples plus a quarter as many (at least one) test samples. The teacher may
    have any width and depth; the student usually takes its ``sizes``.
    """
    sizes, samples = check_sizes(sizes, example="[8, 32, 1]"), check_count("samples", samples)
    dtype = check_dtype(dtype)
    test = max(1, samples // 4)
    rng = generator(seed)
    x = rng.standard_normal((sizes[0], samples + test)).astype(dtype)
    weights = [(rng.standard_normal((n, m)) / math.sqrt(m)).astype(dtype) for m, n in zip(sizes, sizes[1:])]
    biases = [(0.1 * rng.standard_normal(n)).astype(dtype) for n in sizes[1:]]
    with same_bits():
        y = reference.feedforward(weights, biases, x, activation="tanh", output_activation="identity")
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y, dtype=dtype)
    return Dataset("teacher", x[:, :samples].copy(), y[:, :samples].copy(),
                   x[:, samples:].copy(), y[:, samples:].copy(), None)


def same_bits():
    """A context in which NumPy's products give the same bits whatever BLAS threads the process runs: one
    thread, for the targets of a teacher, which a run and the run that resumes it must compute alike."""
    return threadpoolctl.threadpool_limits(1, user_api="blas")


def digits_by_rows(dtype="float32"):
    """The digits as sequences, pixel row r of an image at time step r + 1: x (8, 8, N)."""
    d = digits(dtype)
    rows = lambda x: np.ascontiguousarray(x.reshape(8, 8, -1))  # noqa: E731  (64, N), row-major, as (8, 8, N)
    return Dataset("digits-by-rows", rows(d.x_train), d.y_train, rows(d.x_test), d.y_test, d.classes)


def digits_by_pixels(dtype="float32"):
    """The digits as sequences, pixel p of an image (row-major) at time step p + 1: x (64, 1, N)."""
    d = digits(dtype)
    pixels = lambda x: np.ascontiguousarray(x.reshape(64, 1, -1))  # noqa: E731
    return Dataset("digits-by-pixels", pixels(d.x_train), d.y_train, pixels(d.x_test), d.y_test, d.classes)


def adding(tau=16, samples=2048, seed=1, dtype="float32"):
    """The adding problem over ``tau`` >= 2 steps: ``samples`` training sequences plus a quarter as many (at least
    one) test ones, x (tau, 2, N) and y (1, N)."""
    tau, samples, dtype = check_count("tau", tau, 2), check_count("samples", samples), check_dtype(dtype)
    count = samples + max(1, samples // 4)
    rng = generator(seed)
    x = np.zeros((tau, 2, count))
    x[:, 0] = rng.random((tau, count))
    columns = np.arange(count)
    for low, high in ((0, tau // 2), (tau // 2, tau)):
        x[rng.integers(low, high, count), 1, columns] = 1
    y = np.sum(x[:, 0] * x[:, 1], axis=0)[None]
    return _split("adding", x.astype(dtype), y.astype(dtype), samples)


TEACHER_HIDDEN = 16
"""The width of the teacher RNN's recurrent layer."""


def teacher_rnn(inputs=4, outputs=2, tau=16, samples=2048, seed=1, dtype="float32"):
    """Targets at every step from a random teacher RNN [inputs, ``TEACHER_HIDDEN``, outputs], drawn from ``seed``
    + 1 as ``RNN(sizes, seed=seed + 1)`` draws an Elman network (w ~ N(0, 1/n_{l-1}) and b ~ N(0, 1), here scaled
    by 0.1, layer by layer; then u ~ N(0, 1/n) scaled to spectral norm 0.9), a tanh recurrent layer and an identity
    output: ``samples`` training sequences of ``tau`` steps plus a quarter as many (at least one) test ones."""
    inputs, outputs, tau = check_count("inputs", inputs), check_count("outputs", outputs), check_count("tau", tau)
    samples, dtype = check_count("samples", samples), check_dtype(dtype)
    count = samples + max(1, samples // 4)
    x = generator(seed).standard_normal((tau, inputs, count))
    draw = generator(None if seed is None else seed + 1)
    (w2, b2), (w3, b3) = [(draw.standard_normal((n, m)) / math.sqrt(m), 0.1 * draw.standard_normal(n))
                          for m, n in ((inputs, TEACHER_HIDDEN), (TEACHER_HIDDEN, outputs))]
    u = draw.standard_normal((TEACHER_HIDDEN, TEACHER_HIDDEN)) / math.sqrt(TEACHER_HIDDEN)
    u = u * 0.9 / max(np.linalg.norm(u, 2), np.finfo(np.float64).tiny)
    a, y = np.zeros((TEACHER_HIDDEN, count)), np.empty((tau, outputs, count))
    with same_bits():
        for t in range(tau):
            a = np.tanh(w2 @ x[t] + u @ a + b2[:, None])
            y[t] = w3 @ a + b3[:, None]
    return _split("teacher-rnn", x.astype(dtype), y.astype(dtype), samples)


def _split(name, x, y, samples):
    """The ``Dataset`` of a regression: its first ``samples`` samples to train on, the rest to test."""
    return Dataset(name, x[..., :samples].copy(), y[..., :samples].copy(), x[..., samples:].copy(),
                   y[..., samples:].copy(), None)


def classification(name, x_train, labels_train, x_test, labels_test, classes, dtype="float32", files=None):
    """A ``Dataset`` from inputs as rows (N, ...) and integer labels (N,) in ``0..classes-1``.

    ``files`` maps ``x_train``, ``y_train``, ``x_test``, ``y_test`` to the names errors should show.
    """
    files = files or {}
    parts = {}
    for split, x, labels in (("train", x_train, labels_train), ("test", x_test, labels_test)):
        x, labels = np.asarray(x), np.asarray(labels)
        x_file, y_file = files.get(f"x_{split}", f"x_{split}"), files.get(f"y_{split}", f"y_{split}")
        if x.ndim < 2:
            raise DataError(f"{name}: {x_file} must have one row per sample; got shape {x.shape}")
        if labels.ndim != 1:
            raise DataError(f"{name}: {y_file} must be a vector of labels; got shape {labels.shape}")
        if x.shape[0] != labels.shape[0]:
            raise DataError(f"{name}: {x_file} has {x.shape[0]} samples but {y_file} has {labels.shape[0]} labels")
        if x.shape[0] == 0:
            raise DataError(f"{name}: {x_file} holds no samples")
        if labels.dtype.kind not in "iu":
            raise DataError(f"{name}: {y_file} must hold integer labels; got dtype {labels.dtype}")
        bad = (labels < 0) | (labels >= classes)
        if bad.any():
            raise DataError(
                f"{name}: {y_file} holds label {labels[bad][0]} at index {int(np.argmax(bad))}; "
                f"labels must lie in 0..{classes - 1}"
            )
        if x.dtype.kind not in "fiu":
            raise DataError(f"{name}: {x_file} must hold numbers; got dtype {x.dtype}")
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            raise DataError(f"{name}: {x_file} contains NaN or Inf")
        if x[0].size == 0:
            raise DataError(f"{name}: {x_file} holds samples of no input, shape {x.shape}: each needs one at least")
        largest = max(float(x.max()), -float(x.min())) if x.dtype.kind == "f" else 0.0  # an int is below 1e19
        if largest > float(np.finfo(dtype).max):
            raise DataError(f"{name}: {x_file} holds {largest:.4g}, beyond {np.dtype(dtype)}'s largest number: scale "
                            "the inputs, or train in float64")
        x = x.reshape(x.shape[0], -1)
        parts[split] = (np.ascontiguousarray(x.T, dtype=dtype), np.eye(classes, dtype=dtype)[:, labels])
    (x_train, y_train), (x_test, y_test) = parts["train"], parts["test"]
    if x_train.shape[0] != x_test.shape[0]:
        raise DataError(
            f"{name}: train samples have {x_train.shape[0]} inputs but test samples have {x_test.shape[0]}"
        )
    return Dataset(name, x_train, y_train, x_test, y_test, classes)


def read_idx(path):
    """An IDX file of unsigned bytes (the MNIST format), gzipped or not, as an array of its shape."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise DataError(f"cannot read {path}: {error.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except GZIP_DAMAGED as error:
            raise DataError(f"{path} is not a readable gzip file ({named(error)}: {error})") from None
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[3] == 0:
        raise DataError(f"{path} is not an IDX file (bad magic number)")
    if raw[2] != 0x08:
        raise DataError(f"{path} holds IDX type 0x{raw[2]:02x}; only unsigned bytes (0x08, as in MNIST) are read")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path} is truncated inside its IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    if len(raw) - header != math.prod(shape):
        raise DataError(
            f"{path}: its header says shape {shape} ({math.prod(shape)} bytes of data) "
            f"but it holds {len(raw) - header} bytes (truncated or corrupt)"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def mnist_reads(name):
    """Whether ``mnist`` reads a file called ``name`` in the folder it is given: an IDX file's (gzipped or not), or
    any .npz."""
    return name.endswith(".npz") or name.removesuffix(".gz") in MNIST_FILES.values()


def _find_idx(directory, stem):
    """``directory``'s IDX file ``stem``, gzipped or not, or None; both (as torchvision keeps them) where they hold
    the same bytes, else a DataError."""
    found = [directory / name for name in (stem, stem + ".gz") if (directory / name).is_file()]
    if len(found) > 1 and _bytes(found[1]) != found[0].read_bytes():
        raise DataError(f"{directory} holds both {stem} and {stem}.gz, which differ: keep one")
    return found[0] if found else None


def _bytes(gzipped):
    """The bytes ``gzipped`` holds, b"" for a file that is no gzip stream (read_idx says what is wrong with it)."""
    try:
        return gzip.decompress(gzipped.read_bytes())
    except GZIP_DAMAGED:
        return b""


def _mnist_npz(path, dtype):
    if not zipfile.is_zipfile(path):  # np.load would take it for a pickle, and say how to load one unsafely
        raise DataError(f"{path} is not a readable .npz file (not a zip archive; damaged?): replace it, or give "
                        "--data-dir the four MNIST IDX files")
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [role for role in MNIST_FILES if role not in archive.files]
            if missing:
                raise DataError(f"{path} lacks array(s) {', '.join(missing)}; it has {', '.join(archive.files)}")
            arrays = {role: archive[role] for role in MNIST_FILES}
    except DAMAGED as error:  # zlib's and lzma's too, for a damaged compressed member
        if isinstance(error, DataError):
            raise
        raise DataError(f"{path} is not a readable .npz file ({named(error)}: "
                        f"{str(error).strip().splitlines()[0]})") from None
    return _mnist_arrays(arrays, {role: f"{path.name}[{role}]" for role in MNIST_FILES}, dtype)


def _mnist_arrays(arrays, names, dtype):
    for role in ("x_train", "x_test"):
        x = arrays[role]
        if x.dtype.kind in "iu":
            if x.size and (x.min() < 0 or x.max() > 255):
                raise DataError(f"{names[role]}: integer pixels must lie in 0..255")
            arrays[role] = x.astype(dtype)
            arrays[role] /= 255
    return classification("mnist", arrays["x_train"], arrays["y_train"], arrays["x_test"], arrays["y_test"],
                          MNIST_CLASSES, dtype, names)
