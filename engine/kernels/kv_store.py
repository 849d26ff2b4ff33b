"""The KV cache's row: storing a step's keys and values into their slots."""

from __future__ import annotations

from engine.cuda import kv_store as cuda_kv_store
from engine.kernels.table import cuda_op, gated_by
from engine.ops import kv_store

# its kernel does not range-check slot values; the op checks shapes and dtypes, the predicate the layout and device
store_kv = cuda_op(
    kv_store.store_kv,
    kv_store.check_store_kv,
    gated_by(),
    cuda_kv_store.launch_store_kv,
    cuda_kv_store.supports,
    "k's and v's heads and head_dim contiguous, every tensor on k's device",
)
