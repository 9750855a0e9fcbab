"""``check_layer``: a layer of one's own against central differences of its forward pass. Every layer of the
library and the tests' ``Gate`` pass; a layer with one wrong product, a wrong Jacobian or a wrong output shape
is refused naming what is wrong (a DagNet trained on it silently, each schedule on its own wrong gradients)."""

import re

import numpy as np
import pytest

from helpers import (Drawing, DrawsTooFew, DrawsWide, ForgetsAnInput, Gate, NamesTooFew, NoBias, Product, ShortProduct,
                     Sized, SummedOverUnits)
from leapfrog_gpu import Add, Concat, Dense, LayerNorm, check_layer
from leapfrog_gpu.dag.blocks import DenseBlock


class InAnotherOrder(Gate):
    """init draws c before v: the names params gives, in another order."""

    def init(self, rng, sizes):
        return dict(reversed(super().init(rng, sizes).items()))


@pytest.mark.parametrize("layer,sizes", [
    (Dense(3, "tanh"), [4]), (Dense(2, "sigmoid"), [5]), (Dense(4, "relu"), [3]), (Dense(1, "identity"), [1]),
    (Add(), [3, 3, 3]), (Concat(), [2, 1, 3]), (LayerNorm(), [4]), (LayerNorm(eps=0.3), [2]), (Gate(), [4]),
    (Product(), [3, 3]), (InAnotherOrder(), [4]),
], ids=repr)
def test_every_layer_of_the_library_passes(layer, sizes):
    assert check_layer(layer, sizes, batch=2, seed=3) is None


class TwiceTheInputs(Gate):
    """vjp_inputs doubled."""

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [2 * g * saved["t"]]


class WrongJacobian(Gate):
    """Right products, a Jacobian of their negatives (the block schedules read it, the chain does not)."""

    def jacobian(self, backend, params, inputs, saved, i):
        return DenseBlock(backend.xp, -super().jacobian(backend, params, inputs, saved, i).dense())


class InFloat32(Gate):
    def forward(self, backend, params, inputs):
        a, saved = super().forward(backend, params, inputs)
        return a.astype(np.float32), saved


class OneRowShort(Gate):
    def forward(self, backend, params, inputs):
        a, saved = super().forward(backend, params, inputs)
        return a[:-1], saved


