"""``leapfrog-bench`` (``command``: the command line): one runner (``runner``: rows timed in turn, refusals,
progress (``progress``), table, JSONL and JSON) over a suite per network, ``mlp`` (its options and table; its
measurements ``measure``, plot ``plot`` and bytes floor ``traffic``) and ``rnn``; PyTorch's steps of the same
networks (``torch_anchor``) beside them. The studies beside that job, the DAG's benchmark among them
(profiling/dag_bench.py), are scripts of profiling/ (docs/training.md).
"""
