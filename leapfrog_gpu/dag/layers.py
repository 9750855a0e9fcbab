"""Layers as Jacobian providers: the protocol every node of a ``DagNet`` follows.

A layer maps its inputs (each (n_i, B), a minibatch as columns) to one output a, (n, B). Backward it
gives vector-Jacobian products: from the adjoint abar = dC/da, (n, B), its ``error`` g (for ``Dense``
the book's delta = abar * sigma'(z), eq. (5)'s Hadamard half; for the other layers abar itself), then
``vjp_inputs`` (dC/d input_i from g, per input) and ``vjp_params`` (dC/d parameter from g, summed over
the batch). The solvers of ``dag.schedules`` and ``dag.forward`` also need the input Jacobian
J_i = d a / d input_i of every sample as a block (``blocks``: ``Factored`` for ``Dense``, ``Diagonal`` for
``Add``, ``Slice`` for ``Concat``). A layer that gives only its products gets its Jacobian built from them
(``Layer.jacobian``: one product per output unit). Parameters are dicts of arrays by name; ``Dense`` runs the
MLP's kernels (``backend.ops``), so that a chain of them computes what ``MLP`` computes, bit for bit.
"""

import math
import numbers
import operator
from collections.abc import Mapping

import numpy as np

from ..core import parameters
from ..core.checks import check_real, shape_of, shown
from ..core.functions import OUTPUT_ACTIVATIONS, choose
from .blocks import Block, DenseBlock, Diagonal, Factored, Slice, from_products  # noqa: F401 (Block, DenseBlock:
# what a layer of one's own may give from jacobian, imported from here as before blocks.py held them)


class Layer:
    """The protocol. ``params`` names the parameters; subclasses override what they need.

    Methods take the network's ``backend`` (its ``xp`` and ``ops``), the layer's parameters (a dict,
    empty for none), its inputs (a list of (n_i, B) arrays) and what ``forward`` saved for backward.
    """

    params = ()

    def size(self, sizes):
        """The output width for input widths ``sizes``, an integer >= 1 (``output_width``); raise a ValueError if
        they do not fit."""
        raise undefined(self, "size(sizes)")

    def init(self, rng, sizes):
        """Initial parameters (NumPy float64 arrays by name, those ``params`` names, finite: ``drawn_params``) for
        input widths ``sizes``."""
        return {}

    def forward(self, backend, params, inputs):
        """Return ``(a, saved)``: the output (n, B) in its inputs' dtype, n what ``size`` gives (a ValueError names
        the node otherwise), and what the products need."""
        raise undefined(self, "forward(backend, params, inputs)")

    def error(self, backend, params, saved, abar):
        """The layer's error g from the adjoint abar = dC/da, (n, B); by default abar itself."""
        return abar

    def vjp_inputs(self, backend, params, inputs, saved, g):
        """dC/d input_i for every input i, from the error g: a list of (n_i, B), one per input, each shaped as it
        (``input_products``)."""
        raise undefined(self, "vjp_inputs(backend, params, inputs, saved, g)")

    def vjp_params(self, backend, params, inputs, saved, g):
        """dC/d parameter summed over the batch, from the error g: a dict by name, one for each parameter, shaped as
        it (``param_products``)."""
        return {}

    def jacobian(self, backend, params, inputs, saved, i):
        """J_i = d a / d input_i as a ``DenseBlock``, built from the products: row r of every sample's
        J_i is J_i^T e_r, one product per output unit."""
        return from_products(backend.xp, lambda u: input_products(self, backend, params, inputs, saved,
                                                                  self.error(backend, params, saved, u))[i],
                             self.size([x.shape[0] for x in inputs]), inputs[i])

    def options(self):
        """The keyword arguments that build this layer again, JSON-able: ``type(layer)(**layer.options())``."""
        return {}

    def __repr__(self):
        return f"{type(self).__name__}()"


def undefined(layer, method):
    """The TypeError of a layer of one's own that defines no ``method``, which every layer gives (the base ``Layer``
    has none to inherit)."""
    return TypeError(f"{type(layer).__name__} defines no {method}: a Layer of one's own defines size, forward and "
                     "vjp_inputs")


def output_width(layer, sizes, n):
    """``n``, what ``layer.size(sizes)`` gave, as the output width, an int >= 1; else a TypeError (no integer: int()
    cut 3.5 to 3, and failed on None) or a ValueError (below 1), as the network is built."""
    try:
        width = None if isinstance(n, bool) else operator.index(n)  # an int, NumPy's, or a 0-d array of one
    except TypeError:
        width = None
    if width is None or width < 1:
        error = TypeError if width is None else ValueError
        raise error(f"{layer!r}.size({list(sizes)}) returned {shown(n)}: return the output width, an integer >= 1")
    return width


