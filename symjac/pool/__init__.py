"""Pooling: spec → geometry → SymPy window templates → exact Jacobian → NumPy lowering → window graph."""
