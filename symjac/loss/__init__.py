"""Losses: spec → SymPy templates (loss, derivative, rounding depth) → exact evaluation."""
