"""Names of the activations, costs and dtypes a network accepts, and the checks that enforce them."""

ACTIVATIONS = ("sigmoid", "tanh", "relu")
"""Hidden-layer activations sigma."""

OUTPUT_ACTIVATIONS = (*ACTIVATIONS, "identity")
"""Output-layer activations: the hidden ones, plus the identity for regression."""

COSTS = ("quadratic", "cross_entropy")
"""Costs C."""

DTYPES = ("float32", "float64")


def choose(kind, value, accepted):
    """Return ``value`` if it is one of ``accepted``, else raise a ValueError naming both."""
    if not isinstance(value, str):
        raise TypeError(f"{kind} must be a string, one of {_listing(accepted)}; got {value!r}")
    if value not in accepted:
        raise ValueError(f"{kind} must be one of {_listing(accepted)}; got {value!r}")
    return value


def _listing(accepted):
    return ", ".join(repr(name) for name in accepted)


def resolve_output_activation(activation, cost, output_activation):
    """The output layer's activation: given, else sigmoid for cross-entropy, else the hidden one.

    Cross-entropy is defined for outputs in (0, 1) and its error (4) is ``a - y`` only with a sigmoid
    output, so it accepts no other.
    """
    if output_activation is None:
        return "sigmoid" if cost == "cross_entropy" else activation
    choose("output_activation", output_activation, OUTPUT_ACTIVATIONS)
    if cost == "cross_entropy" and output_activation != "sigmoid":
        raise ValueError(
            f"cost 'cross_entropy' needs output_activation 'sigmoid'; got {output_activation!r} "
            "(use cost='quadratic' for other outputs)"
        )
    return output_activation
