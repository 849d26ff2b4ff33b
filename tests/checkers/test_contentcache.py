"""The content-keyed cache: a key or stamp that does not match is a miss, an entry whose seal fails is a miss,
the file is bounded and rewritten only when what a run used changed."""

from __future__ import annotations

import json
from pathlib import Path

from checkers import contentcache
from checkers.contentcache import CACHE_DIR, ContentCache


def _cache(git_dir: Path, stamp: str = "v1", max_entries: int = 4096) -> ContentCache:
    return ContentCache(git_dir, "t", [stamp], max_entries)


def test_a_saved_value_comes_back_under_its_key_only(tmp_path: Path):
    first = _cache(tmp_path)
    first.put(ContentCache.key("a.py", b"x = 1\n"), [["VT_A", 1]])
    first.save()
    second = _cache(tmp_path)
    assert second.get(ContentCache.key("a.py", b"x = 1\n")) == [["VT_A", 1]]
    assert second.get(ContentCache.key("a.py", b"x = 2\n")) is None
    assert (second.hits, second.misses) == (1, 1)
    assert _cache(tmp_path, stamp="v2").get(ContentCache.key("a.py", b"x = 1\n")) is None  # new code: all miss


def test_keys_of_different_parts_differ_even_when_their_concatenation_agrees():
    assert ContentCache.key("ab", "c") != ContentCache.key("a", "bc")
    assert ContentCache.key("a", b"b") == ContentCache.key(b"a", "b")


def test_a_value_altered_under_its_seal_is_a_miss(tmp_path: Path):
    first = _cache(tmp_path)
    key = ContentCache.key("k")
    first.put(key, {"n": 1})
    first.save()
    path = tmp_path / CACHE_DIR / "t.json"
    data = json.loads(path.read_text())
    data["entries"][key][1]["n"] = 2
    path.write_text(json.dumps(data))
    assert _cache(tmp_path).get(key) is None
    data["entries"][key] = "not an entry"
    path.write_text(json.dumps(data))
    assert _cache(tmp_path).get(key) is None


def test_a_run_keeps_what_it_used_and_rewrites_only_on_change(tmp_path: Path):
    first = _cache(tmp_path)
    for n in range(3):
        first.put(ContentCache.key(str(n)), n)
    first.save()
    path = tmp_path / CACHE_DIR / "t.json"
    before = path.stat().st_mtime_ns, path.read_text()
    same = _cache(tmp_path)
    assert [same.get(ContentCache.key(str(n))) for n in range(3)] == [0, 1, 2]
    path.write_text(before[1])  # a new mtime: a rewrite would show as a second new one
    mtime = path.stat().st_mtime_ns
    same.save()
    assert path.stat().st_mtime_ns == mtime
    fewer = _cache(tmp_path)
    assert fewer.get(ContentCache.key("1")) == 1
    fewer.save()  # the entries of files this run did not read are dropped
    assert list(json.loads(path.read_text())["entries"]) == [ContentCache.key("1")]


def test_entries_are_bounded_and_an_oversized_file_is_not_read(tmp_path: Path, monkeypatch):
    small = _cache(tmp_path, max_entries=2)
    for n in range(5):
        small.put(ContentCache.key(str(n)), n)
    small.save()
    path = tmp_path / CACHE_DIR / "t.json"
    assert list(json.loads(path.read_text())["entries"]) == [ContentCache.key("3"), ContentCache.key("4")]
    monkeypatch.setattr(contentcache, "MAX_FILE_BYTES", path.stat().st_size - 1)
    assert _cache(tmp_path).get(ContentCache.key("4")) is None


def test_an_unwritable_cache_is_only_a_slower_run(tmp_path: Path):
    (tmp_path / "rowgate").write_text("a file where the cache folder would go")
    cache = _cache(tmp_path)
    cache.put(ContentCache.key("k"), 1)
    cache.save()  # no error
    assert _cache(tmp_path).get(ContentCache.key("k")) is None
