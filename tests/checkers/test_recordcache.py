"""The records' parse cache: a hit gives the same models and lines as a fresh parse, a changed record is
parsed again, and an entry that was tampered with or a cache file that is garbage is ignored, never trusted."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from checkers.checks.records import agent_record
from checkers.config import load_config
from checkers.contentcache import CACHE_DIR, ContentCache
from checkers.context import Context
from checkers.recordcache import CachedDoc, ParsedCache
from checkers.records import key_line, load_records
from checkers.results import RecordError
from tests.conftest import GitRepo, row_yaml

ISSUE = "---\nnumber: 7\nrow: GOV-CORE\nfiled: 2026-11-29\n---\n# seven\n"


def _cache_file(repo: GitRepo) -> Path:
    return Path(repo.git("rev-parse", "--absolute-git-dir").strip()) / CACHE_DIR / "records.json"


def _verdict(repo: GitRepo) -> tuple[str, list[tuple[str, str | None, int | None, str]]]:
    ctx = Context(root=repo.path, config=load_config(repo.path))
    result = agent_record.run(ctx, argparse.Namespace(base=None, head=None, message_file=None))
    return result.status.value, [(f.rule, f.path, f.line, f.message) for f in result.findings]


def _entries(repo: GitRepo) -> dict[str, list[object]]:
    entries: dict[str, list[object]] = json.loads(_cache_file(repo).read_text())["entries"]
    return entries


def test_a_hit_gives_the_fresh_parse_models_and_lines(rowgate_repo: GitRepo):
    rowgate_repo.write(
        {
            ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", issues="[7]", anchors="\n  - checkers/x.py\n  - y"),
            ".agents/issues/GOV-CORE/ISSUE-7.md": ISSUE,
        }
    )
    fresh = load_records(rowgate_repo.path)
    assert not isinstance(fresh.rows["GOV-CORE"].doc, CachedDoc)
    assert len(_entries(rowgate_repo)) == 2  # the row and the issue's front matter
    cached = load_records(rowgate_repo.path)
    assert isinstance(cached.rows["GOV-CORE"].doc, CachedDoc) and isinstance(cached.issues[0].doc, CachedDoc)
    assert cached.rows["GOV-CORE"].model == fresh.rows["GOV-CORE"].model
    assert cached.issues[0].model == fresh.issues[0].model and cached.issues[0].model.filed == dt.date(2026, 11, 29)
    for key in ("id", "area", "title", "state", "spec", "issues", "anchors", "absent"):
        assert key_line(cached.rows["GOV-CORE"].doc, key) == key_line(fresh.rows["GOV-CORE"].doc, key), key
    assert key_line(cached.issues[0].doc, "row") == key_line(fresh.issues[0].doc, "row") == 2


def test_a_changed_record_is_parsed_again_and_fails_after_a_green_cached_run(rowgate_repo: GitRepo):
    assert _verdict(rowgate_repo) == ("pass", [])
    assert _verdict(rowgate_repo) == ("pass", [])  # from the cache
    rowgate_repo.write({".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", area="NOPE")})
    assert _verdict(rowgate_repo) == (
        "fail",
        [
            (
                "AR002",
                ".agents/rows/GOV-CORE.yaml",
                2,
                "area 'NOPE' is not one of ['GOV', 'ENGINE']",
            )
        ],
    )
    rowgate_repo.write({".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", surprise="1")})
    assert _verdict(rowgate_repo) == ("fail", [("AR001", ".agents/rows/GOV-CORE.yaml", 6, "surprise: unknown key")])


def test_a_tampered_entry_is_ignored_and_the_verdict_stands(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", area="NOPE")})
    uncached = _verdict(rowgate_repo)
    assert uncached[0] == "fail"
    path = _cache_file(rowgate_repo)
    text = path.read_text()
    assert '"area":"NOPE"' in text
    path.write_text(text.replace('"area":"NOPE"', '"area":"GOV"'))  # the seal no longer holds
    assert _verdict(rowgate_repo) == uncached
    path.write_text('{"format": 1, "stamp": "x", "entr')  # garbage: no cache at all
    assert _verdict(rowgate_repo) == uncached
    path.write_bytes(b"\xff\x00" * 100)
    assert _verdict(rowgate_repo) == uncached
    assert json.loads(path.read_text())["entries"]  # rewritten whole by the run after the garbage


def test_a_record_that_no_longer_fits_its_model_fails_with_the_fresh_parse_lines(tmp_path: Path):
    class Loose(BaseModel):
        model_config = ConfigDict(extra="allow")
        id: str

    class Tight(BaseModel):
        model_config = ConfigDict(extra="forbid")
        id: str

    (tmp_path / "r.yaml").write_text("id: a\nextra: 1\n")
    cache = ParsedCache(ContentCache(tmp_path / "git", "records", ["test"]))
    cache.load_model(Loose, tmp_path / "r.yaml", "r.yaml")
    cache.cache.save()
    again = ParsedCache(ContentCache(tmp_path / "git", "records", ["test"]))
    obj, doc = again.load_model(Loose, tmp_path / "r.yaml", "r.yaml")
    assert isinstance(doc, CachedDoc) and obj.model_dump() == {"id": "a", "extra": 1}
    try:
        again.load_model(Tight, tmp_path / "r.yaml", "r.yaml")
    except RecordError as exc:
        assert exc.lines() == ["r.yaml:2: extra: unknown key"]
    else:
        raise AssertionError("the tight model accepted an extra key from the cache")


def test_only_what_json_gives_back_unchanged_is_kept(tmp_path: Path):
    class Any_(BaseModel):
        model_config = ConfigDict(extra="allow")

    cache = ParsedCache(ContentCache(tmp_path / "git", "records", ["test"]))
    texts = {
        "kept": "a: 2026-01-02\nb: |\n  block\nc: 0x1f\nd: 1.5\ne: [true, null]\n",
        "timestamp": "a: 2026-01-02T03:04:05+01:00\n",
        "tag-like key": '"\\0date": x\n',
        "not a map": "- 1\n",
    }
    for name, text in texts.items():
        try:
            cache.load_text_model(Any_, text, name)
        except RecordError:
            assert name == "not a map"
    cache.cache.save()
    again = ParsedCache(ContentCache(tmp_path / "git", "records", ["test"]))
    obj, doc = again.load_text_model(Any_, texts["kept"], "kept")
    assert isinstance(doc, CachedDoc)
    assert obj.model_dump() == {"a": dt.date(2026, 1, 2), "b": "block\n", "c": 31, "d": 1.5, "e": [True, None]}
    assert len(json.loads((tmp_path / "git" / CACHE_DIR / "records.json").read_text())["entries"]) == 1


def test_no_git_directory_means_no_cache(tmp_path: Path):
    cache = ContentCache(None, "records", ["test"])
    cache.put(ContentCache.key("x"), 1)
    cache.save()
    assert cache.path is None and ContentCache(None, "records", ["test"]).get(ContentCache.key("x")) is None


YAML_TEXTS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.sampled_from(
            [
                "1",
                "0x1f",
                "1_000",
                "1.5",
                "1e3",
                ".inf",
                ".nan",
                "true",
                "no",
                "null",
                "~",
                "2026-01-02",
                "2026-01-02T03:04:05Z",
                "'quoted'",
                '"tab\\there"',
                "|\n  block\n",
                ">\n  folded\n",
                "[1, 2026-01-02, x]",
                "{k: v}",
                "\n  - 1\n  - two\n",
                "\n  k: 2026-03-04\n",
                '"\\0date"',
                "x # note",
            ]
        ),
    ),
    max_size=5,
    unique_by=lambda kv: kv[0],
)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(YAML_TEXTS)
def test_whatever_a_record_holds_a_hit_validates_as_the_fresh_parse(tmp_path_factory, pairs) -> None:
    """Random top-level keys and YAML scalar forms (numbers in bases, floats, bools, dates, timestamps, block
    and flow values): a cached parse, when kept, gives the same model dump and the same key lines."""

    class Free(BaseModel):
        model_config = ConfigDict(extra="allow")

    text = "".join(f"{k}: {v}\n" if not v.startswith("\n") else f"{k}:{v}" for k, v in pairs) or "{}\n"
    git_dir = tmp_path_factory.mktemp("git")
    fresh, fresh_doc = ParsedCache(ContentCache(git_dir, "r", ["t"])).load_text_model(Free, text, "r")
    first = ParsedCache(ContentCache(git_dir, "r", ["t"]))
    first.load_text_model(Free, text, "r")
    first.cache.save()
    again, doc = ParsedCache(ContentCache(git_dir, "r", ["t"])).load_text_model(Free, text, "r")
    assert isinstance(doc, CachedDoc) == (not any("T03" in v for _, v in pairs))  # only timestamps are not kept
    dump = again.model_dump()
    assert json.dumps(dump, default=repr, sort_keys=True) == json.dumps(
        fresh.model_dump(), default=repr, sort_keys=True
    )
    for key in dump:
        assert key_line(doc, key) == key_line(fresh_doc, key)
