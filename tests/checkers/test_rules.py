"""The record checks' rule table: ids unique, names unique, and each rule the helpers report is listed."""

from __future__ import annotations

from checkers.checks.records.rules import R_ROLLUP, R_SIZE, RULES


def test_rule_ids_and_names_are_unique_and_the_rollup_rule_is_listed():
    ids = [r.id for r in RULES]
    names = [r.name for r in RULES]
    assert len(set(ids)) == len(ids) and len(set(names)) == len(names)
    assert (R_ROLLUP.id, R_ROLLUP.name) == ("AR008", "rollup-drift") and R_ROLLUP in RULES


def test_the_size_rule_is_listed_last_under_its_own_id():
    assert RULES[-1] is R_SIZE and (R_SIZE.id, R_SIZE.name) == ("AR009", "ledger-record-oversize")
