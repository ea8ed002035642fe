"""Verifiers built on :mod:`symjac.check`: pools, losses, loss families."""
