"""``leapfrog-train`` (``command``: the command and its exit statuses), with its options (``options``),
training loop (``loop``), the recurrent network's command (``rnn``) and tasks (``rnn_tasks``), data
loaders (``data``), checkpoints (``checkpoint``), metrics (``metrics``), profiler windows
(``profiling``) and the residual network of ``--model resmlp`` (``resmlp``).
"""
