"""``symjac conform``: ``_plan`` (which adapter, its configurations as jobs, the budget's order, the
dtypes) → ``_run`` (one cell, the table) → ``_result``; ``_loss`` (loss cells), ``_transforms`` (the
derivative a cell checks; a ``vmap`` cell through :mod:`symjac.verifiers.pool._batched`), ``reproducers/``
(the scripts written for a failing cell)."""