def drawn_params(layer, rng, sizes, dtype="float64", xp=np):
    """``layer.init(rng, sizes)``, the parameters by name in the order of its ``params``, as ``xp`` arrays of
    ``dtype``; a ValueError says where their names are not the ones its ``params`` gives (the network keeps those: a
    name init does not draw, or one it draws beyond them, is read by name later and fails there, far from the layer),
    and for a layer of one's own where one is not real (a TypeError) or not finite in ``dtype``, as
    ``set_parameters`` says (``core.parameters.array``: a NaN drawn trained to NaN)."""
    drawn = layer.init(rng, sizes)
    if set(drawn) != set(layer.params):
        raise ValueError(f"{layer!r}.init drew the parameters {sorted(drawn)}, its params name {sorted(layer.params)}: "
                         "make init draw every parameter that params names, and none other")
    if trusted(layer):
        return {name: xp.asarray(drawn[name], dtype=dtype) for name in layer.params}
    return {name: xp.asarray(parameters.array(f"{layer!r}.init()[{name!r}]", drawn[name], None, dtype, xp))
            for name in layer.params}


def layer_output(layer, backend, params, inputs):
    """``layer.forward(backend, params, inputs)``, ``(a, saved)``; a ValueError or a TypeError of a layer of one's own
    raised again (its own traceback chained) with the shapes of its inputs and parameters (a parameter that init drew
    in another shape than forward reads fails in a NumPy broadcast, whose words name neither)."""
    try:
        given = layer.forward(backend, params, inputs)
    except (TypeError, ValueError) as error:
        if trusted(layer):
            raise
        shapes = {name: p.shape for name, p in params.items()}
        drawn = f" and parameters of shapes {shapes}, as init drew them" if params else ""
        kind = ValueError if isinstance(error, ValueError) else TypeError
        raise kind(f"{layer!r}.forward failed on inputs of shapes {[x.shape for x in inputs]}{drawn}: "
                   f"{str(error).strip()}") from error
    if not (isinstance(given, tuple) and len(given) == 2):
        given = "an array" if hasattr(given, "shape") else shown(given)
        raise TypeError(f"{layer!r}.forward returned {given}: return (a, saved), the output and what the products "
                        "need (None, or {}, for nothing)")
    return given


def input_products(layer, backend, params, inputs, saved, g):
    """``layer.vjp_inputs``: one product (n_i, B) per input, in the inputs' order, shaped as its input; a ValueError
    says what a layer of one's own gave otherwise (zipped with the inputs, a missing product would be dropped, and its
    input's adjoint wrong; one of another shape failed in a NumPy broadcast, naming no node). The library's layers
    are not checked."""
    products = layer.vjp_inputs(backend, params, inputs, saved, g)
    if trusted(layer):
        return products
    if not isinstance(products, (list, tuple)) or len(products) != len(inputs):
        got = (f"{len(products)} product{'s' * (len(products) != 1)}" if isinstance(products, (list, tuple)) else
               f"a {type(products).__name__}")
        raise ValueError(f"{layer!r}.vjp_inputs returned {got} for {len(inputs)} inputs: return a list of one "
                         "product (n_i, B) per input, in the inputs' order")
    for i, (product, x) in enumerate(zip(products, inputs)):
        if (shape := shape_of(f"vjp_inputs(...)[{i}]", product)) != x.shape:
            raise ValueError(f"{layer!r}.vjp_inputs returned a product of shape {shape} for input {i}, "
                             f"of shape {x.shape}: return dC/d input_{i}, shaped as input {i} (n_{i}, B)")
        _check_array(layer, f"vjp_inputs returned for input {i}", product, x)
    return products


