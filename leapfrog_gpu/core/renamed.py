"""Public names of the last release that are called otherwise now: still importable, with a warning."""

import warnings

RENAMED = {"GraphNet": "DagNet"}
"""Old name -> new name: "graph" means graph mode alone (a step captured once and launched)."""


def old_name(module, name, new):
    """``new`` (the object now called ``RENAMED[name]``), asked for as ``module.name``, with a
    DeprecationWarning that says what to write instead."""
    warnings.warn(f"{module}.{name} is now {RENAMED[name]} (graph means graph mode alone); {name} will be removed "
                  "in the next release", DeprecationWarning, stacklevel=3)
    return new
