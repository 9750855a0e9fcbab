"""The Jacobian blocks a layer gives (``layers.Layer.jacobian``): J_i = d a / d input_i of every sample of a batch.

The solvers of ``dag.schedules`` and ``dag.forward`` read them (docs/naumov.md):

``DenseBlock``  (B, n, n_i), one matrix per sample;
``Diagonal``    (n, B), diag(d) per sample (elementwise layers, ``Add``);
``Factored``    diag(d) w with d (n, B) and a shared w (n, n_i): the ``Dense`` layer's diag(sigma') w,
                whose transpose w^T diag(sigma') is Naumov's block; w stays out of per-sample storage;
``Slice``       rows [offset, offset + n_i) of the identity (``Concat``).

Every block multiplies (``matvec``: J v, ``rmatvec``: J^T u, both (., B)) and materializes (``dense``);
``from_products`` builds a ``DenseBlock`` from a layer's products, one per output unit.
"""


class Block:
    """The Jacobian of one sample batch: ``shape`` (n_out, n_in), ``batch`` B."""

    def matvec(self, v):
        """J v for every sample: (n_in, B) -> (n_out, B)."""
        raise NotImplementedError

    def rmatvec(self, u):
        """J^T u for every sample: (n_out, B) -> (n_in, B)."""
        raise NotImplementedError

    def dense(self):
        """The blocks as one (B, n_out, n_in) array."""
        raise NotImplementedError


class DenseBlock(Block):
    """One dense (n_out, n_in) matrix per sample, stored (B, n_out, n_in)."""

    def __init__(self, xp, matrices):
        self.xp, self.matrices = xp, matrices
        self.batch, *shape = matrices.shape
        self.shape = tuple(shape)

    def matvec(self, v):
        return self.xp.matmul(self.matrices, v.T[:, :, None])[:, :, 0].T

    def rmatvec(self, u):
        return self.xp.matmul(self.matrices.transpose(0, 2, 1), u.T[:, :, None])[:, :, 0].T

    def dense(self):
        return self.matrices


class Diagonal(Block):
    """diag(d) per sample, d (n, B)."""

    def __init__(self, xp, d):
        self.xp, self.d = xp, d
        self.shape, self.batch = (d.shape[0], d.shape[0]), d.shape[1]

    def matvec(self, v):
        return self.d * v

    rmatvec = matvec

    def dense(self):
        n, B = self.d.shape
        out = self.xp.zeros((B, n, n), dtype=self.d.dtype)
        out.reshape(B, n * n)[:, :: n + 1] = self.d.T
        return out


class Factored(Block):
    """diag(d) w with d (n, B) per sample and w (n, m) shared: the Jacobian of ``Dense``."""

    def __init__(self, xp, d, w):
        self.xp, self.d, self.w = xp, d, w
        self.shape, self.batch = w.shape, d.shape[1]

    def matvec(self, v):
        return self.d * self.xp.matmul(self.w, v)

    def rmatvec(self, u):
        return self.xp.matmul(self.w.T, self.d * u)

    def dense(self):
        return self.d.T[:, :, None] * self.w[None]


class Slice(Block):
    """Rows [offset, offset + n_in) of the (n_out, n_out) identity, the same for every sample."""

    def __init__(self, xp, n_out, offset, n_in, batch, dtype):
        self.xp, self.offset, self.dtype = xp, offset, dtype
        self.shape, self.batch = (n_out, n_in), batch

    def matvec(self, v):
        out = self.xp.zeros((self.shape[0], self.batch), dtype=v.dtype)
        out[self.offset:self.offset + self.shape[1]] = v
        return out

    def rmatvec(self, u):
        return u[self.offset:self.offset + self.shape[1]]

    def dense(self):
        n, m = self.shape
        out = self.xp.zeros((self.batch, n, m), dtype=self.dtype)
        for j in range(m):
            out[:, self.offset + j, j] = 1
        return out


def from_products(xp, rproduct, n_out, like):
    """A ``DenseBlock`` from u -> J^T u (n_out, B) -> (n_in, B): its rows, one unit vector at a time."""
    n_in, B = like.shape
    matrices = xp.zeros((B, n_out, n_in), dtype=like.dtype)
    for r in range(n_out):
        unit = xp.zeros((n_out, B), dtype=like.dtype)
        unit[r] = 1
        matrices[:, r, :] = rproduct(unit).T
    return DenseBlock(xp, matrices)