def param_products(layer, backend, params, inputs, saved, g):
    """``layer.vjp_params``: dC/d parameter summed over the batch, by name, one for each of ``params`` and shaped as
    it; a ValueError says what a layer of one's own gave otherwise (a gradient left out failed in the update, after
    the updates of the nodes before it, and one of another shape was broadcast into it). The library's layers are
    not checked."""
    grads = layer.vjp_params(backend, params, inputs, saved, g)
    if trusted(layer):
        return grads
    if not isinstance(grads, Mapping):
        raise TypeError(f"{layer!r}.vjp_params returned a {type(grads).__name__}: return a dict of one gradient by "
                        f"name for each parameter that {_named(params)}")
    for name in params:
        if name not in grads:
            raise ValueError(f"{layer!r}.vjp_params returned no gradient for {name!r}: return one, summed over the "
                             f"batch, for each parameter that {_named(params)}")
    for name, gradient in grads.items():
        if name not in params:
            raise ValueError(f"{layer!r}.vjp_params returned a gradient for {name!r}, which is no parameter: return "
                             f"one for each parameter that {_named(params)}, and none other")
        if (shape := shape_of(f"vjp_params(...)[{name!r}]", gradient)) != params[name].shape:
            raise ValueError(f"{layer!r}.vjp_params returned {name!r} of shape {shape}; the parameter's "
                             f"is {params[name].shape}: return dC/d{name} summed over the batch alone, shaped as "
                             f"{name}")
        _check_array(layer, f"vjp_params returned for {name!r}", gradient, params[name])
    return grads


def _check_array(layer, what, product, like):
    """A TypeError where ``product``, what ``layer`` returned (``what``), is not an array of the kind and dtype of
    ``like``, the input or parameter it is the derivative by: a float or a list failed in the update, after the
    updates of the nodes before it, and another dtype spread to the gradients of the nodes below it."""
    if not isinstance(product, type(like)):
        raise TypeError(f"{layer!r}.{what} a {type(product).__name__}: return an array of the backend's "
                        f"(backend.xp), a {type(like).__module__}.{type(like).__name__}")
    if product.dtype != like.dtype:
        raise TypeError(f"{layer!r}.{what} an array of dtype {product.dtype}; the network's is {like.dtype}: "
                        "compute in the dtype of its inputs and parameters")


def _named(params):
    """What a refusal of ``vjp_params`` says of the parameters: "params names ('w', 'b')"."""
    return f"params names ({', '.join(map(repr, params))})"


def trusted(layer):
    """Whether ``layer`` is one of the library's (``LAYERS``, not a subclass), whose results are not checked."""
    return type(layer) in TRUSTED


class Dense(Layer):
    """Affine and sigma: z = w a_in + b, a = sigma(z) (eqs. (2)(3)); w (n, m) ~ N(0, 1/m), b ~ N(0, 1)."""

    params = ("w", "b")

    def __init__(self, n, activation="sigmoid"):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"Dense needs a width n, an integer >= 1; got {shown(n)} ({type(n).__name__})")
        if n < 1:
            raise ValueError(f"Dense needs a width n >= 1; got {shown(n)}")
        self.n, self.activation = int(n), choose("activation", activation, OUTPUT_ACTIVATIONS)

    def __repr__(self):
        return f"Dense({self.n}, {self.activation!r})"

    def options(self):
        return {"n": self.n, "activation": self.activation}

    def size(self, sizes):
        if len(sizes) != 1:
            raise ValueError(f"Dense takes one input; got {len(sizes)} (join them with Add or Concat first)")
        return self.n

    def init(self, rng, sizes):
        m = sizes[0]
        return {"w": rng.standard_normal((self.n, m)) / math.sqrt(m), "b": rng.standard_normal(self.n)}

    def forward(self, backend, params, inputs):
        xp, (a_in,) = backend.xp, inputs
        z, a, sp = (xp.empty((self.n, a_in.shape[1]), dtype=a_in.dtype, order=backend.batch_order) for _ in range(3))
        backend.ops.forward(z, a, sp, params["w"], a_in, params["b"], self.activation)
        return a, {"sp": sp}

    def error(self, backend, params, saved, abar):
        delta = backend.xp.empty(abar.shape, dtype=abar.dtype, order=backend.batch_order)
        backend.xp.copyto(delta, abar)  # abar may be shared with another node (Add hands out one array)
        backend.ops.delta_hidden(delta, saved["sp"])
        return delta

    def vjp_inputs(self, backend, params, inputs, saved, g):
        w = params["w"]
        out = backend.xp.empty((w.shape[1], g.shape[1]), dtype=g.dtype, order=backend.batch_order)
        backend.ops.bind_matmul(out, w, g, transpose=True)()  # the MLP's product of (5), as it calls it
        return [out]

    def vjp_params(self, backend, params, inputs, saved, g):
        xp, ops, (a_in,) = backend.xp, backend.ops, inputs
        nabla_b, nabla_w = xp.empty(self.n, dtype=g.dtype), xp.empty(params["w"].shape, dtype=g.dtype)
        ops.nabla_b(nabla_b, g)
        ops.nabla_w(nabla_w, g, a_in)
        return {"w": nabla_w, "b": nabla_b}

    def jacobian(self, backend, params, inputs, saved, i):
        return Factored(backend.xp, saved["sp"], params["w"])


