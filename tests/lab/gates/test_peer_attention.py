"""`--attn-peer`: a peer's paged decode attention in place of the engine's arms, judged by the gates (CPU)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from engine import kernels
from engine.flags import FlagSnapshot
from engine.model.config import load_config
from engine.ops import paged_attn
from lab.bench import attn_peers
from lab.cli import main
from lab.gates import peer_attention
from lab.gates.peer_attention import Peer

# two short prompts, a few decode steps: enough positions for the seeded bug, seconds on the CPU
SMALL = ["--prompt-ids", "1,2,3,4,5,6,7", "--prompt-ids", "9,8,7,6,5,4,3,2,1,11,12", "--max-new-tokens", "10"]


def paged(
    lens: list[int], block: int = 4, hq: int = 4, hkv: int = 2, d: int = 16, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """A scattered paged cache holding `lens` keys per sequence, its block tables and one query row each."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-n // block) for n in lens]
    width = max(need) + 1  # a spare column: tables are wider than what a sequence uses
    order = torch.randperm(sum(need) + 3, generator=g)
    table = torch.zeros(len(lens), width, dtype=torch.int32)
    at = 0
    for b, n in enumerate(need):
        table[b, :n] = order[at : at + n]
        at += n
    k = torch.randn(sum(need) + 3, block, hkv, d, generator=g)
    v = torch.randn(sum(need) + 3, block, hkv, d, generator=g)
    q = torch.randn(len(lens), hq, d, generator=g)
    return q, k, v, table, torch.tensor(lens, dtype=torch.int32)


@pytest.mark.parametrize("window", [None, 1, 5])
def test_the_sdpa_peer_on_the_paged_cache_equals_the_reference(window: int | None) -> None:
    q, k, v, table, lens = paged([1, 6, 13, 4])
    ours = attn_peers.sdpa_paged("MATH")(q, k, v, table, lens, 0.25, window)
    ref = paged_attn.paged_decode_attention(q, k, v, table, lens, 0.25, window)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_a_one_key_sequence_never_reaches_the_sdpa_backend() -> None:
    """cuDNN refuses one key (a GPU run's calib step failed on it); one logit's softmax is exactly 1, so the peer
    answers with the key's V itself. Here the cuDNN backend has no CPU kernel at all: a call into it would raise."""
    q, k, v, table, lens = paged([1, 1])
    ours = attn_peers.sdpa_paged("CUDNN_ATTENTION")(q, k, v, table, lens, 0.25)
    ref = paged_attn.paged_decode_attention(q, k, v, table, lens, 0.25)
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)
    with pytest.raises(RuntimeError):  # the backend this sidesteps, on a sequence of two keys
        attn_peers.sdpa_paged("CUDNN_ATTENTION")(q, k, v, table, lens + 1, 0.25)


def test_the_page_table_is_flashinfer_csr_of_the_blocks_in_use() -> None:
    table = torch.tensor([[7, 2, 9], [4, 0, 0], [1, 3, 5]], dtype=torch.int32)
    indptr, indices, last = attn_peers.page_table(table, torch.tensor([5, 4, 9], dtype=torch.int32), 4)
    assert indptr.tolist() == [0, 2, 3, 6]
    assert indices.tolist() == [7, 2, 4, 1, 3, 5]
    assert last.tolist() == [1, 4, 1]


def call_log(monkeypatch: pytest.MonkeyPatch, name: str, kernel) -> list[int]:
    """Register a CPU peer `name` whose calls are logged (batch size per call): the list it appends to."""
    seen: list[int] = []

    def make(_device: torch.device):
        def run(q, *args):
            seen.append(q.shape[0])
            return kernel(q, *args)

        return run

    monkeypatch.setitem(peer_attention.PEERS, name, Peer(name, "a test peer", make, cuda_only=False))
    monkeypatch.setattr(peer_attention, "CHOICES", (peer_attention.ENGINE, *peer_attention.PEERS))
    return seen


