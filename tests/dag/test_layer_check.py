"""``check_layer``: a layer of one's own against central differences of its forward pass. Every layer of the
library and the tests' ``Gate`` pass; a layer with one wrong product, a wrong Jacobian or a wrong output shape
is refused naming what is wrong (a DagNet trained on it silently, each schedule on its own wrong gradients)."""

import re
import warnings

import numpy as np
import pytest

from helpers import (Drawing, DrawsTooFew, DrawsWide, ForgetsAnInput, Gate, NamesTooFew, NoBias, Product, ShortProduct,
                     Sized, SummedOverUnits)
from leapfrog_gpu import Add, Concat, DagNet, Dense, Layer, LayerNorm, check_layer
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


class OffByOnePercent(Gate):
    """Right products, a Jacobian 1% too large."""

    def jacobian(self, backend, params, inputs, saved, i):
        return DenseBlock(backend.xp, 1.01 * super().jacobian(backend, params, inputs, saved, i).dense())


class Linear(Layer):
    """a = w x, w (n, n): a Jacobian w that is not symmetric."""

    params = ("w",)

    def size(self, sizes):
        return sizes[0]

    def init(self, rng, sizes):
        return {"w": rng.standard_normal((sizes[0], sizes[0]))}

    def forward(self, backend, params, inputs):
        return params["w"] @ inputs[0], {}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [params["w"].T @ g]

    def vjp_params(self, backend, params, inputs, saved, g):
        return {"w": g @ inputs[0].T}


class Transposed(Linear):
    """Right products, the Jacobian's transpose w^T for every sample."""

    def jacobian(self, backend, params, inputs, saved, i):
        return DenseBlock(backend.xp, np.repeat(params["w"].T[None], inputs[0].shape[1], axis=0))


class MeanOverTheBatch(Gate):
    """vjp_params averaged over the batch, where the network sums it."""

    def vjp_params(self, backend, params, inputs, saved, g):
        return {name: grad / g.shape[1] for name, grad in super().vjp_params(backend, params, inputs, saved, g).items()}


class MixesSamples(Layer):
    """a = x + its mean over the samples, with that map's exact products: no sample's output is its own."""

    def size(self, sizes):
        return sizes[0]

    def forward(self, backend, params, inputs):
        return inputs[0] + inputs[0].mean(axis=1, keepdims=True), {}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [g + g.mean(axis=1, keepdims=True)]



def differs(layer, what, by=r"0\.\d+"):
    """The refusal of ``what`` of ``layer``, differing by ``by`` (a pattern)."""
    return (re.escape(f"{layer}: {what} differs from the central differences of its forward by ") + by
            + re.escape(" beyond their rounding, relative to 1 + the largest, above rtol=1e-06") + "$")


