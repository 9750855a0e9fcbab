"""The controls of a step, in device memory: one ``Controls`` per network, whichever the network."""

from ..backends import to_host


class Controls:
    """``array`` = [eta / B, refusal, lr, 1 / B, t, 1 - beta1^t, sqrt(1 - beta2^t), t done] in the network's
    dtype, on its device; ``optimizer``, the ``core.optimizers`` optimizer of the step last enqueued, and ``state``,
    the network's optimizer state ``{unit: {name: {slot: array}}}``, which a plan binds into its update launches as it
    enqueues them.

    The update kernels read the array when they run, not when they are enqueued, so that a captured graph reads the
    current values: eta / B for the plain SGD step, the learning rate lr, 1 / B and the step count t (from 1) for the
    others, and Adam's bias corrections. The refusal code: 0 means update. A network built with ``check_finite=True``
    checks its gradients after the join, deepest first, and the first one that holds a NaN or an Inf leaves its code
    (``code(name)``, one per gradient name, e.g. ``"nabla_w[3]"``); a code already there is kept. While the code is
    not 0 every update kernel writes nothing, in this step and in those enqueued behind it, until the network's
    ``synchronize()`` reads it (``read()``), raises ``FloatingPointError`` naming the gradient and clears it.

    t done: the last launch of a step by an optimizer with a state (``mark_done``) copies its t there unless the
    step was refused, so that after a refused or failed step ``done()`` is the step count of the last step that
    updated (a step that raised on a stream runs nothing after the failure: no launch of its own, none of a step
    behind it). t goes to the device as its ``tag``, which float32 holds past 2^24 steps too.
    """

    def __init__(self, backend, dtype):
        self.backend = backend
        self.array = backend.xp.zeros(8, dtype=dtype)
        self.optimizer, self.state = None, {}
        self.counted = 0  # the step count the host last read (or set): ``untag`` tells steps apart this near it
        self._names = []

    def set_rate(self, rate):
        """Enqueue ``array[0] = rate`` (eta / B) on the main stream."""
        backend = self.backend
        backend.launch(backend.main, "eta / B", backend.ops.set_element, self.array, 0, rate)

    def slots(self, unit, name):
        """The optimizer state of ``unit``'s parameter ``name``, ``{slot: array}`` (empty without one)."""
        return self.state.get(unit, {}).get(name, {})

    def set_step(self, values):
        """Enqueue on the main stream the controls of a step that is not the plain SGD one: ``array[2:] =
        values`` (``core.optimizers.Optimizer.controls``), t as its ``tag``."""
        backend, (lr, scale, t, *rest) = self.backend, values
        backend.launch(backend.main, "lr, 1 / B, t", _set_elements, backend.ops.set_element, self.array,
                       tuple(enumerate((lr, scale, tag(t), *rest), start=2)))

    def code(self, name):
        """The refusal code of the gradient called ``name``: a number >= 1, the same for the network's life."""
        if name not in self._names:
            self._names.append(name)
        return self._names.index(name) + 1

    def mark_done(self):
        """Enqueue on the main stream, behind a step's join, ``array[7] = t`` unless the step was refused."""
        backend = self.backend
        backend.launch(backend.main, "step done", backend.ops.step_done, self.array)

    def set_done(self, t):
        """``array[7] = t`` (as its ``tag``) now, on the host: the count of a state set."""
        self.array[7], self.counted = tag(t), t

    def done(self, enqueued):
        """The step count t of the last step that updated (``mark_done``), of the ``enqueued`` steps or fewer; read
        on the host, once the steps have run."""
        self.counted = untag(int(self.array[7]), enqueued)
        return self.counted

    def read(self, enqueued):
        """``(refused, done)``: the name of the gradient whose check refused an update (None: none) and ``done()``,
        from one copy to the host; call it once the steps have run (``synchronize()``)."""
        host = to_host(self.array)
        code, self.counted = int(host[1]), untag(int(host[7]), enqueued)
        return (self._names[code - 1] if code else None), self.counted

    def clear(self):
        """Enqueue ``array[1] = 0`` on the main stream: the steps enqueued after it update again."""
        backend = self.backend
        backend.launch(backend.main, "clear refusal", backend.ops.set_element, self.array, 1, 0)


TAGS = 1 << 23
"""Step counts from which ``tag`` cycles, over ``TAGS // 2`` tags."""


def tag(t):
    """The step count t as the device holds it: t below ``TAGS``, past it ``TAGS + (t - TAGS) mod (TAGS / 2)``, each
    a float32 exactly (which holds no two consecutive integers past 2^24 apart). What the device reads of t stays:
    the tag is 1 at the first step alone (momentum's), and two consecutive steps' tags differ (whether one ran)."""
    return t if t < TAGS else TAGS + (t - TAGS) % (TAGS // 2)


def untag(done, enqueued):
    """The step count whose ``tag`` is ``done``: of the ``enqueued`` steps, the last that has it; right where fewer
    than ``TAGS // 2`` steps enqueued did not run (a network reads the count at least every ``TAGS // 4`` steps)."""
    return done if done < TAGS else enqueued - (tag(enqueued) - done) % (TAGS // 2)


def _set_elements(set_element, array, values):
    for index, value in values:
        set_element(array, index, value)
