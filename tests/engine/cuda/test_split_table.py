"""The measured split table (engine/cuda/split_table.py): its lookup (the exact point, the nearest on a log scale,
out of the grid and on another device the rule), its file errors, and VT_ATTN_SPLIT_TABLE: off, the arms' split
choice is the rule's; on, the table's. The CPU tests stand in for the CUDA rule (`num_splits` asks the compiled
library) and the device's name; the GPU test at the end launches the default arm through the kernel table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine import kernels
from engine.cuda import paged_attn_onepass, paged_attn_tiled, split_table
from engine.flags import FlagSnapshot
from engine.kernels.table import Arm, Op
from lab.gates.cases import attention as cases
from tests.engine.table_standins import H200, OnGpu

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the kernels run on a GPU")
DEVICE = "NVIDIA H200"
RULE = 5  # the stand-in rule's split count: none of the table's
POINTS = [  # (rows, context, head_dim, splits)
    (8, 1024, 128, 16),
    (8, 4096, 128, 32),
    (64, 1024, 128, 4),
    (64, 4096, 128, 2),
    (16, 4096, 256, 8),
]


def table_doc(points=POINTS, device=DEVICE, dtype="bfloat16", arm="tiled") -> dict:
    rows = [{"rows": r, "context": c, "head_dim": d, "splits": s, "rule": 1} for r, c, d, s in points]
    return {
        "schema": 1,
        "kind": "attn-split-table",
        "tables": [{"device": device, "dtype": dtype, "arm": arm, "points": rows}],
    }


def write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


@pytest.fixture
def table(tmp_path: Path) -> split_table.Table:
    return split_table.load(write(tmp_path / "h200.json", table_doc()))[(DEVICE, "bfloat16", "tiled")]


@pytest.fixture
def on_an_h200(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The table's device name for index 0, the rule a stand-in (5 splits), the table file `h200.json`."""
    monkeypatch.setattr(split_table, "device_name", lambda index: DEVICE)
    monkeypatch.setattr(paged_attn_tiled, "num_splits", lambda *a: RULE)
    monkeypatch.setattr(paged_attn_onepass, "num_splits", lambda *a: RULE)
    doc = table_doc()
    doc["tables"].append(
        {**doc["tables"][0], "arm": "onepass", "points": [{**p, "splits": 3} for p in doc["tables"][0]["points"]]}
    )
    with split_table.use(write(tmp_path / "h200.json", doc)):
        yield


