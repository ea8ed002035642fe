"""Pooling: spec → geometry → operator (``_ops``: one definition per mode, its SymPy window templates)
→ exact Jacobian, VJP, JVP → NumPy lowering → window graph."""

#: The size budget of one resolved geometry: batch x windows x stored kernel slots (an
#: upper bound of the Jacobian's nonzeros), and batch x input cells. ``resolve``
#: refuses larger problems up front with a SpecError instead of allocating
#: gigabytes; raise it here (or per call: ``resolve(..., max_nnz=...)``) for bigger runs.
MAX_NNZ = 2**26
#: How a too-large shape's message says to raise the budget: the Python settings, or (set by
#: the command line for its run) its ``--max-nnz`` option.
BUDGET_HINT = "resolve(..., max_nnz=...) or symjac.pool.MAX_NNZ"
