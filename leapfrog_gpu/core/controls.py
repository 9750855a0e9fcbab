"""The controls of an SGD step, in device memory: one ``Controls`` per network, whichever the network."""


class Controls:
    """``array`` = [eta / B, refusal] in the network's dtype, on its device.

    The update kernels read them when they run, not when they are enqueued, so that a captured graph
    reads the current ones. The refusal code: 0 means update. A network built with ``check_finite=True``
    checks its gradients after the join, deepest first, and the first one that holds a NaN or an Inf
    leaves its code (``code(name)``, one per gradient name, e.g. ``"nabla_w[3]"``); a code already there
    is kept. While the code is not 0 every update kernel writes nothing, in this step and in those
    enqueued behind it, until the network's ``synchronize()`` reads it (``refused()``), raises
    ``FloatingPointError`` naming the gradient and clears it.
    """

    def __init__(self, backend, dtype):
        self.backend = backend
        self.array = backend.xp.zeros(2, dtype=dtype)
        self._names = []

    def set_rate(self, rate):
        """Enqueue ``array[0] = rate`` (eta / B) on the main stream."""
        backend = self.backend
        backend.launch(backend.main, "eta / B", backend.ops.set_element, self.array, 0, rate)

    def code(self, name):
        """The refusal code of the gradient called ``name``: a number >= 1, the same for the network's life."""
        if name not in self._names:
            self._names.append(name)
        return self._names.index(name) + 1

    def refused(self):
        """The name of the gradient whose check refused an update, or None; read on the host, so call it
        once the steps have run (``synchronize()``)."""
        code = int(self.array[1])
        return self._names[code - 1] if code else None

    def clear(self):
        """Enqueue ``array[1] = 0`` on the main stream: the steps enqueued after it update again."""
        backend = self.backend
        backend.launch(backend.main, "clear refusal", backend.ops.set_element, self.array, 1, 0)
