"""The GPU image's view for a dry run of device_check.sh (profiling/image_env.py says what and why): the
modules named in LEAPFROG_HIDDEN are not found in the folders of LEAPFROG_HIDDEN_FROM, only elsewhere on the
path; those in LEAPFROG_ABSENT are not found at all. Python runs this at start where this folder is on
PYTHONPATH."""

import importlib.machinery
import os
import sys

_HIDDEN = set(os.environ.get("LEAPFROG_HIDDEN", "").split())
_ABSENT = set(os.environ.get("LEAPFROG_ABSENT", "").split())
_FOLDERS = {os.path.realpath(p) for p in os.environ.get("LEAPFROG_HIDDEN_FROM", "").split(os.pathsep) if p}


class HiddenFromTheImage:
    """A meta-path finder, first: a hidden module is looked for outside the hidden folders only."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in _ABSENT or fullname.partition(".")[0] in _ABSENT:
            raise ModuleNotFoundError(f"No module named {fullname!r} (absent from the GPU image: device_check.sh "
                                      "--dry-run)", name=fullname)
        if fullname not in _HIDDEN:
            return None  # a submodule follows its parent, found where the parent was
        parent = fullname.rpartition(".")[0]
        search = sys.path if not parent else list(sys.modules[parent].__path__)
        allowed = [p for p in search if os.path.realpath(p or os.curdir) not in _FOLDERS]
        spec = importlib.machinery.PathFinder.find_spec(fullname, allowed)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {fullname!r} (not on the GPU image's package list: "
                                      "device_check.sh --dry-run hides it)", name=fullname)
        return spec


if _HIDDEN or _ABSENT:
    sys.meta_path.insert(0, HiddenFromTheImage())
