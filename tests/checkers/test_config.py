"""Config loading: errors name the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkers.config import Config, json_schema, load_config
from checkers.yamlio import RecordError


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / ".agents").mkdir(parents=True, exist_ok=True)
    (tmp_path / ".agents" / "config.yaml").write_text(text)
    return tmp_path


def test_misspelled_key_names_file_line_and_field(tmp_path: Path):
    root = _write(tmp_path, "version: 1\nrows:\n  areas: [GOV]\n  activ_states: [ACTIVE]\n")
    with pytest.raises(RecordError) as exc:
        load_config(root)
    assert exc.value.lines() == [
        ".agents/config.yaml:4: rows.activ_states: unknown key (did you mean 'active_states'?)"
    ]


def test_wrong_type_names_the_field(tmp_path: Path):
    root = _write(tmp_path, "version: 1\nrows:\n  states:\n    READY: {spec: maybe}\n")
    with pytest.raises(RecordError) as exc:
        load_config(root)
    [line] = exc.value.lines()
    assert line.startswith(".agents/config.yaml:4: rows.states.READY.spec: Input should be a valid boolean")


def test_unknown_state_is_rejected(tmp_path: Path):
    root = _write(tmp_path, "version: 1\nrows:\n  states:\n    DONEISH: {}\n")
    with pytest.raises(RecordError) as exc:
        load_config(root)
    assert exc.value.lines()[0].startswith(".agents/config.yaml:3: rows.states: Value error, state 'DONEISH' is not")


def test_no_config_file_is_the_defaults(tmp_path: Path):
    assert load_config(tmp_path) == Config()


def test_a_named_config_that_is_missing_is_an_error(tmp_path: Path):
    with pytest.raises(RecordError) as exc:
        load_config(tmp_path, tmp_path / "nope.yaml")
    assert exc.value.lines() == ["nope.yaml: no such file or directory (the config named by --config)"]
    with pytest.raises(RecordError) as exc:
        load_config(tmp_path, env={"ROWGATE_CONFIG": str(tmp_path / "gone.yaml")})
    assert exc.value.lines() == ["gone.yaml: no such file or directory (the config named by $ROWGATE_CONFIG)"]


def test_broken_yaml_names_its_line(tmp_path: Path):
    root = _write(tmp_path, "version: 1\nrows:\n  areas: [GOV\n")
    with pytest.raises(RecordError) as exc:
        load_config(root)
    assert exc.value.lines()[0].startswith(".agents/config.yaml:4: invalid YAML")


def test_repository_config_is_valid():
    config = load_config(Path(__file__).resolve().parents[2])
    assert config.cutover and len(config.cutover) == 40


def test_schema_is_exported_and_forbids_unknown_keys():
    schema = json_schema()
    assert schema["additionalProperties"] is False
    assert set(Config.model_fields) <= set(schema["properties"])


def test_a_mistyped_key_rule_or_check_names_the_nearest_one():
    from checkers.config import parse_config

    with pytest.raises(RecordError) as bad_keys:
        parse_config(
            b"version: 1\ntrailers:\n  preset: [dco]\npr_size:\n  classes:\n    - {name: a, paths: ['**'], budgt: 3}\n",
            "c.yaml",
        )
    assert bad_keys.value.lines() == [
        "c.yaml:3: trailers.preset: unknown key (did you mean 'presets'?)",
        "c.yaml:6: pr_size.classes.0.budgt: unknown key (did you mean 'budget'?)",
    ]
    with pytest.raises(RecordError) as bad_names:
        parse_config(b"version: 1\nignore: [trailer-mising, XYZ]\nchecks:\n  pr-sise: {enabled: false}\n", "c.yaml")
    lines = bad_names.value.lines()
    assert lines[0].startswith("c.yaml:4: checks.pr-sise: unknown check 'pr-sise' (did you mean 'pr-size'?); ")
    assert lines[1].startswith(
        "c.yaml:2: ignore.0: unknown rule 'trailer-mising' (did you mean TR001 trailer-missing?)"
    )
    assert lines[2].startswith("c.yaml:2: ignore.1: unknown rule 'XYZ'; `rowgate rules` lists the ")


def test_a_cached_parse_gives_the_same_config_and_a_tampered_or_changed_one_is_parsed_again(tmp_path: Path):
    """With a git directory, a config that validated is validated again from its cached parse: the same
    Config; an entry altered under its seal is ignored; a config changed to a mistake after a cached run
    fails with the line a fresh parse gives."""
    import json

    from checkers.config import parse_config
    from checkers.contentcache import CACHE_DIR

    git_dir = tmp_path / "git"
    raw = b"version: 1\nrows:\n  areas: [GOV, ENGINE]\nchecks:\n  pr-size: {enabled: false}\n"
    fresh = parse_config(raw, "c.yaml")
    assert parse_config(raw, "c.yaml", git_dir) == fresh  # parsed, then kept
    cache = git_dir / CACHE_DIR / "config.json"
    assert len(json.loads(cache.read_text())["entries"]) == 1
    assert parse_config(raw, "c.yaml", git_dir) == fresh  # from the cache
    cache.write_text(cache.read_text().replace('"ENGINE"', '"MODEL"'))
    assert parse_config(raw, "c.yaml", git_dir) == fresh
    bad = raw.replace(b"pr-size", b"pr-sise")
    with pytest.raises(RecordError) as exc:
        parse_config(bad, "c.yaml", git_dir)
    assert exc.value.lines()[0].startswith("c.yaml:5: checks.pr-sise: unknown check 'pr-sise' (did you mean")
