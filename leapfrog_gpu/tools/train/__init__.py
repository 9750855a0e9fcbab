"""``leapfrog-train`` (``command``: the command and its exit statuses), with its options (``options``),
the models it trains and their data and networks (``models``), its one training loop (``loop``), data
loaders (``data``) and the recurrent network's tasks (``rnn_tasks``), checkpoints (``checkpoint``),
metrics (``metrics``) and profiler windows (``profiling``).
"""
