"""The whole persistent decode step (engine/cuda/persistent_schedule.py `build_model_step`: embedding, layers, final
norm, LM head) run on virtual SMs (lab/persistent/sim.py): every interleaving drawn gives the engine's own
Qwen3ForCausalLM's logits bit for bit in fp32 (and its final hidden state and K/V caches), at batch 1 and 8, with
the head tied to the embedding or not, and at Qwen3-0.6B's layer shapes with the time model's tiles; a head tile
without its wait on the final norm, and a first norm without its wait on the embedding, are caught statically and as
a read-before-write; the kernel binding refuses the new kinds by name; the time model's whole-step floor. CPU
only."""

from __future__ import annotations

import pytest
import torch

from engine.cuda import persistent
from engine.cuda.persistent_schedule import Kind, Schedule, build, build_model_step, build_step
from lab.persistent import case as C
from lab.persistent.__main__ import TILES, drop_wait
from lab.persistent.check import check
from lab.persistent.model import (
    HEAD_COLS,
    VOCAB,
    Machine,
    estimate,
    qwen3_0_6b,
    qwen3_0_6b_step,
    render_step,
    step_floor_bytes,
)
from lab.persistent.sim import ReadBeforeWrite, simulate

LENS = {1: [37], 8: [37, 5, 64, 100, 1, 17, 33, 80]}
VOCAB_SMALL, COLS_SMALL = 400, 64  # six tiles of 64 and a tail of 16


def _model(batch: int, layers: int = 2, tied: bool = True, seed: int | None = None) -> tuple[C.ModelCase, Schedule]:
    case = C.make_model(C.SMALL, LENS[batch], seed=batch if seed is None else seed, layers=layers,
                        vocab=VOCAB_SMALL, tied=tied)  # fmt: skip
    return case, build_model_step(case.shape(True, **TILES), layers, VOCAB_SMALL, COLS_SMALL)


def _run_against_engine(case: C.ModelCase, sch: Schedule, sms: int, seed: int, check_reads: bool = True):
    ref_step, sim_step = case.fresh_step(True), case.fresh_step(True)
    ref = C.reference_model(case, ref_step)
    run = simulate(sch, case.weights, sim_step, sms=sms, seed=seed, check_reads=check_reads, model=case.head)
    same = {k: torch.equal(run.buffers[k], ref[k]) for k in ref}
    same["caches"] = all(torch.equal(a, b) for x, y in zip(sim_step.caches(), ref_step.caches()) for a, b in zip(x, y))
    return run, ref, same


@pytest.mark.parametrize(("batch", "tied"), [(1, True), (8, True), (8, False)])
def test_every_interleaving_of_the_whole_step_is_bitwise_the_engines_logits(batch: int, tied: bool):
    case, sch = _model(batch, tied=tied)
    assert (case.head.head is case.head.embed) is tied  # Qwen3-0.6B's tying: the head is the embedding's tensor
    assert check(sch) == []
    orders = set()
    for seed, sms in enumerate((1, 3, 7, 16, 64)):
        run, ref, same = _run_against_engine(case, sch, sms, seed)
        assert same == {"final": True, "logits": True, "caches": True}, (seed, sms)
        orders.add(tuple(run.order))
    assert len(orders) == 5  # five interleavings, not one order five times
    assert ref["logits"].shape == (batch, VOCAB_SMALL) and bool(ref["logits"].isfinite().all())
    assert torch.equal(run.buffers["x"], case.head.embed[case.step.ids])  # the EMBED tasks gathered the tokens' rows


