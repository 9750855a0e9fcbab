"""``leapfrog-bench`` (``command``: the command line): one runner (``runner``: rows timed in turn, refusals,
progress (``progress``), table, JSONL and JSON) over a suite per network, ``mlp`` (its options and table; its
measurements ``measure``, plot ``plot`` and bytes floor ``traffic``), ``rnn`` and ``dag``; PyTorch's steps of
the same networks (``torch_anchor``) beside them. The studies beside that job are scripts of profiling/
(docs/training.md).
"""
