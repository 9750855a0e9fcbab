"""``leapfrog-bench`` (``command``: the command line), with its measurements (``measure``), report
(``report``), plot (``plot``), data-parallel part (``parallel``), the memory-traffic model (``traffic``),
the PyTorch anchor (``torch_anchor``), the count of an eager step's calls into CuPy (``call_count``),
and the commands of ``--model rnn`` (``rnn``) and ``--model dag`` (``dag``).
"""
