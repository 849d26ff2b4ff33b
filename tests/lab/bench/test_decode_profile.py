"""`python -m lab bench decode --profile`: the per-step breakdown, its name grouping and phase attribution."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lab.bench import profile as prof
from lab.bench.profile import Event, breakdown, kernel_family, split_phases
from tests.lab.ledger_record import read_record

NAMES = [
    (
        "void vt::splitkv_partial_kernel<__nv_bfloat16, 4, 1>(vt::PagedArgs, float*, float*)",
        "vt::splitkv_partial_kernel",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >"
        "(int, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda(float)#1}, "
        "std::array<char*, 2ul>)",
        "at::native::vectorized_elementwise_kernel",
    ),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT", "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"),
    (
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8>("
        "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8::Params)",
        "cutlass::Kernel2[cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8]",
    ),
    (
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 5, false>(float*, float const*, int)",
        "{anon}::softmax_warp_forward",
    ),
    (
        "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, float, false, true>"
        "(cublasGemvParamsEx<int, __nv_bfloat16 const*, float>)",
        "internal::gemvx::kernel",
    ),
]


@pytest.mark.parametrize(("raw", "family"), NAMES, ids=[f for _, f in NAMES])
def test_kernel_names_lose_templates_parameters_and_return_type(raw: str, family: str) -> None:
    assert kernel_family(raw) == family


def test_breakdown_counts_per_step_and_shares_of_the_step() -> None:
    steps = 3
    events = []
    for g in range(19):  # 19 kernel groups: group g runs g+1 times a step, 7+g us each
        events += [Event(f"k{g}", "kernel", 7.0 + g)] * ((g + 1) * steps)
    events += [Event("Memcpy HtoD (Pageable -> Device)", "copy", 2.5)] * (5 * steps)
    events += [Event("cudaGraphLaunch", "launch", 0.0)] * steps + [Event("aten::mm", "op", 999.0)] * steps
    p = breakdown(events, steps, "kernel", "test")
    total = sum((g + 1) * (7.0 + g) for g in range(19)) + 5 * 2.5  # us per step; the CPU op is not device time
    assert p["kernels_per_step"] == sum(g + 1 for g in range(19))
    assert (p["copies_per_step"], p["launches_per_step"], p["groups"]) == (5, 1, 20)
    assert p["device_ms_per_step"] == pytest.approx(total / 1e3)
    assert len(p["top"]) == prof.TOP
    assert [r["name"] for r in p["top"][:2]] == ["k18", "k17"]
    assert p["top"][0] == {
        "name": "k18",
        "kind": "kernel",
        "count_per_step": 19.0,
        "ms_per_step": pytest.approx(19 * 25.0 / 1e3),
        "share": pytest.approx(19 * 25.0 / total),
    }
    ms = [r["ms_per_step"] for r in p["top"]]
    assert ms == sorted(ms, reverse=True)
    assert 0 < sum(r["share"] for r in p["top"]) < 1  # 5 groups left out
    assert breakdown([], 2, "kernel", "empty")["top"] == []


def test_the_critical_path_counts_each_kernel_past_the_work_started_before_it() -> None:
    # two steps of: a (0-10), b launched early as a dependent (4-16: waits for a, runs 6 us past it), a copy inside
    # b (8-9: nothing of its own on the path), 2 us idle, c (18-21); the second step 30 us later
    one = [
        Event("a", "kernel", 10, 0),
        Event("b", "kernel", 12, 4),
        Event("m", "copy", 1, 8),
        Event("c", "kernel", 3, 18),
    ]
    events = one + [Event(e.name, e.kind, e.us, (e.start or 0) + 30) for e in one]
    events += [Event("cudaGraphLaunch", "launch", 0.0)] * 2
    path, idle, span = prof.exposed(events)
    assert dict(path) == {("a", "kernel"): 20, ("b", "kernel"): 12, ("m", "copy"): 0, ("c", "kernel"): 6}
    assert (idle, span) == (2 + 9 + 2, 51)  # within each step, and between them
    assert sum(path.values()) + idle == span
    p = breakdown(events, 2, "kernel", "test")
    assert p["device_ms_per_step"] == pytest.approx(26e-3)  # past the 25.5 us span: b overlaps a
    assert (p["span_ms_per_step"], p["idle_ms_per_step"]) == (pytest.approx(25.5e-3), pytest.approx(6.5e-3))
    rows = {r["name"]: r for r in p["top"]}
    assert rows["b"]["ms_per_step"] == pytest.approx(12e-3) and rows["b"]["exposed_ms_per_step"] == pytest.approx(6e-3)
    assert rows["a"]["exposed_share"] == pytest.approx(20 / 51)
    text = prof.render({**p, "batch": 1})
    assert "device span per step" in text and "exposed" in text
    # without starts (a CPU profile, an older record) the breakdown has no critical path
    bare = breakdown([Event(e.name, e.kind, e.us) for e in one], 1, "kernel", "test")
    assert "span_ms_per_step" not in bare and "exposed_share" not in bare["top"][0]
    assert "device span" not in prof.render({**bare, "batch": 1})


def fake_event(
    name: str,
    start: float,
    end: float,
    device: str = "CPU",
    kind: str | None = "cpu_op",
    self_us: float = 0.0,
    annotation: bool = False,
) -> SimpleNamespace:
    return SimpleNamespace(
        name=name,
        time_range=SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start),
        device_type=SimpleNamespace(name=device),
        activity_type=kind,
        self_cpu_time_total=self_us,
        is_user_annotation=annotation,
    )


def test_events_go_to_the_phase_whose_range_holds_their_start() -> None:
    events = [
        fake_event(prof.PHASE + "graph", 0, 100, kind="user_annotation", annotation=True),
        fake_event(prof.PHASE + "eager", 100.5, 300, kind="user_annotation", annotation=True),
        fake_event("cudaGraphLaunch", 5, 9, kind="cuda_runtime"),
        fake_event("cudaMemcpyAsync", 10, 12, kind="cuda_runtime"),  # not a launch
        fake_event("void k<1>(int)", 20, 31, device="CUDA", kind="kernel"),
        fake_event(prof.PHASE + "graph", 0, 100, device="CUDA", kind="gpu_user_annotation"),  # spans kernels
        fake_event("aten::mm", 120, 140, self_us=17.0),
        fake_event("cudaLaunchKernel", 125, 126, kind="cuda_runtime"),
        fake_event("void k<2>(float)", 130, 150, device="CUDA", kind="kernel"),
        fake_event("Memset (Device)", 150, 151, device="CUDA", kind="gpu_memset"),
        fake_event("aten::add", 400, 410, self_us=3.0),  # a host op outside both phases
        fake_event("void k<3>()", -2, 5, device="CUDA", kind="kernel"),  # device work before the first phase
        # device clock skew: starts after its phase's host range ended (but before the next one began)
        fake_event("void g<1>()", 100.2, 102.2, device="CUDA", kind="kernel"),
        fake_event("void k<2>(float)", 300.5, 302, device="CUDA", kind="kernel"),
    ]
    got = split_phases(events, ["graph", "eager"])
    assert got == {
        "graph": [
            Event("cudaGraphLaunch", "launch", 0.0),
            Event("k", "kernel", 11, 20),
            Event("g", "kernel", 2, 100.2),
        ],
        "eager": [
            Event("aten::mm", "op", 17.0),
            Event("cudaLaunchKernel", "launch", 0.0),
            Event("k", "kernel", 20, 130),
            Event("Memset (Device)", "copy", 1, 150),
            Event("k", "kernel", 1.5, 300.5),
        ],
    }
    with pytest.raises(RuntimeError, match=r"no range for phase\(s\) \['warm'\]"):
        split_phases(events, ["graph", "warm"])


@pytest.mark.parametrize("graph_kernels", [True, False])
def test_graph_replay_breakdown_or_the_eager_fallback(graph_kernels: bool, monkeypatch) -> None:
    eager = [Event("gemv", "kernel", 30.0)] * 8 + [Event("cudaLaunchKernel", "launch", 0.0)] * 8
    graph = [Event("cudaGraphLaunch", "launch", 0.0)] * 4 + (
        [Event("gemv", "kernel", 29.0)] * 8 if graph_kernels else []
    )
    monkeypatch.setattr(prof, "_record", lambda runner, prompt, steps: ({"graph": graph, "eager": eager}, ""))
    p = prof.profile_decode(SimpleNamespace(device=torch.device("cuda")), [[1, 2]], 4)
    if graph_kernels:
        assert p["mode"] == "CUDA-graph replay" and p["launches_per_step"] == 1
        assert p["eager_check"] == {
            "kernels_per_step": 2,
            "copies_per_step": 0,
            "device_ms_per_step": 0.06,
            "launches_per_step": 2,
        }
    else:
        assert p["mode"].startswith("eager, VT_EAGER semantics (the profiler recorded no kernels")
        assert p["launches_per_step"] == 2 and "eager_check" not in p
    assert p["kernels_per_step"] == 2


def test_profile_counts_are_per_step(tiny_model_dir) -> None:
    """Profiling 2 and 3 steps gives the same count per step for the projections' matmuls."""
    from engine.runner import Runner

    runner = Runner(tiny_model_dir, max_batch=1, max_model_len=64)
    prompt = [5, 17, 3, 250, 9]
    two, three = (prof.profile_decode(runner, [prompt], n) for n in (2, 3))
    mm = [{r["name"]: r["count_per_step"] for r in p["top"]}.get("aten::mm") for p in (two, three)]
    assert mm[0] is not None and mm[0] == mm[1] and mm[0] >= 7  # q, k, v, o, gate, up, down at least
    assert two["kernels_per_step"] > 0 and not runner.blocks.lengths  # the profiled sequence was freed


