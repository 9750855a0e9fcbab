"""What the command-line tools share: a parser whose errors are one line, argument types, and files
written whole or not at all."""

import argparse
import contextlib
import os
import tempfile


class Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line on stderr and exit status 2 (argparse's own
    usage block would make it several)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


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


def names(registry, what="schedule"):
    """An argument type: a comma-separated list of names, each a key of ``registry``."""
    def parse(text):
        chosen = text.split(",")
        unknown = [name for name in chosen if name not in registry]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {what} {unknown[0]!r}; choose from {', '.join(registry)}")
        return chosen

    return parse


@contextlib.contextmanager
def replaced_atomically(path):
    """A temporary file name beside ``path``: write it in the block; it then replaces ``path`` (with
    the permissions ``open`` would have given), or is removed if the block raises. A reader, or a run
    killed half-way, finds the old file or the new one, never half of one."""
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(dir=folder, delete=False, suffix=".tmp") as tmp:
        pass
    try:
        yield tmp.name
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp.name, 0o666 & ~umask)  # not the temporary file's 0600
        os.replace(tmp.name, path)
    finally:
        if os.path.exists(tmp.name):
            os.remove(tmp.name)
