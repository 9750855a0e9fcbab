"""``leapfrog-bench`` (``command``): one runner (``runner``: rows timed in turn, refusals, ``progress``, table,
JSONL, JSON) over a suite per network, ``mlp`` (its ``measure``, ``plot`` and bytes floor ``traffic``) and ``rnn``,
PyTorch's steps of the same networks (``torch_anchor``) beside them. The studies beside that job, the DAG's
benchmark among them, are scripts of profiling/ (docs/training.md)."""
