"""Pure-torch reference ops, one module per kernel family (named as its binding in engine/cuda/); they define
the semantics and rounding points, and import neither the bindings nor the flags.

Families: gemv (dtype-faithful linear, embedding), norm (RMSNorm, fused add+RMSNorm, q/k norm), rope
(cos/sin tables, neox rotation, q/k norm + RoPE), act (SiLU-and-mul), kv_store (paged store, slot
mapping), paged_attn (packed prefill, paged decode), splitkv (split-KV partials and the log-sum-exp
combine), sample (greedy argmax, top-k/top-p), moe (routing, expert MLPs), gdn (gated delta net decode and
chunked prefill), quant (AWQ, GPTQ and NVFP4 dequant and dequant-then-linear). Beside each op its entry
check, `check_<op>`, which the kernel table (engine/kernels/) runs once per call.
Private helpers: _check (entry checks naming the tensor), _packing (int32 field unpacking), _compose (composite
references written once over the ops they run, which the kernel table's composite arms run over its own ops).
"""
