"""``leapfrog-bench`` (``command``: the command line): one runner (``runner``: rows timed in turn,
refusals, progress, table, JSONL and JSON) over a suite per network, ``mlp`` (its measurements
``measure``, report ``report``, plot ``plot``, data-parallel part ``parallel`` and bytes floor
``traffic``), ``rnn`` and ``dag``; the PyTorch anchor (``torch_anchor``) beside them.
"""
