"""The server's Prometheus metrics, rendered as the text exposition format without a client library."""

from __future__ import annotations

import threading
from collections import Counter

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
TPOT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets, self.counts, self.sum, self.count = buckets, [0] * len(buckets), 0.0, 0

    def observe(self, value: float) -> None:
        for i, b in enumerate(self.buckets):
            if value <= b:
                self.counts[i] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out = [f'{name}_bucket{{le="{b}"}} {c}' for b, c in zip(self.buckets, self.counts)]
        return out + [
            f'{name}_bucket{{le="+Inf"}} {self.count}',
            f"{name}_sum {self.sum}",
            f"{name}_count {self.count}",
        ]


class Metrics:
    """Counters the engine thread updates and /metrics reads (under one lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.finished: Counter[str] = Counter()  # by finish reason
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.tpot = Histogram(TPOT_BUCKETS)
        self.running = 0
        self.waiting = 0
        self.kv_usage = 0.0

    def render(self) -> str:
        with self.lock:
            lines = [
                "# HELP engine_request_success_total Requests finished, by finish reason.",
                "# TYPE engine_request_success_total counter",
                *(
                    f'engine_request_success_total{{finished_reason="{r}"}} {n}'
                    for r, n in sorted(self.finished.items())
                ),
                "# HELP engine_prompt_tokens_total Prompt tokens of finished requests.",
                "# TYPE engine_prompt_tokens_total counter",
                f"engine_prompt_tokens_total {self.prompt_tokens}",
                "# HELP engine_generation_tokens_total Generated tokens of finished requests.",
                "# TYPE engine_generation_tokens_total counter",
                f"engine_generation_tokens_total {self.generation_tokens}",
                "# HELP engine_time_to_first_token_seconds Time to first token.",
                "# TYPE engine_time_to_first_token_seconds histogram",
                *self.ttft.lines("engine_time_to_first_token_seconds"),
                "# HELP engine_time_per_output_token_seconds Time per output token after the first.",
                "# TYPE engine_time_per_output_token_seconds histogram",
                *self.tpot.lines("engine_time_per_output_token_seconds"),
                "# HELP engine_num_requests_running Sequences running in the scheduler.",
                "# TYPE engine_num_requests_running gauge",
                f"engine_num_requests_running {self.running}",
                "# HELP engine_num_requests_waiting Sequences waiting in the scheduler.",
                "# TYPE engine_num_requests_waiting gauge",
                f"engine_num_requests_waiting {self.waiting}",
                "# HELP engine_kv_cache_usage_perc Fraction of KV-cache blocks in use.",
                "# TYPE engine_kv_cache_usage_perc gauge",
                f"engine_kv_cache_usage_perc {self.kv_usage}",
            ]
        return "\n".join(lines) + "\n"
