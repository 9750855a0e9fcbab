"""What a dry run of device_check.sh hides so that it sees what the GPU image has: the modules of every
installed distribution that ``profiling/gpu-image-packages.txt`` does not name (the project's own aside).

    python profiling/image_env.py profiling/gpu-image-packages.txt

prints two lines for the script: the module names to hide (top-level, or ``parent.child`` inside a namespace
package such as ``nvidia``), and the folders they are hidden from (the installs' site-packages). The hiding
itself is ``profiling/image/sitecustomize.py``, which every Python started with that folder on PYTHONPATH
runs: a module hidden there is still found anywhere else on the path (a wheel device_check.sh installed).
"""

import argparse
import importlib.metadata
import os
import re
import sys

PROJECT = "leapfrog-gpu"
SKIPPED = ("..", "__pycache__")


def normalized(name):
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages(path):
    """The names the image's list holds, normalized."""
    with open(path, encoding="utf-8") as lines:
        return {normalized(line.strip()) for line in lines if line.strip() and not line.startswith("#")}


def modules(distribution):
    """The importable names a distribution installs: its top-level modules and packages, and for a namespace
    package (no ``__init__.py`` of its own) the packages it puts inside it."""
    files = {str(f).replace("\\", "/") for f in distribution.files or ()}
    names = set()
    for path in files:
        parts = path.split("/")
        if parts[0] in SKIPPED or parts[0].endswith((".dist-info", ".data", ".pth")) or path.endswith(".pth"):
            continue
        if len(parts) == 1:
            if path.endswith((".py", ".so", ".pyd")):
                names.add(path.split(".")[0])
        elif f"{parts[0]}/__init__.py" in files:
            names.add(parts[0])
        elif len(parts) > 2 or parts[1].endswith((".py", ".so")):
            names.add(f"{parts[0]}.{parts[1].split('.')[0]}")
    return {name for name in names if all(part.isidentifier() and part not in SKIPPED for part in name.split("."))}


def hidden(packages):
    """``(names, folders)``: what the installed distributions outside ``packages`` provide, and where; a name
    that one on the list provides too (a folder both fill) stays."""
    names, kept, folders = set(), set(), set()
    for distribution in importlib.metadata.distributions():
        name = normalized(distribution.metadata["Name"] or "")
        provided = modules(distribution)
        if name in packages or name == PROJECT:
            kept |= provided
        elif provided:
            names |= provided
            folders.add(os.path.realpath(distribution.locate_file("")))
    return sorted(names - kept), sorted(folders)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", metavar="PACKAGES_FILE", help="the image's list, profiling/gpu-image-packages.txt")
    path = parser.parse_args(argv).packages
    if not os.path.isfile(path):
        parser.error(f"{path} is no file: give the image's package list, profiling/gpu-image-packages.txt")
    names, folders = hidden(image_packages(path))
    print(" ".join(names))
    print(os.pathsep.join(folders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
