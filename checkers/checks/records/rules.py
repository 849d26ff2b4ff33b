"""The agent-record check's rules, here because the helpers that find their violations (rowreqs, issuerefs)
return its findings directly."""

from __future__ import annotations

from ...results import Rule

RULES = (
    Rule("AR001", "record-invalid", "a row, claim, issue record or ledger entry does not validate"),
    Rule("AR002", "row-unknown-area", "a row's area is not one of the configured areas"),
    Rule(
        "AR003",
        "record-dangling-reference",
        "a record points at a spec, claim, row, anchor, ledger entry, "
        "issue or commit that does not exist or does not point back",
    ),
    Rule("AR004", "row-state-unmet", "a row lacks what its state requires (rows.states in the config)"),
    Rule("AR005", "issue-ref-unfiled", "a referenced issue has no intake record under the row the body names"),
    Rule("AR006", "issue-ref-not-in-spec", "a referenced issue's row spec does not list it"),
    Rule("AR007", "issue-ref-without-row", "a commit or PR body references an issue but names no row"),
    Rule("AR008", "rollup-drift", "a summary table's counts differ from the detailed rows' states (record.rollups)"),
    Rule(
        "AR009",
        "ledger-record-oversize",
        "a ledger record file is over record.ledger_size_cap bytes, or an exemption from the cap is not needed",
    ),
)
R_INVALID, R_AREA, R_DANGLING, R_STATE, R_UNFILED, R_SPEC, R_NOROW, R_ROLLUP, R_SIZE = RULES
