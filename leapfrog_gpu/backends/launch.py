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

ELEMENTWISE_BLOCK = 256
ELEMENTWISE_MAX_GRID = 132 * 32  # grid-stride loop beyond this: 32 blocks per H200 SM
OUTER_BLOCK = (32, 8)
BIAS_ROWS, BIAS_UNROLL = 8, 4  # bias_sum: a warp per row, 8 rows a block; 4 loads a lane before their sum
TILES = (16, 32)
# The GEMVs of kernels/chain.cu, chosen on paper (not yet measured; profiling/kernels.py --gemv-blocks
# compares others). Forward: a warp per row, 16-byte loads, 8 of them a lane before their sum: 512
# contiguous bytes a warp a load, a 1024-wide float32 row in one round trip, 256 blocks at N = 1024.
# Backward: 8 columns a block (two 16-byte loads of a row, a whole sector), the rows shared by 128
# threads, 8 each loaded before their sum: one round trip at N = 1024, 128 blocks (512 at N = 4096).
FORWARD_GEMV_BLOCK = (32, 4)  # (lanes of a row: a warp, rows per block): forward_gemv
FORWARD_GEMV_UNROLL = 8
BACKWARD_GEMV_BLOCK = (8, 256)  # (columns per block, threads per block): backward_gemv
BACKWARD_GEMV_UNROLL = 8


def elementwise_launch(size):
    """Grid-stride launch over ``size`` elements (kernels/elementwise.cu)."""
    assert size >= 1, size
    grid = min(-(-size // ELEMENTWISE_BLOCK), ELEMENTWISE_MAX_GRID)
    assert grid * ELEMENTWISE_BLOCK >= min(size, ELEMENTWISE_MAX_GRID * ELEMENTWISE_BLOCK)
    return (grid, 1, 1), (ELEMENTWISE_BLOCK, 1, 1), ()


def outer_launch(n, m):
    """One thread per element of the (n, m) outer product (kernels/nabla_w.cu, ``outer_*``)."""
    bx, by = OUTER_BLOCK
    grid = (-(-m // bx), -(-n // by), 1)
    assert grid[0] * bx >= m and grid[1] * by >= n and grid[1] <= 65535, (n, m, grid)
    return grid, (bx, by, 1), (f"-DOUTER_BX={bx}", f"-DOUTER_BY={by}")


def choose_tile(n, m):
    """Tile edge of a tiled kernel with an (n, m) result (the rank-B update; the chain at B > 1, with
    m = B): 32 once both sides fill eight tiles of 32, else 16."""
    return 32 if min(n, m) >= 8 * 32 else 16


def rank_update_launch(n, m, tile=None):
    """A (tile, tile) block per output tile of the (n, m) gradient (``rank_update_*``)."""
    tile = choose_tile(n, m) if tile is None else tile
    assert tile in TILES, tile
    grid = (-(-m // tile), -(-n // tile), 1)
    assert grid[0] * tile >= m and grid[1] * tile >= n and grid[1] <= 65535, (n, m, grid)
    return grid, (tile, tile, 1), (f"-DTILE={tile}",)


def check_finite_launch(size):
    """Grid-stride launch of check_finite (kernels/elementwise.cu): a thread per 16 bytes, 4 elements
    (float32; two rounds of 2 in float64), as ``elementwise_launch`` over ``ceil(size / 4)``."""
    return elementwise_launch(-(-size // 4))


def bias_launch(n):
    """A warp per row of the (n, B) error (kernels/nabla_b.cu)."""
    grid = (-(-n // BIAS_ROWS), 1, 1)
    assert grid[0] * BIAS_ROWS >= n and grid[0] < 2**31, (n, grid)
    return grid, (32, BIAS_ROWS, 1), (f"-DBIAS_ROWS={BIAS_ROWS}", f"-DBIAS_UNROLL={BIAS_UNROLL}")


def chain_launch(kind, n, batch, tile=None):
    """``kind`` "forward" (2)(3) or "backward" (5) of kernels/chain.cu, for a layer of ``n`` outputs (rows
    of z, or of delta) and a batch of ``batch``: a GEMV at B = 1 (both GEMVs share one module, so one set
    of options), else a (tile, tile) block per output tile of the (n, B) result."""
    assert kind in ("forward", "backward"), kind
    if batch == 1:
        (lanes, rows), (cols, threads) = FORWARD_GEMV_BLOCK, BACKWARD_GEMV_BLOCK
        assert lanes == 32 and lanes * rows <= 1024, "a warp per row, its lanes' sums meet in shuffles"
        # Backward: the threads across a block's columns (cols / 4 in float32, cols / 2 in float64) divide
        # a warp evenly, and every warp is whole, for the shuffles.
        assert cols % 4 == 0 and 32 % (cols // 2) == 0 and threads % 32 == 0 and threads <= 1024, (cols, threads)
        per_block, block = (rows, (lanes, rows, 1)) if kind == "forward" else (cols, (threads, 1, 1))
        grid = (-(-n // per_block), 1, 1)
        assert grid[0] * per_block >= n and grid[0] < 2**31, (n, grid)
        return grid, block, (f"-DFWD_ROWS={rows}", f"-DFWD_UNROLL={FORWARD_GEMV_UNROLL}", f"-DBWD_THREADS={threads}",
                             f"-DBWD_COLS={cols}", f"-DBWD_UNROLL={BACKWARD_GEMV_UNROLL}")
    tile = choose_tile(n, batch) if tile is None else tile
    assert tile in TILES, tile
    grid = (-(-batch // tile), -(-n // tile), 1)
    assert grid[0] * tile >= batch and grid[1] * tile >= n and grid[1] <= 65535, (n, batch, grid)
    return grid, (tile, tile, 1), (f"-DTILE={tile}",)


def compile_options(defines):
    """The NVRTC options of a module built with the ``-D`` options ``defines`` of a launch above."""
    return (*NVRTC_OPTIONS, *defines)


def modules():
    """Every ``(file, compile options)`` pair the launchers in ``ops_cuda`` may build."""
    return [
        ("elementwise.cu", compile_options(elementwise_launch(1)[2])),
        ("nabla_w.cu", compile_options(outer_launch(1, 1)[2])),
        *[("nabla_w.cu", compile_options(rank_update_launch(1, 1, tile)[2])) for tile in TILES],
        ("nabla_b.cu", compile_options(bias_launch(1)[2])),
        ("chain.cu", compile_options(chain_launch("forward", 1, 1)[2])),
        *[("chain.cu", compile_options(chain_launch("forward", 1, 2, tile)[2])) for tile in TILES],
    ]