def test_the_whole_steps_table():
    case, sch = _model(8, layers=3)
    b, layer_tasks = 8, len(build_step(case.shape(True, **TILES), 1).tasks)
    kinds = [t.kind for t in sch.tasks]
    assert len(sch.tasks) == b + 3 * layer_tasks + b + 7 and sch.layers == 3 and sch.vocab == VOCAB_SMALL
    assert kinds[:b] == [Kind.EMBED] * b and kinds[-7 - b :] == [Kind.FINAL_NORM] * b + [Kind.HEAD] * 7
    assert sch.inputs() == {"ids"} and sch.buffers()["logits"] == (8, 400) and sch.buffers()["ids"] == (8, 1)
    rows = sch.encode()
    embed = sch.counters.index("embed")
    assert rows[0] == [int(Kind.EMBED), 0, 0, -1, -1, -1, -1, -1, -1, -1, embed]  # no wait: the ids are the input
    qkv = sch.tasks[b + 3]  # layer 0's q/k/v tiles wait for every row's embedding
    assert (qkv.kind, qkv.layer, qkv.waits) == (Kind.QKV, 0, ((embed, b),))
    down = sch.counters.index("L2.down")
    final = [t for t in sch.tasks if t.kind == Kind.FINAL_NORM]
    assert {t.waits for t in final} == {((down, 256 // 48 + 1),)} and {t.layer for t in final} == {2}
    assert [r.buffer for r in final[0].reads] == ["L2.mlp", "L2.res2"]
    heads = [t for t in sch.tasks if t.kind == Kind.HEAD]
    assert [t.args for t in heads] == [(c, c + 64) for c in range(0, 384, 64)] + [(384, 400)]
    assert {t.waits for t in heads} == {((sch.counters.index("final_norm"), 8),)}
    assert sum(t.weight_elems for t in heads) == 400 * 256  # the head streamed once, in tiles
    # the layers' own tables are as they were: no ids, no head
    assert build_step(case.shape(False, **TILES), 2).inputs() == {"x", "residual"}
    with pytest.raises(ValueError, match="vocab 0"):
        build_model_step(case.shape(True, **TILES), 1, 0, 64)


def test_the_head_without_its_wait_on_the_final_norm_is_caught_both_ways():
    case, sch = _model(8, seed=11)
    bad, index = drop_wait(sch, Kind.HEAD)
    final = [t.index for t in sch.tasks if t.kind == Kind.FINAL_NORM]
    assert check(bad) == [
        f"task {index} (HEAD) reads final written by task {f} (FINAL_NORM) without waiting for it" for f in final
    ]
    caught = []
    for seed in range(6):
        try:
            simulate(bad, case.weights, case.fresh_step(True), sms=16, seed=seed, model=case.head)
        except ReadBeforeWrite as exc:
            caught.append(seed)
            assert str(exc) == f"seed {seed}: task {index} (HEAD (0, 64)) read final[0:8, 0:256] before it was written"
    assert caught, "no interleaving ran the head before the final norm finished"
    # unchecked, the same interleaving multiplies the head by the NaN of unwritten rows: wrong logits
    _, _, same = _run_against_engine(case, bad, 16, caught[0], check_reads=False)
    assert same["logits"] is False and same["final"] is True


def test_a_first_tile_without_its_wait_on_the_embedding_is_caught_both_ways():
    case, sch = _model(1, seed=12)
    bad, index = drop_wait(sch, Kind.QKV)
    assert (index, check(bad)) == (1, ["task 1 (QKV) reads x written by task 0 (EMBED) without waiting for it"])
    caught = []
    for seed in range(10):
        try:
            simulate(bad, case.weights, case.fresh_step(True), sms=2, seed=seed, model=case.head)
        except ReadBeforeWrite as exc:
            caught.append(seed)
            assert str(exc) == f"seed {seed}: task 1 (QKV (0, 0, 32)) read x[0:1, 0:256] before it was written"
    assert caught, "no interleaving ran the first tile before the embedding finished"
    _, _, same = _run_against_engine(case, bad, 2, caught[0], check_reads=False)
    assert same == {"final": False, "logits": False, "caches": False}  # NaN from the first tile on


def test_the_kernel_binding_takes_the_whole_step_and_refuses_past_its_layers():
    _, sch = _model(1)
    kinds = frozenset(t.kind for t in sch.tasks)
    assert kinds == persistent.BUILT and persistent.refusal(sch, kinds, torch.bfloat16) is None
    too_many = build_model_step(sch.shape, persistent.MAX_LAYERS + 1, 64, 32)
    assert persistent.refusal(too_many, kinds, torch.bfloat16) == "65 layers (at most 64 a launch)"


def test_the_whole_steps_floor_counts_the_head_once():
    layer = 1024 * (2048 + 1024 + 1024) + 2048 * 1024 + 3 * 1024 * 3072  # q, k, v, o, gate, up, down
    head = 151936 * 1024  # tied: the embedding's matrix, read by the head; one embedding row per token besides
    assert VOCAB == 151936 and head * 2 == 311_164_928
    assert step_floor_bytes(qwen3_0_6b(1, 1024), 28, VOCAB) == 2 * (28 * layer + head + 1024) == 1_191_970_816
    kv = 2 * 8 * 1024 * 8 * 128  # b8, context 1024: K and V of every key, one layer
    assert step_floor_bytes(qwen3_0_6b(8, 1024), 28, VOCAB) == 2 * (28 * (layer + kv) + head + 8 * 1024)
    m = Machine()
    step = estimate(qwen3_0_6b_step(1, 1024, layers=2), m, 1)
    assert step.floor_s == pytest.approx(step_floor_bytes(qwen3_0_6b(1, 1024), 2, VOCAB) / 4.2e12)
    assert step.by_kind["HEAD"][:2] == (1187, head * 2) and step.by_kind["EMBED"][:2] == (1, 2048)
    assert step.by_kind["FINAL_NORM"][0] == 1 and step.critical_s <= step.makespan_s
    layers = estimate(build(qwen3_0_6b(1, 1024)), m, 2)  # the same two layers, no embedding and no head
    assert step.floor_s - layers.floor_s == pytest.approx((head + 1024) * 2 / 4.2e12)
    assert step.makespan_s > layers.makespan_s
    table = render_step([(1, step, layers)], 2, 128).splitlines()
    assert table[0].endswith("in 128-column tiles (a model, not a measurement)") and "311.2 MB bf16, tied" in table[0]
    assert table[2].split()[:2] == ["1", f"{step.floor_s * 1e6:.1f}"] and table[2].split()[4] == f"{step.fraction:.1%}"


def test_the_command_line_runs_the_whole_step_and_catches_its_bug(capsys):
    from lab.persistent.__main__ import main

    assert main(["--seeds", "2", "--batch", "1", "--sms", "5", "--layers", "2", "--model-layers", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    tasks = {b: len(build_step(_model(b, layers=1)[0].shape(True, **TILES), 1).tasks) for b in (1, 8)}
    assert lines[-3] == (
        f"model step at batch 1 (embedding, 1 layer, final norm, head of 400 in 64-column tiles): {tasks[1] + 9} "
        "tasks, static check 0 problems; 2/2 interleavings bitwise equal to the engine's logits and caches"
    )
    head = 8 + tasks[8] + 8  # the first head tile, after the embeddings, the layer and the final norms at batch 8
    assert lines[-2].startswith(f"seeded bug (task {head}, head, without its wait on the final norm): static check 8 ")
    assert lines[-1] == "persistent layer: PASS"


def test_qwen3_0_6b_shapes_with_the_models_tiles_are_bitwise_too():
    case = C.make_model(C.QWEN3_0_6B, [300], seed=13, layers=1, vocab=1280)  # the real vocabulary is 151936
    sch = build_model_step(qwen3_0_6b(1, 300), 1, 1280, HEAD_COLS)  # the time model's tiles
    assert check(sch) == [] and sum(t.kind == Kind.HEAD for t in sch.tasks) == 10
    _, _, same = _run_against_engine(case, sch, 132, 0)
    assert same == {"final": True, "logits": True, "caches": True}
