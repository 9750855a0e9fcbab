"""Launch shapes of every kernel in ``kernels/``, computed next to the asserts that check them.

Pure Python, so the CPU harness and the CuPy launchers use the same numbers. Each function returns
``(grid, block, options)``: CUDA grid and block as 3-tuples, and the ``-D`` compile options the kernel
must be built with for that block shape. ``compile_options`` adds the options every module is built
with, and ``modules`` lists every (file, options) the launchers build, for the compile check.
"""

NVRTC_OPTIONS = ("-std=c++17",)
CUPY_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")
"""What ``cupy.RawModule`` adds itself to the options of every module it compiles with NVRTC, besides
-arch and its include paths (CuPy 14, ``cupy/cuda/compiler.py``). The launchers do not pass them; the
compile check adds them, so that it compiles exactly what CuPy will."""

MAX_GRID_Y = 65535
"""CUDA's limit on gridDim.y (and on gridDim.z). outer_launch, rank_update_launch in tiles and chain_launch at B > 1
put a layer's rows of blocks on grid y, at most this many, and past them on grid z too (``rows_grid``): block (y, z)
takes row of blocks y + gridDim.y z, and the last z's blocks past the layer return at once. The rank update in rows
keeps grid y to this many, each block taking more octets. Tests lower it, so that small layers reach grid z."""
ELEMENTWISE_BLOCK = 256
ELEMENTWISE_MAX_GRID = 132 * 32  # grid-stride loop beyond this: 32 blocks per H200 SM
OUTER_BLOCK = (32, 8)
BIAS_ROWS, BIAS_UNROLL = 8, 4  # bias_sum: a warp per row, 8 rows a block; 4 loads a lane before their sum
# The rank-B update in tiles (any B): 128 threads a block, each 8 x 8 sums over half the batch (16 shared loads for
# 64 FMAs), 64 x 64 a block; the batch in chunks of 8 samples (4 in float64), 2 of them in shared memory, the copies
# of the next in flight while the block computes on one.
RANK_THREADS, RANK_CHUNK, RANK_STAGES = 128, 8, 2
# In rows (B up to RANK_ROWS_PARTS[-1] x 64 bytes of samples: 64 in float32): 256 threads a block, each 8 columns
# of a by 16 samples (8 doubles) in registers, 1, 2 or 4 of them for a column's samples (the fewest that hold the
# batch), 256 / that many columns a block; its 8 warps sum a row of nabla_w each, an octet of rows at a time, and
# store it while they sum the next. Each block takes RANK_ROWS_OCTETS_CHOICES octets, the most that still give
# RANK_MIN_BLOCKS blocks (so that the stores of an SM's octets overlap the sums of its next ones): at N = 1024, 8
# octets of 128 columns at B = 32 (128 blocks, one an SM), 16 of 64 at B = 64.
RANK_ROWS_PARTS, RANK_ROWS_OCTETS_CHOICES, RANK_MIN_BLOCKS = (1, 2, 4), (32, 16, 8, 4, 2, 1), 128
# The chain at B > 1 (chain_gemm): 256 threads a block, each an 8-row register tile of 64 sums (float32) over its
# slice of m; a block covers GEMM_ROWS_CHOICES rows of the result and GEMM_COLUMNS_CHOICES groups of 8 floats (4
# doubles) of its columns. Every block reads all of its rows of w and all m rows of its columns of a_prev, so the
# grid re-reads from L2 about blocks x (rows + columns) x m elements: chain_launch takes the shape that re-reads
# least among those with GEMM_MIN_BLOCKS blocks (three quarters of an H100's or H200's SMs): at N = 1024, B = 32,
# 128 blocks of 16 rows and 16 columns; at N = 4096, 128 of 32 by 32. w comes in stages of 8 KB, GEMM_STAGES of
# them in shared memory (3 copies in flight while one is used: 24 KB an SM, above the 20 KB an H200 needs in
# flight at 4.3 TB/s and 0.6 us).
GEMM_ROWS_CHOICES, GEMM_COLUMNS_CHOICES, GEMM_MIN_BLOCKS, GEMM_THREADS, GEMM_STAGES = (8, 16, 32), (2, 4), 96, 256, 4
PLAIN_COPY = False
"""True: the kernels' copies into shared memory are plain loads and stores done at once (kernels/pipeline.h's
LEAPFROG_PLAIN_COPY), not asynchronous ones: the same kernels with nothing in flight."""
# The GEMVs of kernels/chain.cu, chosen on paper (not yet measured; profiling/kernels.py --gemv-blocks
# compares others). Forward: a warp per row, 16-byte loads, 8 of them a lane before their sum: 512
# contiguous bytes a warp a load, a 1024-wide float32 row in one round trip, 256 blocks at N = 1024.
# Backward: 8 columns a block (two 16-byte loads of a row, a whole sector), the rows shared by 128
# threads, 8 each loaded before their sum: one round trip at N = 1024, 128 blocks (512 at N = 4096).
FORWARD_GEMV_BLOCK = (32, 4)  # (lanes of a row: a warp, rows per block): forward_gemv
FORWARD_GEMV_UNROLL = 8
BACKWARD_GEMV_BLOCK = (8, 256)  # (columns per block, threads per block): backward_gemv
BACKWARD_GEMV_UNROLL = 8
# The gated cells' steps (kernels/gates.cu): a thread per (unit, sample), reading and writing every gate row of it.
GATES_BLOCK = 256
GATES_MAX_GRID = 132 * 16  # grid-stride loop beyond this: 16 blocks of 256 per H200 SM, 2048 threads