def shape(batch: int, hkv: int, context: int, d: int = 128, dtype=torch.bfloat16) -> paged_attn_tiled.Shape:
    return paged_attn_tiled.Shape(batch, 2 * hkv, hkv, d, 32, context // 32, dtype, 0)


def test_an_exact_point_gives_its_split_count(table: split_table.Table) -> None:
    assert [table.lookup(r, c, d) for r, c, d, _ in POINTS] == [s for *_, s in POINTS]


def test_between_points_the_nearest_on_a_log_scale(table: split_table.Table) -> None:
    assert table.lookup(16, 1024, 128) == 16  # rows 16: twice 8, a quarter of 64
    assert table.lookup(32, 1024, 128) == 4  # rows 32: 64 is x2 away, 8 is x4
    assert table.lookup(8, 3000, 128) == 32  # context 3000: nearer 4096 than 1024 on a log scale
    assert table.lookup(8, 2048, 128) == 16  # half-way (x2 each side): the smaller context
    assert table.lookup(22, 2048, 128) == 16  # ln(22/8) < ln(64/22): rows 8, then the tie to the smaller context
    assert table.lookup(23, 2048, 128) == 4  # ln(23/8) > ln(64/23): rows 64, the tie to the smaller context


def test_outside_the_grid_no_count(table: split_table.Table) -> None:
    assert table.lookup(4, 1024, 128) is None  # fewer rows than any point
    assert table.lookup(128, 1024, 128) is None  # more
    assert table.lookup(8, 512, 128) is None  # a shorter capacity
    assert table.lookup(8, 8192, 128) is None  # a longer one
    assert table.lookup(8, 1024, 64) is None  # a head_dim not measured
    assert table.lookup(16, 1024, 256) is None  # head_dim 256: only its own points (rows 16, context 4096)


def test_a_count_is_cut_to_the_tiles_the_capacity_holds(tmp_path: Path) -> None:
    doc = table_doc([(8, 256, 128, 64), (8, 4096, 128, 64)])
    table = split_table.load(write(tmp_path / "t.json", doc))[(DEVICE, "bfloat16", "tiled")]
    assert table.lookup(8, 256, 128) == 4  # 256 tokens: 4 tiles of 64
    assert table.lookup(8, 4096, 128) == 64


def test_the_flag_off_leaves_the_rule_and_on_takes_the_table(on_an_h200: None) -> None:
    op, off = kernels.paged_decode_attention, FlagSnapshot.defaults()
    on = off.with_(VT_ATTN_SPLIT_TABLE=True)
    assert not off.enabled("VT_ATTN_SPLIT_TABLE")  # OFF by default: another summation order, behind the flip
    s = shape(1, 8, 1024)  # rows 8, capacity 1024: the table's 16 (tiled) and 3 (one-pass)
    assert s.splits() == RULE and paged_attn_onepass._splits(s) == RULE  # outside any call: the rule
    with op.scope(off):
        assert s.splits() == RULE and paged_attn_onepass._splits(s) == RULE
    split_table.HITS.clear()
    with op.scope(on):
        assert s.splits() == 16 and paged_attn_onepass._splits(s) == 3
        assert shape(4, 8, 4096).splits() == 2  # rows 32 at 4096: nearest (64, 4096)
        assert shape(32, 8, 1024).splits() == RULE  # rows 256: past the grid, the rule
        assert shape(1, 8, 1024, dtype=torch.float16).splits() == RULE  # no float16 table
    assert split_table.HITS == {("tiled", 16): 1, ("onepass", 3): 1, ("tiled", 2): 1}
    assert s.splits() == RULE  # the scope ends with the call


def test_another_device_falls_back_to_the_rule(on_an_h200: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(split_table, "device_name", lambda index: "NVIDIA H100 80GB HBM3")
    with split_table.active(True):
        assert shape(1, 8, 1024).splits() == RULE


def test_no_table_file_is_the_rule(on_an_h200: None, tmp_path: Path) -> None:
    with split_table.active(True, tmp_path / "none-here"):
        assert shape(1, 8, 1024).splits() == RULE


def test_the_kernel_table_chooses_and_runs_in_the_snapshots_scope() -> None:
    seen: list[tuple[str, bool]] = []

    def supports(x: object) -> bool:
        seen.append(("supports", split_table.is_active()))
        return True

    def kernel(x: object) -> str:
        seen.append(("kernel", split_table.is_active()))
        return "ran"

    def reference(x: object) -> str:
        return "reference"

    from engine.kernels import attention

    op = Op(
        reference, lambda x: None, [Arm("fast", (), supports, "anything", kernel)], scope=attention.split_table_scope
    )
    on = FlagSnapshot.defaults().with_(VT_ATTN_SPLIT_TABLE=True)
    with kernels.on_device(H200):
        assert op(on, OnGpu(1)) == "ran" and op.choose(on, OnGpu(1)) == "fast"
        assert op(FlagSnapshot.defaults(), OnGpu(1)) == "ran"
        assert op.run_arm("fast", OnGpu(1)) == "ran"  # the default flags' scope
        with split_table.active(True):  # a call with the flag off inside an active scope: off for that call
            assert op(FlagSnapshot.defaults(), OnGpu(1)) == "ran"
    assert (
        seen
        == [("supports", True), ("kernel", True), ("supports", True)]
        + [
            ("supports", False),
            ("kernel", False),
        ]
        * 3
    )


def test_a_call_the_table_decided_counts_as_the_flags(on_an_h200: None) -> None:
    """`arms_ran("VT_ATTN_SPLIT_TABLE")`, what the flip protocol asks of a flag, counts the calls whose split count
    the table chose: not those under the flag off, nor the rule's past the grid, nor `choose`."""
    from engine.kernels import attention

    def kernel(s: paged_attn_tiled.Shape) -> int:
        return s.splits()

    op = Op(
        kernel, lambda s: None, [Arm("fast", (), lambda s: True, "anything", kernel)], scope=attention.split_table_scope
    )
    on = FlagSnapshot.defaults().with_(VT_ATTN_SPLIT_TABLE=True)
    on_gpu = shape(1, 8, 1024)  # rows 8, capacity 1024: the table's 16
    kernels.reset_counts()
    with kernels.on_device(H200):
        assert op(FlagSnapshot.defaults(), _Cuda(on_gpu)) == RULE
        assert op(on, _Cuda(shape(32, 8, 1024))) == RULE  # rows 256: past the grid
        assert op.choose(on, _Cuda(on_gpu)) == "fast"
        assert kernels.arms_ran("VT_ATTN_SPLIT_TABLE") == 0
        assert op(on, _Cuda(on_gpu)) == 16
    assert kernels.counts().settings == {("paged_decode_attention", "VT_ATTN_SPLIT_TABLE"): 1}
    assert kernels.arms_ran("VT_ATTN_SPLIT_TABLE") == 1
    assert (
        "setting paged_decode_attention 1: VT_ATTN_SPLIT_TABLE changed what its arm launched" in kernels.render_counts()
    )
    kernels.reset_counts()
    assert kernels.arms_ran("VT_ATTN_SPLIT_TABLE") == 0


class _Cuda(paged_attn_tiled.Shape):
    """A launch geometry that passes for a CUDA input in the table's arm choice."""

    is_cuda = True

    def __new__(cls, s: paged_attn_tiled.Shape) -> _Cuda:
        return super().__new__(cls, *s)


@pytest.mark.parametrize(
    "doc,message",
    [
        ("{not json", "not a readable JSON split table"),
        ([], "top level: expected an object, got list"),
        ({"schema": 2, "kind": "attn-split-table", "tables": []}, "schema/kind: expected 1 / 'attn-split-table'"),
        (table_doc(dtype="float32"), "tables[0].dtype: expected one of bfloat16, float16, got 'float32'"),
        (table_doc(arm="fused"), "tables[0].arm: expected one of tiled, onepass, got 'fused'"),
        (table_doc(device=""), "tables[0].device: expected a device name, got ''"),
        (table_doc([(8, 1024, 128, 0)]), "tables[0].points[0].splits: expected an int 1..64, got 0"),
        (table_doc([(8, 1024, 128, 65)]), "tables[0].points[0].splits: expected an int 1..64, got 65"),
        (table_doc([(8, 1024, 128, 4), (8, 1.5, 128, 4)]), "tables[0].points[1].context: expected an int at least 1"),
        (table_doc([(8, 1024, 128, 4), (8, 1024, 128, 8)]), "measured twice: (8, 1024, 128)"),
        (table_doc([]), "tables[0].points: expected a non-empty list"),
    ],
)
def test_a_malformed_table_names_the_file_and_the_field(tmp_path: Path, doc: object, message: str) -> None:
    path = write(tmp_path / "bad.json", doc)
    with pytest.raises(split_table.SplitTableError) as err:
        split_table.load(path)
    assert str(err.value).startswith(f"{path.resolve()}: ") and message in str(err.value)


def test_a_malformed_table_fails_the_call_that_consults_it(on_an_h200: None, tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.json", table_doc([(8, 1024, 128, 0)]))
    with split_table.active(True, bad), pytest.raises(split_table.SplitTableError, match="bad.json"):
        shape(1, 8, 1024).splits()
    with split_table.active(False, bad):
        assert shape(1, 8, 1024).splits() == RULE  # off: the file is never read


def test_one_table_in_two_files_names_both(tmp_path: Path) -> None:
    write(tmp_path / "a.json", table_doc())
    write(tmp_path / "b.json", table_doc())
    with pytest.raises(
        split_table.SplitTableError, match=r"b\.json: the table for NVIDIA H200 bfloat16 tiled is also in .*a\.json"
    ):
        split_table.load(tmp_path)


def test_a_folder_holds_every_devices_tables(tmp_path: Path) -> None:
    write(tmp_path / "h200.json", table_doc())
    write(tmp_path / "h100.json", table_doc(device="NVIDIA H100 80GB HBM3", dtype="float16"))
    assert set(split_table.load(tmp_path)) == {
        (DEVICE, "bfloat16", "tiled"),
        ("NVIDIA H100 80GB HBM3", "float16", "tiled"),
    }


@needs_gpu
@pytest.mark.gpu
def test_on_the_gpu_the_flag_launches_the_tables_split_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two-pass arm under VT_ATTN_SPLIT_TABLE with a hand-made table for this device: the count it launched is the
    table's (the launch's own partial buffers, and the lookup's counter for the call alone), and its output is bit for
    bit the pipelined pass launched at that count; the flag off launches the rule's."""
    x = cases.paged_inputs(
        3, torch.device("cuda"), dtype=torch.bfloat16, ctx=1000, d=128, group=4, block_size=16, window=None
    )
    args = cases._args(x)
    s = paged_attn_tiled.Shape.of(x["q"], x["k_cache"], x["block_tables"])
    rows, cap = s.batch * s.hkv, s.max_blocks * s.block_size
    rule = paged_attn_tiled.num_splits(rows, cap, 128, torch.bfloat16, s.device_index)
    want = 7 if rule != 7 else 3  # not the rule's count
    name = torch.cuda.get_device_name(s.device_index)
    path = write(tmp_path / "mine.json", table_doc([(rows, cap, 128, want)], device=name))
    op = kernels.paged_decode_attention
    on = FlagSnapshot.defaults().with_(VT_ATTN_SPLIT_TABLE=True, VT_ATTN_ONEPASS=False)  # the two-pass arm's table
    launched: list[int] = []  # the split counts the launches sized their partial buffers for
    partials = paged_attn_tiled.Shape.partials

    def recording(self, splits, *rest, **kw):
        launched.append(splits)
        return partials(self, splits, *rest, **kw)

    monkeypatch.setattr(paged_attn_tiled.Shape, "partials", recording)
    with split_table.use(path):
        arm = op.choose(on, *args)
        assert arm in ("tiled_pipelined_pdl", "tiled_pipelined"), arm
        split_table.HITS.clear()  # the call's own counts, not the choice's
        got = op(on, *args)
        assert split_table.HITS[("tiled", want)] >= 1 and all(n == want for _, n in split_table.HITS)
        assert launched and set(launched) == {want}, launched
        launched.clear()
        off = op(on.with_(VT_ATTN_SPLIT_TABLE=False), *args)  # the two-pass arm at the rule's count
        assert launched and set(launched) == {rule}, launched
    pdl = arm == "tiled_pipelined_pdl"
    same = paged_attn_tiled.launch_decode(*args, splits=want, pipelined=True, pdl=pdl)
    ruled = paged_attn_tiled.launch_decode(*args, splits=rule, pipelined=True, pdl=pdl)
    assert torch.equal(got, same)
    assert torch.equal(off, ruled)  # the flag off: the rule's launch


@needs_gpu
@pytest.mark.gpu
def test_on_the_gpu_the_one_pass_arm_takes_its_own_table(tmp_path: Path) -> None:
    """With VT_ATTN_ONEPASS on, the one-pass arm launches the count of the table for arm `onepass`, bit for bit its
    launch at that count; the tiled arms' table does not reach it."""
    x = cases.paged_inputs(
        4, torch.device("cuda"), dtype=torch.bfloat16, ctx=1000, d=128, group=2, block_size=16, window=None
    )
    args = cases._args(x)
    s = paged_attn_tiled.Shape.of(x["q"], x["k_cache"], x["block_tables"])
    rows, cap = s.batch * s.hkv, s.max_blocks * s.block_size
    name = torch.cuda.get_device_name(s.device_index)
    doc = table_doc([(rows, cap, 128, 5)], device=name, arm="onepass")
    doc["tables"].append(table_doc([(rows, cap, 128, 9)], device=name)["tables"][0])  # the tiled arms': not this one
    on = FlagSnapshot.defaults().with_(VT_ATTN_SPLIT_TABLE=True, VT_ATTN_ONEPASS=True)
    split_table.HITS.clear()
    with split_table.use(write(tmp_path / "both.json", doc)):
        assert kernels.paged_decode_attention.choose(on, *args) == "tiled_onepass"
        got = kernels.paged_decode_attention(on, *args)
    assert set(split_table.HITS) == {("onepass", 5)}
    assert torch.equal(got, paged_attn_onepass.launch_decode(*args, splits=5))


def test_a_point_that_kept_the_rule_gives_the_shape_back_to_the_rule(tmp_path: Path) -> None:
    """A measured point whose fastest count did not beat the rule's stores the rule's count for its own capacity;
    a nearby shape must not inherit it: the rule decides there at its own capacity."""
    doc = table_doc([(8, 1024, 128, 16), (64, 1024, 128, 4)])
    doc["tables"][0]["points"][0]["rule"] = 16  # kept the rule's 16: no win
    table = split_table.load(write(tmp_path / "kept.json", doc))[(DEVICE, "bfloat16", "tiled")]
    assert table.lookup(8, 1056, 128) is None and table.lookup(64, 1056, 128) == 4
    bad = table_doc([(8, 1024, 128, 16)])
    bad["tables"][0]["points"][0]["rule"] = 0
    with pytest.raises(split_table.SplitTableError, match=r"points\[0\]\.rule: expected an int at least 1, got 0"):
        split_table.load(write(tmp_path / "bad.json", bad))


def test_a_capacity_one_tile_past_the_grid_is_in_and_lookups_are_remembered(table: split_table.Table) -> None:
    assert table.lookup(8, 4096 + 32, 128) == 32  # a 4096-token model's capacity in blocks of 32
    assert table.lookup(8, 4096 + 64, 128) == 32 and table.lookup(8, 4096 + 65, 128) is None
    assert table.memo[(8, 4096 + 32, 128)] == 32  # a launch's second and third asks read the memo


def test_a_table_repeating_the_rule_changes_nothing_and_is_not_counted(on_an_h200: None, tmp_path: Path) -> None:
    """The flip protocol's "did it run" reads HITS: a table whose count is the rule's ran nothing new."""
    same = write(tmp_path / "same.json", table_doc([(8, 1024, 128, RULE), (64, 4096, 128, RULE)]))
    split_table.HITS.clear()
    with split_table.active(True, same):
        assert shape(1, 8, 1024).splits() == RULE
    assert not split_table.HITS
    with split_table.active(True):  # the fixture's table: 16, not the rule's 5
        assert shape(1, 8, 1024).splits() == 16
    assert split_table.HITS == {("tiled", 16): 1}
