"""Networks that are DAGs of layers: ``DagNet`` (``network``), layers known by their Jacobians
(``layers``; the Jacobian blocks they give, ``blocks``), a layer of one's own checked against its forward pass
(``layer_check``), the backward schedules of a DAG (``schedules``), the forward pass as a triangular solve
(``forward``) and the DAG to and from a PyTorch module (``torch_io``).
"""

from .forward import ForwardJacobi, ForwardNewton
from .layer_check import check_layer
from .layers import Add, Concat, Dense, Layer, LayerNorm
from .network import DagNet
from .schedules import DagDoubling, DagJacobi, LevelSets

__all__ = ["DagNet", "Layer", "Dense", "Add", "Concat", "LayerNorm", "check_layer", "LevelSets", "DagJacobi",
           "DagDoubling", "ForwardJacobi", "ForwardNewton"]


def __getattr__(name):
    """The names of the last release (``GraphNet``), with a DeprecationWarning."""
    from ..core.renamed import RENAMED, old_name

    if name in RENAMED:  # kept once asked for: one warning where it is imported
        globals()[name] = old_name(__name__, name, globals()[RENAMED[name]])
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
