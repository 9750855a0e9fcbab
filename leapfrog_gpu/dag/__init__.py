"""Networks that are DAGs of layers: ``GraphNet`` (``network``), layers known by their Jacobians
(``layers``), the backward schedules of a DAG (``schedules``), the forward pass as a triangular
solve (``forward``) and the DAG as a PyTorch module (``torch_io``).
"""

from .forward import ForwardJacobi, ForwardNewton
from .layers import Add, Concat, Dense, Layer, LayerNorm
from .network import GraphNet
from .schedules import DagDoubling, DagJacobi, LevelSets

__all__ = ["GraphNet", "Layer", "Dense", "Add", "Concat", "LayerNorm", "LevelSets", "DagJacobi", "DagDoubling",
           "ForwardJacobi", "ForwardNewton"]
