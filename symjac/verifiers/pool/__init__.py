"""Pooling verification: ``_verify`` (the public ``verify`` and its convention hint) → ``_run`` (one
verification: arguments, inputs, the coverage plan) → ``_verifier`` (the passes: ``_probe``,
``_diagnose``, ``_clarke_sum``, ``_fd``, ``_summary``), ``_inputs`` (the input families),
``_transforms`` (forward mode ``_jvp`` and second order ``_second``), ``_infer``."""