class Add(Layer):
    """The sum of two or more inputs of one width: a skip connection."""

    def size(self, sizes):
        if len(sizes) < 2 or len(set(sizes)) != 1:
            raise ValueError(f"Add needs two or more inputs of one width; got widths {list(sizes)}")
        return sizes[0]

    def forward(self, backend, params, inputs):
        a = inputs[0] + inputs[1]
        for more in inputs[2:]:
            a = a + more
        return a, {}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [g] * len(inputs)

    def jacobian(self, backend, params, inputs, saved, i):
        return Diagonal(backend.xp, backend.xp.ones_like(inputs[i]))


class Concat(Layer):
    """The inputs stacked along the features, first input on top: a DenseNet-like join."""

    def size(self, sizes):
        if len(sizes) < 1:
            raise ValueError("Concat needs at least one input")
        return sum(sizes)

    def forward(self, backend, params, inputs):
        a, start = backend.xp.empty((self.size([x.shape[0] for x in inputs]), inputs[0].shape[1]),
                                    dtype=inputs[0].dtype), 0
        for x in inputs:
            a[start:start + x.shape[0]] = x
            start += x.shape[0]
        return a, {}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        out, start = [], 0
        for x in inputs:
            out.append(g[start:start + x.shape[0]])
            start += x.shape[0]
        return out

    def jacobian(self, backend, params, inputs, saved, i):
        offset = sum(x.shape[0] for x in inputs[:i])
        x = inputs[i]
        return Slice(backend.xp, self.size([u.shape[0] for u in inputs]), offset, x.shape[0], x.shape[1], x.dtype)


class LayerNorm(Layer):
    """Layer normalization of every sample over its features: gamma * (x - mean) / sqrt(var + eps) + beta.

    It gives only its products; its Jacobian (dense: every output depends on every input) is built
    from them by ``Layer.jacobian``.
    """

    params = ("gamma", "beta")

    def __init__(self, eps=1e-5):
        self.eps = check_real("LayerNorm's eps", eps, "a finite number > 0 (it keeps sqrt(var + eps) from 0)",
                              strict=True)

    def __repr__(self):
        return f"LayerNorm(eps={self.eps})"

    def options(self):
        return {"eps": self.eps}

    def size(self, sizes):
        if len(sizes) != 1 or sizes[0] < 2:
            raise ValueError(f"LayerNorm takes one input of width >= 2; got widths {list(sizes)}")
        return sizes[0]

    def init(self, rng, sizes):
        return {"gamma": np.ones(sizes[0]), "beta": np.zeros(sizes[0])}

    def forward(self, backend, params, inputs):
        xp, (x,) = backend.xp, inputs
        n = x.shape[0]
        centred = x - x.sum(axis=0, keepdims=True) / n
        inv = 1 / xp.sqrt((centred * centred).sum(axis=0, keepdims=True) / n + self.eps)
        xhat = centred * inv
        return params["gamma"][:, None] * xhat + params["beta"][:, None], {"xhat": xhat, "inv": inv}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        xhat, inv = saved["xhat"], saved["inv"]
        gx, n = params["gamma"][:, None] * g, g.shape[0]
        mean = gx.sum(axis=0, keepdims=True) / n
        project = (gx * xhat).sum(axis=0, keepdims=True) / n
        return [inv * (gx - mean - xhat * project)]

    def vjp_params(self, backend, params, inputs, saved, g):
        """Each sum over the batch as (6) sums nabla_b (``ops.nabla_b``: in float64 on the host)."""
        xp, n = backend.xp, g.shape[0]
        nabla_gamma, nabla_beta = xp.empty(n, dtype=g.dtype), xp.empty(n, dtype=g.dtype)
        backend.ops.nabla_b(nabla_gamma, g * saved["xhat"])
        backend.ops.nabla_b(nabla_beta, g)
        return {"gamma": nabla_gamma, "beta": nabla_beta}


LAYERS = {layer.__name__: layer for layer in (Dense, Add, Concat, LayerNorm)}
"""The layers of a saved ``DagNet``, by name (``DagNet.architecture``)."""

TRUSTED = frozenset(LAYERS.values())
"""The library's layers, what they give is not checked (``trusted``); a subclass of one is a layer of one's own."""