@pytest.mark.parametrize("layer,message", [
    (TwiceTheInputs(), r"TwiceTheInputs\(\): vjp_inputs\(\.\.\.\)\[0\] differs from the central differences of its "
                       r"forward by 0\.\d+, relative to 1 \+ the largest, above rtol=1e-06$"),
    (NoBias(), re.escape("NoBias().vjp_params returned no gradient for 'c': return one, summed over the batch, for "
                         "each parameter that params names ('v', 'c')") + "$"),
    (SummedOverUnits(), re.escape("SummedOverUnits().vjp_params returned 'c' of shape (); the parameter's is (4,): "
                                  "return dC/dc summed over the batch alone, shaped as c") + "$"),
    (WrongJacobian(), r"WrongJacobian\(\): jacobian\(\.\.\., i=0\)\.dense\(\) differs .* by [01]\.\d+, relative"),
    (OneRowShort(), re.escape("OneRowShort(): forward gave an output of shape (3, 3); size() says (4, 3)")),
    (InFloat32(), re.escape("InFloat32(): forward gave an output of dtype float32 for inputs of float64: make it "
                            "compute in its inputs' dtype (a DagNet refuses an output of another dtype than its "
                            "own)") + "$"),
], ids=lambda value: type(value).__name__ if not isinstance(value, str) else "")
def test_a_layer_that_is_wrong_is_refused_naming_what(layer, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        check_layer(layer, [4])


def test_bad_arguments():
    with pytest.raises(TypeError, match="^check_layer checks a leapfrog_gpu.dag.Layer; got type$"):
        check_layer(Gate, [4])
    with pytest.raises(TypeError, match=r"^sizes must be a list of input widths, such as \[4\] or \[4, 3\]; got 4$"):
        check_layer(Gate(), 4)
    with pytest.raises(ValueError, match="^an input width must be an integer >= 1; got 0$"):
        check_layer(Gate(), [0])
    with pytest.raises(ValueError, match="^rtol must be a number > 0"):
        check_layer(Gate(), [4], rtol=0)


@pytest.mark.parametrize("layer", [LayerNorm(), Gate(), Product()], ids=repr)
def test_sizes_of_no_input_are_refused_before_the_layer_reads_them(layer):
    """A layer reads one input or more (a DagNet refuses a node of none); the layer's init or size read sizes[0]
    and raised an IndexError."""
    message = ("sizes must list the width of every input, at least one (a layer reads one input or more), such as "
               "[4] or [4, 3]; got []")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_layer(layer, [])


class SizeFirst(LayerNorm):
    """A LayerNorm whose init may only read widths that its size took."""

    def init(self, rng, sizes):
        raise AssertionError(f"init read widths {sizes}")


def test_widths_the_layer_refuses_are_refused_by_its_size_before_its_init_reads_them():
    with pytest.raises(ValueError, match=r"^LayerNorm takes one input of width >= 2; got widths \[4, 4\]$"):
        check_layer(SizeFirst(), [4, 4])


@pytest.mark.parametrize("width,error", [(3.5, TypeError), (None, TypeError), (0, ValueError)])
def test_a_size_that_is_no_width_is_refused_with_what_it_gave(width, error):
    """It raised a TypeError of NumPy's for 3.5 and None, and a shape mismatch for 0."""
    message = f"Sized({width!r}).size([4]) returned {width!r}: return the output width, an integer >= 1"
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        check_layer(Sized(width), [4])


def test_an_init_that_draws_a_nan_is_refused_as_set_parameters_would():
    """It was reported as a derivative that differs by nan."""
    message = "Drawing(nan).init()['c'] contains NaN or Inf (as float64); every parameter must be finite"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_layer(Drawing(np.nan), [4])


def test_a_forward_that_fails_on_the_parameters_init_drew_is_named_with_their_shapes():
    """It raised NumPy's broadcast error alone."""
    message = ("DrawsWide().forward failed on inputs of shapes [(4, 3)] and parameters of shapes {'v': (5,), "
               "'c': (5,)}, as init drew them: operands could not be broadcast together with shapes (4,3) (5,1)")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_layer(DrawsWide(), [4])


def test_a_product_not_shaped_as_its_input_is_refused_with_both_shapes():
    """It raised a NumPy broadcast error."""
    message = ("ShortProduct().vjp_inputs returned a product of shape (3, 3) for input 0, of shape (4, 3): return "
               "dC/d input_0, shaped as input 0 (n_0, B)")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_layer(ShortProduct(), [4])


def test_a_product_too_few_is_refused_with_the_counts():
    """It raised an IndexError."""
    message = ("ForgetsAnInput().vjp_inputs returned 1 product for 2 inputs: return a list of one product (n_i, B) per "
               "input, in the inputs' order")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_layer(ForgetsAnInput(), [3, 3])


@pytest.mark.parametrize("layer,drawn,named", [(DrawsTooFew(), "['v']", "['c', 'v']"),
                                               (NamesTooFew(), "['c', 'v']", "['v']")],
                         ids=["draws-too-few", "names-too-few"])
def test_an_init_that_draws_other_parameters_than_params_names_is_refused_with_both(layer, drawn, named):
    """The check read init's names alone: it raised a KeyError where forward reads a parameter not drawn, and
    passed a layer whose params names one that init does not draw and nothing reads (a DagNet's KeyError)."""
    message = (f"{layer!r}.init drew the parameters {drawn}, its params name {named}: make init draw every parameter "
               "that params names, and none other")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_layer(layer, [4])
