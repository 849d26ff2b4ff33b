"""The kernel table's declared device needs: an arm states the compute capability and opt-in shared memory it needs,
the table checks them against one cached probe of the input's device and counts a decline with its reason."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.cuda import device as cuda_device

SM80 = kernels.Device(0, (8, 0), 163 * 1024, 108)  # an A100's capability and opt-in ceiling
SM90 = kernels.Device(0, (9, 0), 227 * 1024, 132)  # an H200's


class FakeCuda:
    """Stands in for a CUDA tensor on device 0 (the table tries arms only for those): `n` is its size."""

    is_cuda = True
    device = torch.device("cuda", 0)

    def __init__(self, n: int) -> None:
        self.n = n


def _op() -> kernels.Op:
    def ref(x: FakeCuda) -> str:
        return "reference"

    return kernels.Op(
        ref,
        lambda x: None,
        [kernels.Arm("hopper", (), lambda x: x.n < 4, "n below 4", lambda x: "hopper", capability=(9, 0))],
    )


@pytest.fixture(autouse=True)
def _fresh_counts():
    kernels.reset_counts()
    yield
    kernels.reset_counts()


SNAP = kernels.FlagSnapshot.defaults()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device: the probe finds it")
def test_without_a_gpu_the_probe_says_so_and_every_arm_declines_with_that_reason() -> None:
    assert cuda_device.probe(0).missing == kernels.NO_CUDA == "no CUDA device"
    assert cuda_device.probe(0) is cuda_device.probe(0)  # asked once per device index
    # the input claims a CUDA device (a stand-in), so the table asks the probe, which finds none
    assert _op()(SNAP, FakeCuda(1)) == "reference"
    seen = kernels.counts()
    assert seen.declines == {("ref", "hopper", "no CUDA device"): 1} and not seen.fallbacks
    assert seen.ran == {("ref", "reference"): 1}


def test_a_device_index_past_the_last_has_no_cuda_device() -> None:
    absent = cuda_device.probe(torch.cuda.device_count())
    assert (absent.missing, absent.lacks((0, 0))) == ("no CUDA device", "no CUDA device")
    assert cuda_device.probe_of(torch.zeros(1)).missing == "no CUDA device"


def test_an_arm_needing_sm90_declines_on_sm80_with_the_reason_counted() -> None:
    op = _op()
    with kernels.on_device(SM80):
        assert op(SNAP, FakeCuda(1)) == "reference"
        assert op.choose(SNAP, FakeCuda(1)) == "reference"  # not counted
        with pytest.raises(ValueError, match=r"^ref: arm 'hopper' needs sm_90 \(cuda:0 is sm_80\)$"):
            op.run_arm("hopper", FakeCuda(1))
    seen = kernels.counts()
    assert seen.declines == {("ref", "hopper", "sm_90 (cuda:0 is sm_80)"): 1}
    assert not seen.fallbacks  # the predicate was not asked: the device declined first
    assert "  declined ref/hopper 1: needs sm_90 (cuda:0 is sm_80)" in kernels.render_counts(seen).splitlines()


def test_an_arm_needing_sm90_is_taken_on_sm90_where_its_predicate_holds() -> None:
    op = _op()
    with kernels.on_device(SM90):
        assert [op(SNAP, FakeCuda(n)) for n in (1, 9)] == ["hopper", "reference"]
        assert op.choose(SNAP, FakeCuda(2)) == "hopper"
    seen = kernels.counts()
    assert seen.ran == {("ref", "hopper"): 1, ("ref", "reference"): 1}
    assert seen.fallbacks == {("ref", "hopper", "n below 4"): 1} and not seen.declines


def test_an_arm_declines_a_device_with_less_opt_in_shared_memory_than_it_needs() -> None:
    def ref(x: FakeCuda) -> str:
        return "reference"

    op = kernels.Op(
        ref, lambda x: None, [kernels.Arm("big", (), lambda x: True, "any", lambda x: "big", smem_optin=200 * 1024)]
    )
    with kernels.on_device(SM80):
        assert op(SNAP, FakeCuda(1)) == "reference"
    with kernels.on_device(SM90):
        assert op(SNAP, FakeCuda(1)) == "big"
    assert kernels.counts().declines == {
        ("ref", "big", "204800 bytes of opt-in shared memory (cuda:0 allows 166912)"): 1
    }


def test_a_cpu_tensor_tries_no_arm_and_counts_no_decline_even_on_a_simulated_device() -> None:
    assert kernels.rms_norm(SNAP, torch.ones(1, 8), torch.ones(8), 1e-6).shape == (1, 8)
    with kernels.on_device(SM90):
        kernels.rms_norm(SNAP, torch.ones(1, 8), torch.ones(8), 1e-6)
    seen = kernels.counts()
    assert seen.ran == {("rms_norm", "reference"): 2} and not seen.declines and not seen.fallbacks


def test_the_streamed_gemv_arms_declare_sm90_and_the_portable_ones_sm80() -> None:
    for op in kernels.TABLE.values():
        for arm in (*op.arms, *op.by_name):  # a by-name arm runs on CUDA too: its needs are declared alike
            stream = "stream" in arm.name
            assert arm.capability == ((9, 0) if stream else (8, 0)), f"{op.name}/{arm.name}"
            if stream:
                assert SM80.lacks(arm.capability, arm.smem_optin) == "sm_90 (cuda:0 is sm_80)"
                assert SM90.lacks(arm.capability, arm.smem_optin) is None


def test_the_probe_reads_the_driver_once_per_device() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the probe of a real device needs one")
    props = torch.cuda.get_device_properties(0)
    found = cuda_device.probe(0)
    assert (found.capability, found.sms, found.missing) == (
        (props.major, props.minor),
        props.multi_processor_count,
        None,
    )
    assert found.smem_optin == props.shared_memory_per_block_optin >= 48 * 1024
    assert cuda_device.probe_of(torch.zeros(1, device="cuda:0")) is found  # cached: the same value