@pytest.mark.parametrize("layer,message", [
    (TwiceTheInputs(), differs("TwiceTheInputs()", "vjp_inputs(...)[0]")),
    (MeanOverTheBatch(), differs("MeanOverTheBatch()", "vjp_params(...)['v']")),
    (OffByOnePercent(), differs("OffByOnePercent()", "jacobian(..., i=0).dense()", r"0\.00\d+")),
    (Transposed(), differs("Transposed()", "jacobian(..., i=0).dense()")),
    (MixesSamples(), re.escape("MixesSamples(): forward mixes the samples: moving sample 0 of input 0 moved the output "
                               "of sample 1; a layer maps each sample (column) alone") + "$"),
    (NoBias(), re.escape("NoBias().vjp_params returned no gradient for 'c': return one, summed over the batch, for "
                         "each parameter that params names ('v', 'c')") + "$"),
    (SummedOverUnits(), re.escape("SummedOverUnits().vjp_params returned 'c' of shape (); the parameter's is (4,): "
                                  "return dC/dc summed over the batch alone, shaped as c") + "$"),
    (WrongJacobian(), differs("WrongJacobian()", "jacobian(..., i=0).dense()", r"[01]\.\d+")),
    (OneRowShort(), re.escape("OneRowShort(): forward gave an output of shape (3, 3); size() says (4, 3)")),
    (InFloat32(), re.escape("InFloat32(): forward gave an output of dtype float32 for inputs of float64: make it "
                            "compute in its inputs' dtype (a DagNet refuses an output of another dtype than its "
                            "own)") + "$"),
], ids=lambda value: type(value).__name__ if not isinstance(value, str) else "")
def test_a_layer_that_is_wrong_is_refused_naming_what(layer, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        check_layer(layer, [4])


class Offset(Layer):
    """a = x + c, c a constant, with the exact product g (times ``scale``, 1 by default)."""

    def __init__(self, c, scale=1.0):
        self.c, self.scale = c, scale

    def __repr__(self):
        return f"Offset({self.c:g}, {self.scale:g})"

    def size(self, sizes):
        return sizes[0]

    def forward(self, backend, params, inputs):
        return inputs[0] + self.c, {}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [self.scale * g]


@pytest.mark.parametrize("width", [4, 64])
@pytest.mark.parametrize("c", [1e2, 1e4, 1e5, 1e6])
def test_a_layer_of_large_outputs_passes_and_a_product_of_it_off_by_one_percent_does_not(c, width):
    """The check differenced the cost sum(abar a), whose rounding grows with |a| and the width: it refused the exact
    product from |c| = 1e4 at width 64 (by 4e-6) and 1e5 at width 4. It differences the outputs before contracting
    them with abar, and allows for their rounding, about 4 eps |a| / h each: a product 1% off still differs by 0.008
    (about half of 1% of |g|, relative to 1 + the largest). The allowance, relative to 1 + |g|, passes rtol = 1e-6
    from |c| of about 1e3 (4 eps c / 2h against 2, with h up to 2e-6): from there a RuntimeWarning says so."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert check_layer(Offset(c), [width]) is None
        with pytest.raises(ValueError, match=differs(f"Offset({c:g}, 1.01)", "vjp_inputs(...)[0]", r"0\.00[5-9]\d*")):
            check_layer(Offset(c, 1.01), [width])
    assert [w.category for w in said] == ([] if c < 1e3 else [RuntimeWarning] * 2), [str(w.message) for w in said]


def test_a_forward_that_gives_nan_is_not_said_to_mix_the_samples():
    """sqrt on inputs below 0 gives NaN, which moves nothing: the check refuses the NaN derivatives, not a mixing of
    the samples that NaN != NaN would suggest."""

    class Root(Offset):
        def forward(self, backend, params, inputs):
            with np.errstate(invalid="ignore"):
                return np.sqrt(inputs[0]), {}

    with pytest.raises(ValueError) as refused:
        check_layer(Root(0.0), [4])
    assert "mixes the samples" not in str(refused.value) and "differs" in str(refused.value)


def test_outputs_too_large_for_the_step_are_said_to_hide_an_error():
    """At |a| = 1e8 an output rounds by about 1e-8 against a difference of 2e-6: an error of 1% is not seen, and the
    check says so."""
    with pytest.warns(RuntimeWarning, match=r"^check_layer\(Offset\(1e\+08, 1.01\)\): the central differences of "
                                            r"vjp_inputs\(\.\.\.\)\[0\] round by up to 0\.0\d+ relative to 1 \+ the "
                                            r"largest, above rtol=1e-06 .*: a difference below that is not seen$"):
        check_layer(Offset(1e8, 1.01), [4])


def test_bad_arguments():
    with pytest.raises(TypeError, match="^check_layer checks a leapfrog_gpu.dag.Layer; got type$"):
        check_layer(Gate, [4])
    for sizes in (4, None, "4", [4.0], {4}, {4: 1}):  # None raised "'NoneType' object is not iterable"
        with pytest.raises(TypeError, match=rf"^sizes must be a list of input widths, such as \[4\] or \[4, 3\]; "
                                            rf"got {re.escape(repr(sizes))}$"):
            check_layer(Gate(), sizes)
    assert check_layer(Gate(), iter([4])) is None  # an iterator was read by the check, then refused as []
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


class ScalesGInPlace(Gate):
    """vjp_inputs g * t written into g: right where vjp_params has read g before, wrong where it reads g after (the
    order is the schedule's)."""

    def vjp_inputs(self, backend, params, inputs, saved, g):
        g *= saved["t"]
        return [g]


class ErrorInPlace(Gate):
    """error 2 abar written into abar, which Add hands to each of its inputs alike."""

    def error(self, backend, params, saved, abar):
        abar *= 2
        return abar

    def vjp_inputs(self, backend, params, inputs, saved, g):
        return [g * saved["t"] / 2]

    def vjp_params(self, backend, params, inputs, saved, g):
        return {name: grad / 2 for name, grad in super().vjp_params(backend, params, inputs, saved, g).items()}


class ClipsItsInput(Gate):
    def forward(self, backend, params, inputs):
        np.clip(inputs[0], -0.5, 0.5, out=inputs[0])
        return super().forward(backend, params, inputs)


class DecaysV(Gate):
    def vjp_params(self, backend, params, inputs, saved, g):
        grads = super().vjp_params(backend, params, inputs, saved, g)
        params["v"] *= 0.5
        return grads


@pytest.mark.parametrize("layer, method, argument", [
    (ScalesGInPlace(), "vjp_inputs", "g"), (ErrorInPlace(), "error", "abar"), (ClipsItsInput(), "forward", "inputs"),
    (DecaysV(), "vjp_params", "params")], ids=lambda value: type(value).__name__ if isinstance(value, Layer) else "")
def test_a_layer_that_writes_into_what_it_is_given_is_refused_naming_the_method_and_the_argument(layer, method,
                                                                                                argument):
    """Its products may be right, as check_layer reads them, and wrong in a DagNet, whose schedules call the methods
    in orders of their own and hand one array to several layers (the first passed)."""
    with pytest.raises(ValueError, match=f"^{re.escape(repr(layer))}: {method} changed {argument}, which it is "
                                         "given: a layer must not write into "):
        check_layer(layer, [4])


class Noisy(Gate):
    """forward off by a rounding of its own at each call."""

    calls = 0

    def forward(self, backend, params, inputs):
        a, saved = super().forward(backend, params, inputs)
        Noisy.calls += 1
        return a * (1 + 1e-15 * Noisy.calls), saved


class SoftmaxOverTheBatchMax(Layer):
    """A softmax of each sample, stabilised by the largest input of the whole batch: each sample's alone but for
    roundings, which moving another sample changes."""

    def size(self, sizes):
        return sizes[0]

    def forward(self, backend, params, inputs):
        e = np.exp(inputs[0] - inputs[0].max())
        s = e / e.sum(axis=0, keepdims=True)
        return s, {"s": s}

    def vjp_inputs(self, backend, params, inputs, saved, g):
        s = saved["s"]
        return [s * (g - (g * s).sum(axis=0, keepdims=True))]


def test_a_forward_that_is_no_function_of_its_arguments_is_said_so_not_to_mix_the_samples():
    with pytest.raises(ValueError, match=r"^Noisy\(\): forward gave another output for the same inputs and parameters"):
        check_layer(Noisy(), [4])


def test_a_forward_whose_samples_share_only_roundings_passes():
    assert check_layer(SoftmaxOverTheBatchMax(), [4]) is None
    with pytest.raises(ValueError, match=r"forward mixes the samples"):  # beyond roundings: refused as before
        check_layer(MixesSamples(), [4])


class NoMethods(Layer):
    pass


class NoVjp(Layer):
    def size(self, sizes):
        return sizes[0]

    def forward(self, backend, params, inputs):
        return 2 * inputs[0], {}


def test_a_layer_missing_a_method_is_refused_naming_it():
    """A bare NotImplementedError named neither: forward as the network is built, vjp_inputs at the first backward
    pass of a node that reads another (of one that reads x alone it is never called)."""
    said = "defines no {}: a Layer of one's own defines size, forward and vjp_inputs"
    with pytest.raises(TypeError, match=re.escape("node 't': NoMethods " + said.format("forward(backend, params, "
                                                                                            "inputs)"))):
        DagNet(3, [("t", NoMethods(), "x"), ("o", Dense(2), "t")], backend="numpy")
    with pytest.raises(TypeError, match=re.escape("NoMethods " + said.format("forward(backend, params, inputs)"))):
        check_layer(NoMethods(), [3])
    with DagNet(3, [("h", Dense(3), "x"), ("t", NoVjp(), "h"), ("o", Dense(2), "t")], backend="numpy") as net:
        with pytest.raises(TypeError, match=re.escape("node 't': NoVjp " + said.format(
                "vjp_inputs(backend, params, inputs, saved, g)"))):
            net.gradients(np.ones((3, 4)), np.ones((2, 4)))
    with pytest.raises(TypeError, match=re.escape("NoVjp " + said.format("vjp_inputs(backend, params, inputs, saved, "
                                                                          "g)"))):
        check_layer(NoVjp(), [3])
