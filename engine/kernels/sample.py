"""The samplers' rows: greedy argmax, top-k/top-p, and the serving sampler's fused Gumbel-max draw."""

from __future__ import annotations

import torch

from engine.cuda import sample as cuda_sample
from engine.cuda import sample_rows as cuda_sample_rows
from engine.kernels.table import Arm, Op, cuda_op, gated_by
from engine.ops import sample


def _sample_kernel(
    logits: torch.Tensor,
    top_k: int | torch.Tensor,
    top_p: float | torch.Tensor,
    temperature: float | torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    ks, ps, ts = sample.sampling_params(logits, top_k, top_p, temperature)
    # the kernel's counter-based stream is seeded from the generator, which advances as a draw would
    seed = int(torch.randint(0, 2**63 - 1, (1,), generator=generator))
    return cuda_sample.sample_top_k_top_p(logits, ks, ps, ts, seed)


# Each tensor is checked once a call: the op's check, the arm's `supports`, then the binding's unchecked launch
greedy_argmax = cuda_op(
    sample.greedy_argmax, sample.check_greedy_argmax, gated_by("VT_ARGMAX_KERNEL"), cuda_sample.launch_greedy_argmax
)
sample_top_k_top_p = cuda_op(
    sample.sample_top_k_top_p, sample.check_sample_top_k_top_p, gated_by("VT_SAMPLE_KERNEL"), _sample_kernel
)
# the serving sampler's draw (engine/sampler.py): the fused Gumbel-max kernel takes the unfiltered rows
sample_rows = Op(
    sample.sample_rows,
    sample.check_sample_rows,
    [
        Arm(
            "gumbel",
            gated_by("VT_SAMPLE_ROWS_KERNEL"),
            cuda_sample_rows.supports,
            "filtered=False (no row restricts top-k or top-p), a unit-stride vocabulary, one device",
            cuda_sample_rows.launch_sample_rows,
        ),
    ],
)
