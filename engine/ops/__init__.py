"""Pure-torch reference ops, one module per kernel family; they define the semantics and rounding points.

Families: linear (dtype-faithful GEMV, embedding), norm (RMSNorm, fused add+RMSNorm,
q/k norm), rope (cos/sin tables, neox rotation), activation (SiLU-and-mul),
kv_cache (paged store, slot mapping), attention (packed prefill, paged decode),
splitkv (split-KV partials and the log-sum-exp combine), sampling (greedy argmax,
top-k/top-p), moe (routing, expert MLPs), gdn (gated delta net decode and chunked
prefill), awq / gptq / nvfp4 (quantised-weight dequant and dequant-then-linear).
Private helpers: _check (entry checks naming the tensor), _packing (int32 field unpacking).
"""
