"""The validated-config cache: a hit skips validation, any change to the config or the schema validates
again, a broken or unwritable cache is only a slower run, and the sections read the same as the models."""

from __future__ import annotations

import shutil
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from checkers import config as config_module
from checkers import configcache, configsource, registry
from checkers.config import Config, load_config
from checkers.configcache import CACHE_PATH, ConfigView, Section, cache_key, load_sections, to_section
from checkers.results import RecordError
from tests.conftest import ROOT

CONFIG = (
    "version: 1\ncutover: " + "ab" * 20 + "\nbase: {ref: main}\ntrailers:\n  presets: [row, dco]\n"
    "  merges: skip\n  keys:\n    - {key: Fixes, pattern: '#[0-9]+', max: 2}\n"
)
SECTIONS = ("cutover", "base", "trailers")


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

    def counting(raw: bytes, display: str = config_module.CONFIG_PATH) -> Config:
        seen.append(raw)
        return parse(raw, display)

    monkeypatch.setattr(config_module, "parse_config", counting)
    return seen


def test_first_load_validates_and_caches_then_a_hit_does_not_validate(repo, validations):
    root, git_dir = repo
    first = load_sections(root, git_dir, SECTIONS)
    assert validations == [CONFIG.encode()] and (git_dir / CACHE_PATH).is_file()
    second = load_sections(root, git_dir, SECTIONS)
    assert len(validations) == 1 and second == first
    assert (second.cutover, second.base.ref, second.trailers.merges) == ("ab" * 20, "main", "skip")
    assert [(k.key, k.pattern, k.max, k.min, k.when) for k in second.trailers.keys] == [
        ("Fixes", "#[0-9]+", 2, 0, None)
    ]  # defaults filled in by the model


def test_a_changed_config_is_validated_again_and_errors_name_file_and_line(repo, validations):
    root, git_dir = repo
    load_sections(root, git_dir, SECTIONS)
    cached = (git_dir / CACHE_PATH).read_bytes()
    edited = CONFIG.replace("merges: skip", "merges: forbid")
    (root / ".agents" / "config.yaml").write_text(edited)
    assert load_sections(root, git_dir, SECTIONS).trailers.merges == "forbid"
    assert validations[-1] == edited.encode()
    (root / ".agents" / "config.yaml").write_text(CONFIG.replace("merges: skip", "merges: sometimes"))
    with pytest.raises(RecordError) as exc:
        load_sections(root, git_dir, SECTIONS)
    [line] = exc.value.lines()
    assert line.startswith(".agents/config.yaml:6: trailers.merges: Input should be 'contract', 'skip' or 'forbid'")
    assert (git_dir / CACHE_PATH).read_bytes() != cached  # the edited, valid config is the cached one
    assert "sometimes" not in (git_dir / CACHE_PATH).read_text()  # an invalid config is never cached


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
    (git_dir / CACHE_PATH).parent.mkdir(parents=True)
    for junk in ("{not json", '{"key": "other", "config": {}}', "[1, 2]"):
        (git_dir / CACHE_PATH).write_text(junk)
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
    assert (tmp_path / CACHE_PATH).is_file()
    assert configsource.CONFIG_PATH == config_module.CONFIG_PATH


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
