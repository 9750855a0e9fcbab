"""``leapfrog-bench`` (``command``: the command line): one runner (``runner``: rows timed in turn, refusals,
progress (``progress``), table, JSONL and JSON) over a suite per network, ``mlp`` (its measurements ``measure``,
report ``report``, plot ``plot`` and bytes floor ``traffic``), ``rnn`` and ``dag``; PyTorch's anchors
(``torch_anchor``) beside them. The studies beside that job are scripts of profiling/ (docs/training.md).
"""
