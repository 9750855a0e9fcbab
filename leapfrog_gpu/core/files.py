"""Files written whole or not at all (``replaced_atomically``: a network's file, a checkpoint, a timeline's chart, a
bench's results), what a regular file is (``regular``: one that can be replaced, emptied or cut; ``cuttable``: one
open that may be), the file of stdout or stderr written beside it (``shared``), and what reading a damaged archive
raises (``DAMAGED``; a gzip stream, ``GZIP_DAMAGED``)."""

import contextlib
import errno
import lzma
import os
import secrets
import stat
import sys
import zipfile
import zlib

GZIP_DAMAGED = (OSError, EOFError, zlib.error)
"""What ``gzip.decompress`` of a damaged gzip stream raises: gzip's own errors and zlib's (deflate)."""
DAMAGED = (*GZIP_DAMAGED, ValueError, RuntimeError, zipfile.BadZipFile, lzma.LZMAError)
"""What reading a damaged zip archive may raise: zipfile's own errors (its RuntimeError for an entry marked encrypted,
its NotImplementedError for an unknown method) and those of the compressed stream inside, zlib's (deflate, as in
``GZIP_DAMAGED``) and lzma's (bzip2's is an OSError)."""


def named(error):
    """The name of ``error``'s type as a message says it: zlib's ``error`` as ``zlib.error``."""
    name = type(error).__name__
    return f"{type(error).__module__}.{name}" if name == "error" else name


@contextlib.contextmanager
def replaced_atomically(path, prefix="tmp"):
    """A temporary file name beside ``path`` (``prefix``, random letters, ``.tmp``): write it in the
    block; it then replaces ``path``, with the permissions ``open`` would have given (those of the file it replaces,
    or those the umask leaves of rw-rw-rw-), or is removed if the block raises. The file and the rename are synced to
    disk, so a reader, a run killed half-way or a machine that loses power finds the old file or the new one, never
    half of one. A symbolic link's target is written, the link kept (a link to no file too); a ``path`` that is no
    file (``/dev/stdout``, a pipe) is written as it is. A file this process may not write is refused with the
    PermissionError ``open`` raises, before anything is written; the folder must let a file be made in it."""
    if os.path.exists(path) and not regular(path):
        yield os.fspath(path)
        return
    path = os.path.realpath(path)
    if os.path.exists(path) and not os.access(path, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    folder = os.path.dirname(path)
    mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else None
    tmp = _created(folder, prefix)
    try:
        yield tmp
        _fsync(tmp)  # first: the mode may be one that no read may open (write-only)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
        _fsync(folder)  # the rename itself
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _created(folder, prefix):
    """The name of a new empty file in ``folder`` (``prefix``, random letters, ``.tmp``), made with the permissions
    that the umask leaves of rw-rw-rw-, as ``open`` makes a file (``tempfile`` makes them rw-------)."""
    while True:
        name = os.path.join(folder, f"{prefix}{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return name


def regular(file):
    """Whether ``file``, a path or an open file, is a regular file: one that can be replaced, emptied or cut, where a
    pipe or a device cannot."""
    return stat.S_ISREG((os.fstat(file.fileno()) if hasattr(file, "fileno") else os.stat(file)).st_mode)


def cuttable(file):
    """Whether an open ``file`` can be emptied and cut: a regular file, and not the one standard output or error
    writes to (``--metrics /dev/stdout > log``: cutting it would cut what the run printed there)."""
    return regular(file) and standard_stream(file) is None


def standard_stream(file):
    """``sys.stdout`` or ``sys.stderr`` where it writes to the file that ``file``, a path or an open file, is, else
    None."""
    mine = os.fstat(file.fileno()) if hasattr(file, "fileno") else os.stat(file)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):  # replaced, closed or with no descriptor
            if os.path.samestat(os.fstat(stream.fileno()), mine):
                return stream
    return None


def shared(file, mode, **options):
    """``(file, None)``, or where ``file`` is the regular file that stdout or stderr writes to, ``(that stream's
    descriptor opened anew in mode, options as open's, stream)``, ``file`` closed: one offset for both, so that their
    writes go in turn (flush the stream before writing the file) where two offsets would write over each other."""
    stream = standard_stream(file) if regular(file) else None
    if stream is None:
        return file, None
    file.close()
    return open(os.dup(stream.fileno()), mode, closefd=True, **options), stream


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