def test_the_profile_decodes_the_whole_batch(tiny_model_dir, monkeypatch) -> None:
    """A profile of three prompts decodes three sequences at once, and says so (it once profiled the first alone,
    so a batch-8 bench printed the kernels of a batch-1 step)."""
    from engine.runner import Runner

    batches = []

    class Counting(prof.Session):  # type: ignore[misc,valid-type]
        def decode(self):
            batches.append(len(self.seq_ids))
            return super().decode()

    monkeypatch.setattr(prof, "Session", Counting)
    runner = Runner(tiny_model_dir, max_batch=4, max_model_len=64)
    p = prof.profile_decode(runner, [[5, 17, 3], [9, 250, 4, 8], [1, 2]], 2)
    assert batches and set(batches) == {3} and p["batch"] == 3
    assert "profile of 2 decode steps at batch 3" in prof.render(p)
    assert not runner.blocks.lengths  # the profiled sequences were freed
    with pytest.raises(ValueError, match="no prompts"):
        prof.profile_decode(runner, [], 2)


def test_overlapping_kernels_are_named_when_they_sum_past_the_step() -> None:
    p = {
        "steps": 2,
        "mode": "CUDA-graph replay",
        "unit": "kernel",
        "kernels_per_step": 2.0,
        "copies_per_step": 0.0,
        "launches_per_step": 1.0,
        "device_ms_per_step": 1.5,
        "top": [],
        "groups": 0,
    }
    assert "kernels overlap" in prof.render(p, 1.2) and "kernels overlap" not in prof.render(p, 1.6)


