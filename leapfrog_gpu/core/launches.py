"""What a launch does, read from its name by one rule for every network (the stream timeline's colours).

A launch is named ``what[unit]``, or ``what`` alone: ``unit`` is the layer (MLP, RNN; ``l, s``: round s of
layer l's scan over time) or the node (DagNet) it works on, and the first word of ``what`` (its leading
letters) is the book's symbol of what it writes, which gives its role by ``ROLES``: ``z[3]`` the forward pass,
``delta[3]`` the chain, ``nabla_w[3]``, ``nabla_u[3]`` and ``gradients[h]`` the gradients, ``update[3]`` the
update. The step's controls and checks (``eta / B``, ``check_finite``, ...) have no role: ``"other"``.
"""

import re

ROLES = {
    "forward": ("z", "forward"),
    "chain": ("delta", "vjp", "c", "scan", "reduce", "substitute", "wavefront", "naumov", "jacobi", "doubling"),
    "gradients": ("nabla", "gradients"),
    "gradients + update, fused": ("fused",),
    "update": ("update",),
    "copy": ("copy",),
    "sums across ranks": ("allreduce",),
}
"""Each role, with the first words of its launches' names."""
OTHER = "other"


def role(name):
    """The role of the launch called ``name``: a key of ``ROLES``, or ``OTHER``."""
    word = re.match("[a-z]*", name).group()
    return next((role for role, words in ROLES.items() if word in words), OTHER)


def unit(name):
    """The unit in the first brackets of ``name`` (``"3"`` of ``"nabla_w[3]"``), or ``""`` where it has none."""
    inside = re.search(r"\[([^]]*)\]", name)
    return inside.group(1) if inside else ""
