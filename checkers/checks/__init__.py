"""One package per check, `checkers/checks/<name>/`, owning the helpers only it uses; the record checks
share `checkers/checks/records/`, one module each. Each check module states its invariant in its first
docstring line and exposes:

- ``ID``: the check id (``pr-size``), also its hook id ``rowgate-<ID>`` and its registry key;
- ``RULES``: a tuple of ``checkers.results.Rule`` with stable ids and kebab-case names;
- ``add_arguments(parser)``: optional, its own command-line options;
- ``run(ctx, args) -> Result``: the thin adapter that loads inputs through the context and calls
  the check's pure function(s), which take loaded inputs and return findings.
"""
