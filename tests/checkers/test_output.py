"""Every output format over the same results."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from checkers.output import render, render_github, render_sarif, render_text
from checkers.results import Result, Rule, Status, exit_code

RULE = Rule("XX001", "demo-rule", "a demo rule")
FINDING = RULE.finding("50% of lines, a: b, c\nsecond line", "dir/a,b.py", 7, "do the thing")


def _results() -> list[Result]:
    return [
        Result.judge("alpha", [FINDING], 3, "files", "OK: unused"),
        Result.judge("beta", [], 5, "commits", "OK: 5 commits"),
        Result.skip("gamma", "no remote refs"),
        Result.error("delta", "shallow clone", "git fetch --unshallow"),
    ]


def test_judge_refuses_to_pass_on_nothing_examined():
    r = Result.judge("alpha", [], 0, "commits", "OK: all good")
    assert (r.status, r.summary) == (Status.ERROR, "examined 0 commits: nothing was verified")
    assert Result.judge("alpha", [], 2, "commits", "OK: all good").status == Status.PASS


def test_exit_codes():
    ok, fail, skip, err = _results()[1], _results()[0], _results()[2], _results()[3]
    assert exit_code([ok]) == 0 and exit_code([ok, skip]) == 0
    assert exit_code([ok, skip], fail_on_skip=True) == 1
    assert exit_code([ok, fail]) == 1 and exit_code([fail, err]) == 3


def test_text_preflight_lines_and_verdict():
    results = _results()
    for r in results:
        r.duration_s = 0.5
    text = render_text(results, preflight=True)
    lines = text.splitlines()
    assert lines[:4] == [
        "FAIL  alpha   0.50s  1 finding in 3 files",
        "ok    beta    0.50s  OK: 5 commits",
        "SKIP  gamma   0.50s  no remote refs",
        "ERROR delta   0.50s  shallow clone",
    ]
    assert "dir/a,b.py:7: XX001 demo-rule: 50% of lines, a: b, c\\x0asecond line" in lines  # one line per finding
    assert lines[-1] == ("NOT green: 1 failed, 1 could not verify, 1 skipped of 4 gates (2.00s)")
    green = render_text([results[1]], preflight=True).splitlines()[-1]
    assert green == "All gates green (1 gates, 0.50s)"


def test_json_is_versioned_and_round_trips():
    doc = json.loads(render("json", _results(), [RULE]))
    assert doc["schema"] == "rowgate.results/1" and doc["exit_code"] == 3
    assert [r["status"] for r in doc["results"]] == ["fail", "pass", "skip", "error"]
    assert doc["results"][0]["findings"][0] == {
        "rule": "XX001",
        "name": "demo-rule",
        "message": FINDING.message,
        "path": "dir/a,b.py",
        "line": 7,
        "hint": "do the thing",
        "commit": None,
    }
    assert set(doc["results"][0]) == {
        "check",
        "status",
        "summary",
        "examined",
        "unit",
        "findings",
        "details",
        "hint",
        "duration_s",
    }


def test_github_annotations_escape_properties_and_data():
    lines = render_github(_results()).splitlines()
    assert lines[0] == (
        "::error file=dir/a%2Cb.py,line=7,title=XX001 demo-rule::"
        "50%25 of lines, a: b, c%0Asecond line%0A(fix: do the thing)"
    )
    assert lines[-2] == "::warning title=gamma::skipped: no remote refs"
    assert lines[-1] == "::error title=delta::shallow clone (fix: git fetch --unshallow)"


def test_sarif_has_the_required_2_1_0_fields():
    doc = json.loads(render_sarif(_results(), [RULE]))
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-2.1.0.json")
    [run] = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "rowgate" and driver["rules"][0]["id"] == "XX001"
    [res] = run["results"]
    # required by SARIF 2.1.0: message.text on every result; ruleIndex points into driver.rules
    assert res["message"]["text"].startswith("50% of lines")
    assert driver["rules"][res["ruleIndex"]]["id"] == res["ruleId"] == "XX001"
    loc = res["locations"][0]["physicalLocation"]
    assert loc == {"artifactLocation": {"uri": "dir/a,b.py", "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 7}}
    assert run["invocations"][0]["executionSuccessful"] is False


def test_junit_has_one_case_per_gate_passes_included():
    root = ET.fromstring(render("junit", _results(), [RULE]))
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "4",
        "1",
        "1",
        "1",
    )
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["alpha", "beta", "gamma", "delta"]
    assert cases["alpha"].find("failure").text.startswith("dir/a,b.py:7: XX001 demo-rule")
    assert cases["beta"].find("failure") is None and cases["gamma"].find("skipped") is not None
    assert cases["delta"].find("error").get("message") == "shallow clone"
