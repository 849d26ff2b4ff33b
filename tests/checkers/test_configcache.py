"""The validated-config cache: a hit skips validation, any change to the config or the schema validates
again, a broken or unwritable cache is only a slower run, and the sections read the same as the models."""

from __future__ import annotations

import os
import shutil
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from checkers import config as config_module
from checkers import configcache, configsource, registry
from checkers.config import Config, load_config
from checkers.configcache import (
    CACHE_DIR,
    LEGACY_CACHE,
    MAX_ENTRIES,
    ConfigView,
    Section,
    cache_file,
    cache_key,
    load_sections,
    to_section,
)
from checkers.configsource import locate
from checkers.results import RecordError
from tests.conftest import ROOT

CONFIG = (
    "version: 1\ncutover: " + "ab" * 20 + "\nbase: {ref: main}\ntrailers:\n  presets: [row, dco]\n"
    "  merges: skip\n  keys:\n    - {key: Fixes, pattern: '#[0-9]+', max: 2}\n"
)
SECTIONS = ("cutover", "base", "trailers")


def entry(root: Path, git_dir: Path) -> Path:
    """The cache entry of the config `root` finds by itself (.agents/config.yaml, or the defaults)."""
    return cache_file(git_dir, locate(root))


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    root, git_dir = tmp_path / "work", tmp_path / "gitdir"
    (root / ".agents").mkdir(parents=True)
    git_dir.mkdir()
    (root / ".agents" / "config.yaml").write_text(CONFIG)
    return root, git_dir


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every config validation, by the bytes validated."""
    seen: list[bytes] = []
    parse = config_module.parse_config

    def counting(raw: bytes, display: str = config_module.CONFIG_PATH, git_dir: Path | None = None) -> Config:
        seen.append(raw)
        return parse(raw, display, git_dir)

    monkeypatch.setattr(config_module, "parse_config", counting)
    return seen


def test_first_load_validates_and_caches_then_a_hit_does_not_validate(repo, validations):
    root, git_dir = repo
    first = load_sections(root, git_dir, SECTIONS)
    assert validations == [CONFIG.encode()] and entry(root, git_dir).is_file()
    second = load_sections(root, git_dir, SECTIONS)
    assert len(validations) == 1 and second == first
    assert (second.cutover, second.base.ref, second.trailers.merges) == ("ab" * 20, "main", "skip")
    assert [(k.key, k.pattern, k.max, k.min, k.when) for k in second.trailers.keys] == [
        ("Fixes", "#[0-9]+", 2, 0, None)
    ]  # defaults filled in by the model


def test_a_changed_config_is_validated_again_and_errors_name_file_and_line(repo, validations):
    root, git_dir = repo
    load_sections(root, git_dir, SECTIONS)
    cached = entry(root, git_dir).read_bytes()
    edited = CONFIG.replace("merges: skip", "merges: forbid")
    (root / ".agents" / "config.yaml").write_text(edited)
    assert load_sections(root, git_dir, SECTIONS).trailers.merges == "forbid"
    assert validations[-1] == edited.encode()
    (root / ".agents" / "config.yaml").write_text(CONFIG.replace("merges: skip", "merges: sometimes"))
    with pytest.raises(RecordError) as exc:
        load_sections(root, git_dir, SECTIONS)
    [line] = exc.value.lines()
    assert line.startswith(".agents/config.yaml:6: trailers.merges: Input should be 'contract', 'skip' or 'forbid'")
    assert entry(root, git_dir).read_bytes() != cached  # the edited, valid config is the cached one
    assert "sometimes" not in entry(root, git_dir).read_text()  # an invalid config is never cached


def test_a_schema_change_changes_the_key(tmp_path: Path):
    sources = [Path(configcache.__file__).with_name(n) for n in ("config.py", "yamlio.py")]
    copies = []
    for src in sources:
        shutil.copy(src, tmp_path / src.name)
        copies.append(tmp_path / src.name)
    raw = CONFIG.encode()
    assert cache_key(raw, copies) == cache_key(raw)  # the default schema is those two files
    copies[0].write_text(copies[0].read_text().replace('"contract", "skip", "forbid"', '"contract", "skip"'))
    assert cache_key(raw, copies) != cache_key(raw)
    assert cache_key(raw + b" ") != cache_key(raw)


def test_an_upgraded_validator_changes_the_key(monkeypatch: pytest.MonkeyPatch):
    stamps = configcache.validator_stamps()
    assert [s.split()[0] for s in stamps] == ["pydantic", "ruamel.yaml"]
    raw = CONFIG.encode()
    before = cache_key(raw)
    monkeypatch.setattr(configcache, "validator_stamps", lambda: [stamps[0], stamps[1] + "1"])
    assert cache_key(raw) != before


def test_a_corrupt_or_foreign_cache_entry_is_ignored_and_replaced(repo, validations):
    root, git_dir = repo
    entry(root, git_dir).parent.mkdir(parents=True)
    for junk in ("{not json", '{"key": "other", "config": {}}', "[1, 2]"):
        entry(root, git_dir).write_text(junk)
        assert load_sections(root, git_dir, SECTIONS).base.ref == "main"
    assert len(validations) == 3
    load_sections(root, git_dir, SECTIONS)
    assert len(validations) == 3  # the last run rewrote a good entry


def test_an_unwritable_cache_or_no_git_dir_only_costs_a_validation(repo, validations):
    root, git_dir = repo
    blocked = git_dir / "blocked"
    blocked.write_text("a file where the cache directory would go")
    for where in (blocked, None):
        assert load_sections(root, where, SECTIONS).trailers.presets == ["row", "dco"]
        assert load_sections(root, where, SECTIONS).trailers.presets == ["row", "dco"]
    assert len(validations) == 4 and not list(git_dir.glob("**/*.tmp"))


def test_no_config_file_serves_the_defaults_from_the_cache(tmp_path: Path, validations):
    view = load_sections(tmp_path, tmp_path, SECTIONS)
    assert view.trailers.presets == [] and view.cutover is None and validations == []
    assert entry(tmp_path, tmp_path).is_file() and entry(tmp_path, tmp_path).name.startswith("defaults-")
    assert configsource.CONFIG_PATH == config_module.CONFIG_PATH


def _config(root: Path, name: str, merges: str) -> configsource.ConfigSource:
    (root / name).write_text(CONFIG.replace("merges: skip", f"merges: {merges}"))
    return locate(root, root / name)


def test_alternating_two_configs_hits_each_ones_entry_and_an_edit_invalidates_only_that_one(repo, validations):
    root, git_dir = repo
    a, b = _config(root, "a.yaml", "skip"), _config(root, "b.yaml", "forbid")
    assert cache_file(git_dir, a) != cache_file(git_dir, b)
    for _ in range(2):  # a, b, a, b: two validations, then hits both ways
        assert load_sections(root, git_dir, SECTIONS, a).trailers.merges == "skip"
        assert load_sections(root, git_dir, SECTIONS, b).trailers.merges == "forbid"
    assert len(validations) == 2
    b_entry = cache_file(git_dir, b).read_bytes()
    a = _config(root, "a.yaml", "contract")  # edit a
    assert load_sections(root, git_dir, SECTIONS, a).trailers.merges == "contract"
    assert load_sections(root, git_dir, SECTIONS, b).trailers.merges == "forbid"
    assert validations[2:] == [a.raw]  # a validated again, b still a hit
    assert cache_file(git_dir, b).read_bytes() == b_entry
    assert load_sections(root, git_dir, SECTIONS, a).trailers.merges == "contract" and len(validations) == 3


def test_the_same_file_by_another_route_is_the_same_entry_and_yaml_is_not_pyproject(repo, monkeypatch):
    root, git_dir = repo
    found = locate(root)
    monkeypatch.chdir(root / ".agents")
    assert cache_file(git_dir, locate(root, "config.yaml")) == cache_file(git_dir, found)  # display .agents/...
    assert cache_file(git_dir, found._replace(kind="pyproject")) != cache_file(git_dir, found)


def test_entries_beyond_the_limit_are_dropped_oldest_first_and_the_old_single_entry_goes(repo, validations):
    root, git_dir = repo
    legacy = git_dir / LEGACY_CACHE
    legacy.parent.mkdir(parents=True)
    legacy.write_text("{}")
    sources = [_config(root, f"c{i}.yaml", "skip") for i in range(MAX_ENTRIES + 2)]
    for i, source in enumerate(sources):
        load_sections(root, git_dir, SECTIONS, source)
        path = cache_file(git_dir, source)
        os.utime(path, ns=(i * 10**9, i * 10**9))  # written in this order, a second apart
    assert not legacy.exists()
    kept = sorted(p.name for p in (git_dir / CACHE_DIR).glob("*.json"))
    assert kept == sorted(cache_file(git_dir, s).name for s in sources[2:])
    load_sections(root, git_dir, SECTIONS, sources[-1])
    assert len(validations) == MAX_ENTRIES + 2  # the newest entry is still a hit


def test_an_undeclared_section_is_a_clear_error(repo):
    view = load_sections(*repo, ("trailers",))
    with pytest.raises(AttributeError, match="config section 'pr_size' is not in the check's CONFIG_SECTIONS"):
        view.pr_size  # noqa: B018


def _same(model: object, view: object, where: str) -> None:
    """The view has the model's attributes and values, all the way down."""
    if isinstance(model, BaseModel):
        assert isinstance(view, Section), where
        assert set(vars(view)) == set(type(model).model_fields), where
        for name in type(model).model_fields:
            _same(getattr(model, name), getattr(view, name), f"{where}.{name}")
    elif isinstance(model, list):
        assert isinstance(view, list) and len(view) == len(model), where
        for i, (m, v) in enumerate(zip(model, view)):
            _same(m, v, f"{where}[{i}]")
    else:
        assert view == model and type(view) is type(model), where


