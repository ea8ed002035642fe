"""``symjac conform``: ``_plan`` (which adapter, its configurations as jobs, the budget's order, the
dtypes) → ``_run`` (one cell, the table) → ``_result``; ``_loss`` (loss cells), ``_transforms`` and
``_vmap`` (the derivative a cell checks), ``reproducers/`` (the scripts written for a failing cell)."""