def elementwise_launch(size):
    """Grid-stride launch over ``size`` elements (kernels/elementwise.cu)."""
    assert size >= 1, size
    grid = min(-(-size // ELEMENTWISE_BLOCK), ELEMENTWISE_MAX_GRID)
    assert grid * ELEMENTWISE_BLOCK >= min(size, ELEMENTWISE_MAX_GRID * ELEMENTWISE_BLOCK)
    return (grid, 1, 1), (ELEMENTWISE_BLOCK, 1, 1), ()


def rows_grid(columns, row_blocks):
    """Grid ``(columns, Y, Z)`` for ``row_blocks`` rows of blocks: Z = ceil(row_blocks / MAX_GRID_Y) on grid z, Y =
    ceil(row_blocks / Z) on grid y, so that fewer than Z of the Y Z rows are past the layer. The kernel's row of
    blocks is blockIdx.y + Y blockIdx.z; those past ``row_blocks - 1`` have nothing to do and return at once."""
    assert row_blocks >= 1, f"a layer of at least one row of blocks; got {row_blocks}"
    z = -(-row_blocks // MAX_GRID_Y)
    y = -(-row_blocks // z)
    assert 1 <= columns < 2**31 and y <= 65535 and z <= 65535 and y * z >= row_blocks, (columns, row_blocks, y, z)
    return columns, y, z


def outer_launch(n, m):
    """One thread per element of the (n, m) outer product (kernels/nabla_w.cu, ``outer_*``): the ceil(n /
    OUTER_BLOCK[1]) rows of blocks on grid y, then z (``rows_grid``)."""
    bx, by = OUTER_BLOCK
    grid = rows_grid(-(-m // bx), -(-n // by))
    assert grid[0] * bx >= m, (n, m, grid)
    return grid, (bx, by, 1), (f"-DOUTER_BX={bx}", f"-DOUTER_BY={by}")


def rank_update_launch(n, m, batch, itemsize):
    """The rank-B update of an (n, m) gradient over a batch of ``batch`` elements of ``itemsize`` bytes
    (``rank_update_*``): in rows where ``rank_parts`` holds the batch (block (H, 32 / H, 8): H threads for a
    column's samples, 256 / H columns a block, ``rank_octets`` octets of rows each, more where MAX_GRID_Y rows of
    blocks would not hold them: the kernel deals out ceil(octets / gridDim.y) a block, on grid y alone), else in
    tiles (a block of RANK_THREADS threads per 64-square tile, 8 x 8 sums a thread over half the batch, staged
    RANK_CHUNK samples at a time, RANK_STAGES chunks; the rows of tiles on grid y, then z: ``rows_grid``)."""
    parts = rank_parts(batch, itemsize)
    if parts is None:
        edge = 64
        grid = rows_grid(-(-m // edge), -(-n // edge))
        assert grid[0] * edge >= m, (n, m, grid)
        return grid, (RANK_THREADS, 1, 1), rank_options(None)
    columns, octets = 256 // parts, -(-n // 8)
    rows = -(-octets // rank_octets(n, m, batch, itemsize))
    if rows > MAX_GRID_Y:  # more octets a block: as few rows of blocks as take ceil(octets / MAX_GRID_Y) each
        rows = -(-octets // -(-octets // MAX_GRID_Y))
    grid = (-(-m // columns), rows, 1)
    assert grid[0] * columns >= m and grid[0] < 2**31 and 1 <= grid[1] <= 65535, (n, m, grid)
    return grid, (parts, 32 // parts, 8), rank_options(parts)


def rank_parts(batch, itemsize):
    """H, the threads of the rank update in rows that share a column's samples: the fewest of RANK_ROWS_PARTS whose
    64 bytes of samples each hold the batch; None where none does (the update in tiles)."""
    return next((parts for parts in RANK_ROWS_PARTS if parts * 64 // itemsize >= batch), None)


def rank_octets(n, m, batch, itemsize):
    """Octets of rows a block of the rank update in rows takes: the most of RANK_ROWS_OCTETS_CHOICES that still give
    RANK_MIN_BLOCKS blocks, else one."""
    across, octets = -(-m // (256 // rank_parts(batch, itemsize))), -(-n // 8)
    return next((per for per in RANK_ROWS_OCTETS_CHOICES if across * -(-octets // per) >= RANK_MIN_BLOCKS), 1)


def rank_options(parts):
    """The ``-D`` options of nabla_w.cu's rank-B update in rows, ``parts`` threads for a column's samples, or in
    tiles (``parts`` None)."""
    assert RANK_THREADS == 128 and RANK_CHUNK % 4 == 0 and RANK_STAGES >= 2 and set(RANK_ROWS_PARTS) <= {1, 2, 4}, \
        "rank_tiles' layout: 2 x 64 threads, chunks of whole 16-byte pieces, a chunk in flight; rank_rows': 1, 2 " \
        "or 4 threads a column"
    if parts is not None:
        return (f"-DRANK_PARTS={parts}", *copy_options())
    return (f"-DRANK_CHUNK={RANK_CHUNK}", f"-DRANK_STAGES={RANK_STAGES}", *copy_options())


def gates_launch(n, batch):
    """Grid-stride launch over the ``n`` * ``batch`` units of a gated cell's step (kernels/gates.cu); the block
    is the compile-time GATES_BLOCK, which the kernels' index arithmetic uses."""
    size = n * batch
    assert size >= 1, (n, batch)
    assert GATES_BLOCK % 32 == 0 and GATES_BLOCK <= 1024, GATES_BLOCK
    grid = min(-(-size // GATES_BLOCK), GATES_MAX_GRID)
    assert 1 <= grid < 2**31 and grid * GATES_BLOCK >= min(size, GATES_MAX_GRID * GATES_BLOCK), (n, batch, grid)
    return (grid, 1, 1), (GATES_BLOCK, 1, 1), (f"-DGATES_BLOCK={GATES_BLOCK}",)


def check_finite_launch(size):
    """Grid-stride launch of check_finite (kernels/elementwise.cu): a thread per 16 bytes, 4 elements
    (float32; two rounds of 2 in float64), as ``elementwise_launch`` over ``ceil(size / 4)``."""
    return elementwise_launch(-(-size // 4))


def bias_launch(n):
    """A warp per row of the (n, B) error (kernels/nabla_b.cu)."""
    grid = (-(-n // BIAS_ROWS), 1, 1)
    assert grid[0] * BIAS_ROWS >= n and grid[0] < 2**31, (n, grid)
    return grid, (32, BIAS_ROWS, 1), (f"-DBIAS_ROWS={BIAS_ROWS}", f"-DBIAS_UNROLL={BIAS_UNROLL}")


def chain_launch(kind, n, batch, itemsize):
    """``kind`` "forward" (2)(3) or "backward" (5) of kernels/chain.cu, for a layer of ``n`` outputs (rows
    of z, or of delta), a batch of ``batch`` and elements of ``itemsize`` bytes: a GEMV at B = 1 (both
    GEMVs share one module, so one set of options), else a block of 256 threads for the rows and columns of
    ``gemm_shape``, its rows of blocks on grid y, then z (``rows_grid``)."""
    assert kind in ("forward", "backward"), kind
    if batch == 1:
        (lanes, rows), (cols, threads) = FORWARD_GEMV_BLOCK, BACKWARD_GEMV_BLOCK
        assert lanes == 32 and lanes * rows <= 1024, (
            f"forward GEMV block of {lanes} lanes x {rows} rows: a warp (32 lanes) per row, its lanes' sums meet in "
            "shuffles; at most 1024 threads")
        # Backward: the threads across a block's columns (cols / 4 in float32, cols / 2 in float64) divide
        # a warp evenly, and every warp is whole, for the shuffles.
        assert cols % 4 == 0 and 32 % (cols // 2) == 0 and threads % 32 == 0 and threads <= 1024, (
            f"backward GEMV block of {cols} columns and {threads} threads: the columns a multiple of 4 whose "
            "half divides 32, the threads whole warps, at most 1024")
        per_block, block = (rows, (lanes, rows, 1)) if kind == "forward" else (cols, (threads, 1, 1))
        grid = (-(-n // per_block), 1, 1)
        assert grid[0] * per_block >= n and grid[0] < 2**31, (n, grid)
        return grid, block, (f"-DFWD_ROWS={rows}", f"-DFWD_UNROLL={FORWARD_GEMV_UNROLL}", f"-DBWD_THREADS={threads}",
                             f"-DBWD_COLS={cols}", f"-DBWD_UNROLL={BACKWARD_GEMV_UNROLL}")
    assert itemsize in (4, 8), itemsize
    rows, groups = gemm_shape(n, batch, itemsize)
    columns = groups * 32 // itemsize
    grid = rows_grid(-(-batch // columns), -(-n // rows))
    assert GEMM_THREADS == 256 and GEMM_STAGES >= 2, "chain_gemm's layout: 256 threads; a stage in flight at least"
    assert grid[0] * columns >= batch, (n, batch, grid)
    return grid, (GEMM_THREADS, 1, 1), gemm_options(rows, groups)


def gemm_shape(n, batch, itemsize):
    """``(rows, column groups)`` of a B > 1 chain block (``GEMM_ROWS_CHOICES``, ``GEMM_COLUMNS_CHOICES``; a group
    is 32 bytes of a row of the batch): of the shapes that give ``GEMM_MIN_BLOCKS`` blocks, the one whose blocks
    re-read the fewest elements (blocks x (rows + columns)), then the one with the fewer blocks; else the one
    with the most blocks."""
    assert all(rows % 8 == 0 for rows in GEMM_ROWS_CHOICES) and set(GEMM_COLUMNS_CHOICES) <= {2, 4}, \
        "chain_gemm's tiles: 8 rows; 2 or 4 groups of columns"
    shapes = []
    for rows in GEMM_ROWS_CHOICES:
        for groups in GEMM_COLUMNS_CHOICES:
            columns = groups * 32 // itemsize
            blocks = -(-n // rows) * -(-batch // columns)
            enough = blocks >= GEMM_MIN_BLOCKS
            shapes.append((not enough, blocks * (rows + columns) if enough else -blocks, blocks, (rows, groups)))
    return min(shapes)[3]


def gemm_options(rows, groups):
    """The ``-D`` options of chain.cu's B > 1 kernels for blocks of ``rows`` rows and ``groups`` groups of columns."""
    return (f"-DGEMM_ROWS={rows}", f"-DGEMM_COLUMNS={groups}", f"-DGEMM_THREADS={GEMM_THREADS}",
            f"-DGEMM_STAGES={GEMM_STAGES}", *copy_options())


def copy_options():
    """The ``-D`` option of ``PLAIN_COPY`` for the kernels that stage through kernels/pipeline.h."""
    return ("-DLEAPFROG_PLAIN_COPY",) if PLAIN_COPY else ()


def compile_options(defines):
    """The NVRTC options of a module built with the ``-D`` options ``defines`` of a launch above."""
    return (*NVRTC_OPTIONS, *defines)


def modules():
    """Every ``(file, compile options)`` pair the launchers in ``ops_cuda`` may build."""
    return [
        ("elementwise.cu", compile_options(elementwise_launch(1)[2])),
        ("nabla_w.cu", compile_options(outer_launch(1, 1)[2])),
        *(("nabla_w.cu", compile_options(rank_options(parts))) for parts in (*RANK_ROWS_PARTS, None)),
        ("nabla_b.cu", compile_options(bias_launch(1)[2])),
        ("chain.cu", compile_options(chain_launch("forward", 1, 1, 4)[2])),
        *(("chain.cu", compile_options(gemm_options(rows, groups)))
          for rows in GEMM_ROWS_CHOICES for groups in GEMM_COLUMNS_CHOICES),
        ("gates.cu", compile_options(gates_launch(1, 1)[2])),
    ]