def test_decode_bench_profile_prints_and_records_the_breakdown(tmp_path, capsys) -> None:
    from lab.bench import decode

    argv = [
        "--tiny",
        "--context",
        "9",
        "--steps",
        "2",
        "--device",
        "cpu",
        "--no-oracle",
        "--profile",
        "--profile-steps",
        "2",
        "--ledger",
        str(tmp_path),
        "--allow-dirty",  # a test run, not evidence: the tree may be mid-edit
    ]
    assert decode.main(argv) == 0
    out = capsys.readouterr().out
    assert "profile of 2 decode steps at batch 1: eager (CPU: aten ops" in out and "ops per step" in out
    (path,) = tmp_path.glob("*-decode-step-profile.json")
    record = read_record(path)
    p = record["results"]["profile"]
    assert {"mode", "unit", "steps", "kernels_per_step", "device_ms_per_step", "top", "busy_fraction"} <= set(p)
    assert p["unit"] == "op" and p["steps"] == 2 and p["batch"] == 1
    assert p["kernels_per_step"] > 0 and p["device_ms_per_step"] > 0 and p["busy_fraction"] > 0
    assert 0 < len(p["top"]) <= prof.TOP
    assert all(r["count_per_step"] > 0 and r["ms_per_step"] >= 0 for r in p["top"])
    assert all(float(r["count_per_step"] * 2).is_integer() for r in p["top"])
    assert 0 < sum(r["share"] for r in p["top"]) <= 1 + 1e-9
    assert "ops and" in record["summary"]
    assert decode.main(argv[:-3] + ["--profile-steps", "0"]) == 2


@pytest.mark.gpu
def test_graph_replay_kernels_are_profiled(tiny_model_dir, monkeypatch) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the graph replay profile needs one")
    import engine.ops.gemv as gemv_ops
    from engine.runner import Runner

    # the eager step also runs the embedding's id-range check (a min and a max), which a capture skips by design
    # (engine/ops/_check.py values_checkable); without it both modes launch the same kernels
    monkeypatch.setattr(gemv_ops, "values_checkable", lambda t: False)

    runner = Runner(tiny_model_dir, dtype=torch.bfloat16, device="cuda", max_batch=1, max_model_len=64)
    p = prof.profile_decode(runner, [[5, 17, 3, 250, 9]], 3)
    assert runner.use_graph and p["kernels_per_step"] > 0
    # kineto on recent torch records kernels inside a replayed graph; if it does not, this says so
    assert p["mode"] == "CUDA-graph replay", p["mode"]
    assert p["kernels_per_step"] == p["eager_check"]["kernels_per_step"]
    assert p["launches_per_step"] < p["eager_check"]["launches_per_step"]


def test_kind_is_guessed_from_the_name_when_the_event_has_no_activity_type():
    from types import SimpleNamespace

    from lab.bench.profile import guess_kind

    def fe(name, device):
        return SimpleNamespace(name=name, device_type=SimpleNamespace(name=device))

    assert guess_kind(fe("void vt::rms_norm_kernel<__nv_bfloat16>(...)", "CUDA")) == "kernel"
    assert guess_kind(fe("Memcpy DtoD (Device -> Device)", "CUDA")) == "gpu_memcpy"
    assert guess_kind(fe("cudaGraphLaunch", "CPU")) == "cuda_runtime"
    assert guess_kind(fe("aten::mul", "CPU")) == "cpu_op"