@pytest.mark.parametrize("root", [ROOT, "fixture"], ids=["this-repository", "fixture"])
def test_sections_read_the_same_as_the_validated_models(root, repo, tmp_path: Path):
    root = repo[0] if root == "fixture" else root
    model = load_config(root)
    view = load_sections(root, tmp_path, SECTIONS)
    assert isinstance(view, ConfigView)
    for name in SECTIONS:
        _same(getattr(model, name), getattr(view, name), name)


def _dict_fields(annotation: object, where: str) -> list[str]:
    """Paths of dict-typed fields under `annotation` (a view turns every JSON object into a Section)."""
    origin = typing.get_origin(annotation)
    if origin is dict:
        return [where]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [p for name, f in annotation.model_fields.items() for p in _dict_fields(f.annotation, f"{where}.{name}")]
    return [p for arg in typing.get_args(annotation) for p in _dict_fields(arg, where)]


def test_declared_sections_hold_no_free_form_maps():
    declared = [(spec.id, s) for spec in registry.CHECKS for s in getattr(spec.load(), "CONFIG_SECTIONS", ())]
    assert ("commit-trailers", "trailers") in declared
    for check, section in declared:
        assert section in Config.model_fields, (check, section)
        assert _dict_fields(Config.model_fields[section].annotation, section) == [], check
    assert _dict_fields(Config.model_fields["rows"].annotation, "rows") == ["rows.states"]  # the walk finds one


def test_to_section_turns_objects_into_attributes():
    s = to_section({"a": [{"b": 1}, 2], "c": None})
    assert s.a[0].b == 1 and s.a[1] == 2 and s.c is None and s == Section(a=[Section(b=1), 2], c=None)
