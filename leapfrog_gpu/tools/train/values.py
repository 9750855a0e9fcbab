"""The values of ``leapfrog-train``'s options that are more than a number or a name, ``--hidden`` and
``--profile-steps``, read (a bad one raises ``argparse.ArgumentTypeError``: one line, exit status 2), and options
and values written as a command line gives them (``dashed``, ``written``)."""

import argparse

from ..cli import at_most


def hidden(text):
    """Hidden widths from ``"128,64,32"``, ``"6x128"`` (6 layers of 128) or a mix such as ``"2x128,64"``. ``AxB``
    means A layers of B only where 1 <= A <= B; ``"128x4"`` could be either way round and is refused, saying both."""
    widths, parts = [], [part.strip() for part in text.split(",")]
    for i, part in enumerate(parts):
        count, x, width = part.rpartition("x")
        try:
            count, width = int(count) if x else 1, int(width)
        except ValueError:
            count = width = 0
        if min(count, width) < 1:
            raise argparse.ArgumentTypeError(f"must be widths >= 1 such as 128,64,32, 6x128 (6 layers of 128) or "
                                             f"2x128,64; got {text!r}")
        for value in (count, width):
            at_most(value, text)
        if count > width:
            other = (f"--layers {count} --width {width}" if len(parts) == 1 else
                     f"--hidden {','.join(parts[:i] + [str(width)] * count + parts[i + 1:])}")
            raise argparse.ArgumentTypeError(
                f"{part}: {width} layers of {count} or {count} layers of {width}? write --hidden "
                f"{','.join(parts[:i] + [f'{width}x{count}'] + parts[i + 1:])} or {other}")
        widths += [width] * count
    return widths


def profile_steps(text):
    """``"A:B"``, the steps A..B-1 counted from 0 over the whole run, as ``[A, B]``, 0 <= A < B."""
    first, colon, last = text.partition(":")
    try:
        start, stop = int(first), int(last)
    except ValueError:
        start = stop = None
    if not colon or start is None or not 0 <= start < stop:
        raise argparse.ArgumentTypeError(f"must be A:B with integers 0 <= A < B (steps A..B-1, counted from 0); "
                                         f"got {text!r}")
    return [start, stop]


def dashed(key):
    """The option of the config's ``key``, less its leading dashes: ``batch-size``."""
    return key.replace("_", "-")


def written(value):
    """An option's value as its command line gives it: ``128,64`` for a list."""
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
