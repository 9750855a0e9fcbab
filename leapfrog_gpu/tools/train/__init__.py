"""``leapfrog-train`` (``command``), its options (``options``, ``values``), its models (``models``), what it adds
to the library's training loop (``loop``), checkpoints (``checkpoint``), the test metric in words and the divergence
rule (``metrics``), the estimate before a run (``estimate``), profiler windows (``profiling``), what a run refuses
together (``refusals``) and what a resumed run takes from its checkpoint (``resuming``)."""
