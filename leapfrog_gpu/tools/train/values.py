"""The values of ``leapfrog-train``'s options that are more than a number or a name: the hidden widths
(``--hidden``), Adam's betas (``--betas``) and the steps to profile (``--profile-steps``). Each raises
``argparse.ArgumentTypeError`` with one line, which the parser turns into exit status 2."""

import argparse

from .profiling import parse_steps


def hidden(text):
    """Hidden widths from ``"128,64,32"``, ``"6x128"`` (6 layers of 128) or a mix such as ``"2x128,64"``. ``AxB``
    means A layers of B only where A <= B; ``"128x4"`` could be either way round and is refused, saying both."""
    widths = []
    for part in text.split(","):
        count, x, width = part.strip().rpartition("x")
        try:
            count, width = int(count) if x else 1, int(width)
        except ValueError:
            widths = None
            break
        if count > width >= 1:
            raise argparse.ArgumentTypeError(
                f"{part.strip()}: {width} layers of {count} or {count} layers of {width}? write --hidden "
                f"{','.join([str(count)] * width)} or --layers {width} --width {count}")
        widths += [width] * count
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"must be widths >= 1 such as 128,64,32, 6x128 (6 layers of 128) or "
                                         f"2x128,64; got {text!r}")
    return widths


def betas(text):
    """Adam's ``B1,B2`` (``--betas``)."""
    try:
        betas = [float(part) for part in text.split(",")]
    except ValueError:
        betas = []
    if len(betas) != 2:
        raise argparse.ArgumentTypeError(f"expected two numbers B1,B2 (e.g. 0.9,0.999); got {text!r}")
    return betas


def profile_steps(text):
    """``--profile-steps``: ``[first, stop)`` of the steps to profile, as ``profiling.parse_steps`` reads them."""
    try:
        steps = parse_steps(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return [steps.start, steps.stop]
