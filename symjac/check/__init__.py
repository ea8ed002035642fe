"""What every verifier, and every operator's verification rules, share: rounding (dtypes, unit
roundoff, γ, ULPs), findings and reports, the guarded call of code under test. Imports only
:mod:`symjac.run` and the base modules (CONTRIBUTING.md, "The stack")."""