def test_the_injected_peer_takes_every_decode_call_and_is_counted(monkeypatch, capsys) -> None:
    seen = call_log(monkeypatch, "logged", paged_attn.paged_decode_attention)
    assert main(["gate", "neartie", "--attn-peer", "logged", "--dtype", "float32", *SMALL]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(seen) == 9 * 3  # 9 decode steps (the first token is the prefill's) x 3 layers, both rows each
    assert set(seen) == {2}
    assert f"  paged_decode_attention/peer:logged {len(seen)}" in out
    assert not any(ln.startswith("  paged_decode_attention/reference") for ln in out)  # the peer took them all
    assert any(ln.startswith("run logged float32: PASS: 20 positions over 2 prompts: ") for ln in out)
    assert out[-1].startswith("neartie: PASS: ")
    assert kernels.paged_decode_attention.injected is None  # cleared after the run


def test_a_peer_that_drops_the_last_key_fails_the_razor(monkeypatch, capsys) -> None:
    """The seeded bug: the query's own key left out. The razor judges the peer's output, so it fails."""

    def drop_last(q, k, v, table, lens, scale, window=None):
        return paged_attn.paged_decode_attention(q, k, v, table, (lens - 1).clamp(min=1), scale, window)

    seen = call_log(monkeypatch, "drops-last-key", drop_last)
    assert main(["gate", "neartie", "--attn-peer", "drops-last-key", "--dtype", "float32", *SMALL]) == 1
    out = capsys.readouterr().out.splitlines()
    assert seen
    assert out[-1].startswith("neartie: FAIL: ")
    counts = [int(w) for w in out[-1].split(": ", 2)[2].replace(",", "").split() if w.isdigit()]
    assert counts[0] == 20 and counts[1] < 20  # positions, exact: some are not


def test_the_token_gate_takes_the_peer_too(monkeypatch, capsys) -> None:
    seen = call_log(monkeypatch, "logged", paged_attn.paged_decode_attention)
    assert main(["gate", "tokens", "--attn-peer", "logged", *SMALL]) == 0
    out = capsys.readouterr().out.splitlines()
    assert seen and out[-1] == "tokens: PASS: 20 tokens over 2 prompts equal the oracle's"


def test_a_peer_that_never_ran_fails_the_gate(monkeypatch, capsys) -> None:
    """One new token is the prefill's: no decode step, no peer call, so the gate has judged no peer output."""
    call_log(monkeypatch, "logged", paged_attn.paged_decode_attention)
    args = ["gate", "neartie", "--attn-peer", "logged", "--dtype", "float32", "--prompt-ids", "1,2,3"]
    assert main([*args, "--max-new-tokens", "1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == (
        "FAIL: --attn-peer logged ran 0 times (paged_decode_attention/peer:logged): the gate judged no output of the peer"
    )
    assert out[-1].startswith("neartie: PASS: ")  # the positions pass; the gate does not


def test_a_windowed_model_runs_the_math_peer_token_exact(tiny_checkpoint, capsys) -> None:
    """A sliding window (5 tokens, shorter than every context here) handled by the peer: tokens equal."""
    model = tiny_checkpoint(
        "dense",
        seed=3,
        use_sliding_window=True,
        sliding_window=5,
        layer_types=["full_attention", "sliding_attention"],
    )
    assert load_config(model).sliding_windows == (None, 5)
    assert main(["gate", "tokens", "--model", str(model), "--attn-peer", "sdpa-math", *SMALL]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("tokens: PASS: ")


def test_each_peer_is_judged_on_its_own_with_one_ledger_record_per_run(monkeypatch, capsys, tmp_path) -> None:
    call_log(monkeypatch, "logged", paged_attn.paged_decode_attention)
    args = ["gate", "neartie", "--attn-peer", "engine", "--attn-peer", "logged", "--dtype", "float32", *SMALL]
    assert main([*args, "--ledger", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in out if ln.startswith("run ")] == ["run engine float32", "run logged float32"]
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]
    assert [r["results"]["attn_peer"] for r in records] == ["engine", "logged"]
    assert [r["rows"] for r in records] == [["ENGINE-GATES"], ["ENGINE-GATES", "ENGINE-PERF"]]
    assert records[1]["results"]["arms"]["paged_decode_attention/peer:logged"] == 27
    assert "paged_decode_attention/peer:logged" not in records[0]["results"]["arms"]
    assert records[1]["summary"].startswith(
        "neartie on tiny-qwen3 (float32, decode attention: logged, oracle attention: eager): PASS: "
    )


def test_the_same_ids_are_judged_against_each_oracle_attention(monkeypatch, capsys, tmp_path) -> None:
    """--oracle-attn eager and sdpa: our ids generated once (the peer's calls counted once), judged twice."""
    seen = call_log(monkeypatch, "logged", paged_attn.paged_decode_attention)
    args = ["gate", "neartie", "--attn-peer", "logged", "--oracle-attn", "eager", "--oracle-attn", "sdpa"]
    assert main([*args, "--dtype", "float32", *SMALL, "--ledger", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(seen) == 27
    runs = [ln for ln in out if ln.startswith("run ")]
    assert [ln.split(": ")[0] for ln in runs] == ["run logged float32", "run logged float32 oracle-sdpa"]
    assert all(re.search(r"\[peer calls 27; [0-9.]+ s\]$", ln) for ln in runs)
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]
    assert sorted(r["results"]["oracle_attn"] for r in records) == ["eager", "sdpa"]
    assert out[-1].startswith("neartie: PASS: logged/float32: PASS: ")


def test_a_dtype_the_peer_does_not_take_is_skipped_with_the_reason(monkeypatch, capsys) -> None:
    """The razor's default dtypes are the checkpoint's (float32) and bfloat16: a bf16-only peer runs bf16."""
    call_log(monkeypatch, "logged", paged_attn.paged_decode_attention)
    only_bf16 = Peer("logged", "a test peer", peer_attention.PEERS["logged"].make, (torch.bfloat16,), cuda_only=False)
    monkeypatch.setitem(peer_attention.PEERS, "logged", only_bf16)
    assert main(["gate", "neartie", "--attn-peer", "logged", "--prompt-ids", "1,2,3", "--max-new-tokens", "3"]) == 0
    captured = capsys.readouterr()
    assert "neartie: logged skips float32: --attn-peer logged takes bfloat16, not float32: pass --dtype bfloat16" in (
        captured.err
    )
    assert [ln.split(":")[0] for ln in captured.out.splitlines() if ln.startswith("run ")] == ["run logged bfloat16"]


def test_a_misspelled_peer_is_an_error_naming_the_peers(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["gate", "neartie", "--attn-peer", "flashinfr"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --attn-peer: invalid choice: 'flashinfr' (choose from " in err
    assert all(name in err for name in ("engine", "flashinfer-tc", "sdpa-cudnn", "sdpa-math"))


@pytest.mark.parametrize("name", ["flashinfer-tc", "flashinfer"])
def test_flashinfer_absent_names_the_package_and_version(monkeypatch, capsys, name: str) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # an import of it raises ImportError
    assert main(["gate", "neartie", "--attn-peer", name, "--device", "cuda", "--dtype", "bfloat16"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --attn-peer {name} needs FlashInfer: not installed (pip install flashinfer-python==0.5.3)"
    )


def test_refusals_name_the_device_the_dtype_and_the_group(monkeypatch, tiny_model_dir: Path) -> None:
    config = load_config(tiny_model_dir)
    refusal = peer_attention.refusal
    assert refusal("engine", config, torch.float32, "cpu") is None
    assert refusal("sdpa-math", config, torch.float32, "cpu") is None
    assert refusal("sdpa-cudnn", config, torch.bfloat16, "cpu") == (
        "--attn-peer sdpa-cudnn runs on CUDA only: pass --device cuda (sdpa-math runs on the CPU)"
    )
    assert refusal("sdpa-flash", config, torch.float32, "cuda") == (
        "--attn-peer sdpa-flash takes bfloat16/float16, not float32: pass --dtype bfloat16"
    )
    monkeypatch.setattr(peer_attention, "import_flashinfer", lambda: None)  # as if installed
    g16 = dataclasses.replace(config, num_attention_heads=16, num_key_value_heads=1, head_dim=128)
    assert refusal("flashinfer", g16, torch.bfloat16, "cuda") == (
        "--attn-peer flashinfer takes 1, 2, 3, 4, 8 query heads per KV head; this model has 16 (16/1): "
        "flashinfer-tc takes any"
    )
    assert refusal("flashinfer-tc", g16, torch.bfloat16, "cuda") is None
    assert refusal("flashinfer-tc", config, torch.bfloat16, "cuda") == (
        "--attn-peer flashinfer-tc takes head_dim 64, 128, 256; this model has 32"
    )


def test_peer_runs_are_eager() -> None:
    base = FlagSnapshot.defaults()
    assert peer_attention.flags("engine", base) == base
    assert peer_attention.flags("sdpa-cudnn", base).enabled("VT_EAGER")


def _distances(out: list[str]) -> dict[str, float]:
    """Each run line's log-prob distance, by its run name."""
    found = {}
    for ln in out:
        m = re.match(r"run (\S+ \S+(?: oracle-\S+)?): .*log-prob distance ([0-9.e+-]+) nats", ln)
        if m:
            found[m.group(1)] = float(m.group(2))
    return found


def test_the_peers_set_the_engines_logprob_limit(monkeypatch, capsys) -> None:
    """--logprob-limit-from-peers: the production peers run first and are measured, not judged; the engine's limit
    is the margin times the largest peer distance, never below the setting's own. A peer whose distance is 40x the
    setting's limit lifts the engine's limit past its own distance; without the option the same engine fails nothing
    and the peer fails the setting's limit (the calibration's long-context case)."""

    def noisy(q, k, v, table, lens, scale, window=None):  # a production kernel far from the oracle in log-probs
        out = paged_attn.paged_decode_attention(q, k, v, table, lens, scale, window)
        return out * (1 + 3e-3)

    call_log(monkeypatch, "noisy", noisy)
    base = ["gate", "neartie", "--dtype", "float32", "--razor-setting", "fp32-probs", *SMALL]
    plain = [*base, "--attn-peer", "engine", "--attn-peer", "noisy"]
    assert main(plain) == 1  # the peer fails the setting's own limit
    out = capsys.readouterr().out.splitlines()
    floor = kernels.FP32_PROBS_RAZOR.logprob_limit("float32")
    assert floor is not None
    before = _distances(out)
    assert before["noisy float32 oracle-online"] > floor > before["engine float32 oracle-online"]

    # the engine named first: the production peer still runs first
    assert main([*base, "--attn-peer", "engine", "--attn-peer", "noisy", "--logprob-limit-from-peers", "1.5"]) == 0
    out = capsys.readouterr().out.splitlines()
    runs = [ln for ln in out if ln.startswith("run ")]
    assert [ln.split(":")[0] for ln in runs] == ["run noisy float32 oracle-online", "run engine float32 oracle-online"]
    assert "not judged" in runs[0]
    peer = _distances(out)["noisy float32 oracle-online"]
    assert f"the limit {1.5 * peer:.3g} = max({floor:g}, 1.5 x {peer:.3g}, noisy's distance)" in runs[1]

    # an engine further off than the margin allows fails: here the engine is the bf16 kernel, the peer the exact one
    call_log(monkeypatch, "exact", paged_attn.paged_decode_attention)
    monkeypatch.setattr(kernels.paged_decode_attention, "reference", noisy)  # the engine's own path on the CPU
    rc = main([*base, "--attn-peer", "engine", "--attn-peer", "exact", "--logprob-limit-from-peers", "1.5"])
    out = capsys.readouterr().out.splitlines()
    engine = next(ln for ln in out if ln.startswith("run engine"))
    assert rc == 1 and "exceeds the limit" in engine and f"max({floor:g}, 1.5 x" in engine, engine


def test_the_peers_limit_needs_the_engine_a_peer_and_a_logprob_rule(monkeypatch, capsys) -> None:
    call_log(monkeypatch, "logged", paged_attn.paged_decode_attention)
    base = ["gate", "neartie", "--dtype", "float32", *SMALL, "--logprob-limit-from-peers"]
    both = ["--attn-peer", "engine", "--attn-peer", "logged"]
    for args, message in (
        (["1.2", "--razor-setting", "fp32-probs", "--attn-peer", "logged"], "needs --attn-peer engine and at least "
         "one production peer"),
        (["0.9", "--razor-setting", "fp32-probs", *both], "--logprob-limit-from-peers 0.9: the margin must be at least 1"),
        (["1.2", *both], "the razor setting has no log-prob rule (--razor-setting)"),
    ):  # fmt: skip
        assert main([*base, *args]) == 2
        err = capsys.readouterr().err
        assert "error: --logprob-limit-from-peers" in err and message in err, err


def test_the_token_divergence_is_reported_beside_the_peers(monkeypatch, capsys) -> None:
    """--divergence-beside-peers: the production peers run first; every run's diverging prompts are counted and
    reported, none judged on them (the seeded divergence fails the gate without the option); a run with no
    production peer beside the engine fails."""

    def drop_last(q, k, v, table, lens, scale, window=None):  # diverges from the oracle's tokens
        return paged_attn.paged_decode_attention(q, k, v, table, (lens - 1).clamp(min=1), scale, window)

    call_log(monkeypatch, "off", drop_last)
    base = ["gate", "tokens", "--dtype", "float32", *SMALL, "--divergence-beside-peers"]
    assert main([*base, "--attn-peer", "engine", "--attn-peer", "off"]) == 0
    out = capsys.readouterr().out.splitlines()
    runs = [ln for ln in out if ln.startswith("run ")]
    assert [ln.split(":")[0] for ln in runs] == ["run off float32", "run engine float32"]  # the peer first
    off = re.search(r"(\d) of 2 prompts diverge", runs[0])
    assert off and "(measured, not judged)" in runs[0]
    assert runs[1].startswith("run engine float32: PASS: 20 tokens over 2 prompts equal the oracle's (measured")
    assert f"the production kernels' diverging prompts: off {off.group(1)}" in runs[1]
    assert main(["gate", "tokens", "--dtype", "float32", *SMALL, "--attn-peer", "engine", "--attn-peer", "off"]) == 1
    capsys.readouterr()  # without the option the peer's divergence fails the gate

    assert main([*base, "--attn-peer", "off"]) == 2  # no engine run beside the peers
    assert "error: --divergence-beside-peers: needs --attn-peer engine" in capsys.readouterr().err
