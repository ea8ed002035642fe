"""The ``symjac`` command line and sweeps."""

from symjac.cli._main import main as main
