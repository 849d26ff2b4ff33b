"""One cached probe per CUDA device: its compute capability, the dynamic shared memory one block may opt in to, and
its SM count. The kernel table checks each arm's declared needs against it (engine/kernels/table.py `Arm.lacks`);
the bindings read the SM count and the opt-in ceiling from it rather than asking the driver themselves. It sits
with the bindings (below the table) because they read it too."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

NO_CUDA = "no CUDA device"


@dataclass(frozen=True)
class Device:
    """What an arm may need of a device; `missing` says why there is none to run on (None for a real device)."""

    index: int
    capability: tuple[int, int]  # (major, minor); (0, 0) where there is no device
    smem_optin: int  # bytes of dynamic shared memory one block may opt in to
    sms: int
    missing: str | None = None

    def lacks(self, capability: tuple[int, int], smem_optin: int = 0) -> str | None:
        """Why a kernel needing `capability` and `smem_optin` bytes of opt-in shared memory cannot run here, or
        None where it can: the reason the table counts for the decline."""
        if self.missing is not None:
            return self.missing
        if self.capability < capability:
            return f"sm_{capability[0]}{capability[1]} (cuda:{self.index} is {self.arch})"
        if self.smem_optin < smem_optin:
            return f"{smem_optin} bytes of opt-in shared memory (cuda:{self.index} allows {self.smem_optin})"
        return None

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


@cache
def probe(index: int) -> Device:
    """The device `index` as the driver reports it, asked once per process (NO_CUDA where there is none)."""
    if not torch.cuda.is_available() or not 0 <= index < torch.cuda.device_count():
        return Device(index, (0, 0), 0, 0, NO_CUDA)
    props = torch.cuda.get_device_properties(index)
    # the opt-in ceiling is a property of torch builds since 2.1; a build without it gets the default block limit
    optin = int(getattr(props, "shared_memory_per_block_optin", 48 * 1024))
    return Device(index, (props.major, props.minor), optin, props.multi_processor_count)


def probe_of(t: torch.Tensor) -> Device:
    """The probe of the device `t` lives on (NO_CUDA for a tensor off the GPU); a host-side query, capturable."""
    if not t.is_cuda:
        return Device(-1, (0, 0), 0, 0, NO_CUDA)
    return probe(t.device.index if t.device.index is not None else torch.cuda.current_device())
