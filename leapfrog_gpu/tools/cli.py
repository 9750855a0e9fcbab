"""What the command-line tools share: a parser whose errors are one line, and argument types."""

import argparse
import math

from .. import parallel


class Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line on stderr and exit status 2 (argparse's own
    usage block would make it several). Under mpiexec every rank parses the same command line; rank 0
    alone says what is wrong with it (the rank comes from the launcher, before MPI starts)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n" if parallel.launcher_rank() == 0 else None)


def integer(least, name=None):
    """An argument type: one integer >= ``least`` (``name``, if given, starts the error message;
    argparse itself names the option)."""
    subject = "" if name is None else f"{name} "

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(f"{subject}must be an integer >= {least}; got {text!r}")
        return value

    return parse


def integers(least, name="value"):
    """An argument type: a comma-separated list of integers, each >= ``least``."""
    def parse(text):
        try:
            values = [int(part) for part in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name}s must be a comma-separated list of integers; got {text!r}") from None
        if min(values) < least:
            raise argparse.ArgumentTypeError(f"every {name} must be >= {least}; got {text!r}")
        return values

    return parse


def number(least, strict=False, what="a finite number"):
    """An argument type: one finite number >= ``least`` (> ``least`` when ``strict``); ``what`` names it
    in the error message."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < least or (strict and value == least):
            raise argparse.ArgumentTypeError(f"must be {what} {'>' if strict else '>='} {least:g}; got {text!r}")
        return value

    return parse


def reals(least, name="value"):
    """An argument type: a comma-separated list of finite numbers, each >= ``least``."""
    one = number(least)

    def parse(text):
        try:
            return [one(part) for part in text.split(",")]
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"{name}s must be a comma-separated list of numbers >= {least:g}; "
                                             f"got {text!r}") from None

    return parse


def names(registry, what="schedule"):
    """An argument type: a comma-separated list of names, each a key of ``registry``."""
    def parse(text):
        chosen = text.split(",")
        unknown = [name for name in chosen if name not in registry]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {what} {unknown[0]!r}; choose from {', '.join(registry)}")
        return chosen

    return parse
