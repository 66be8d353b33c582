"""The one table of vLLM's Prometheus metric names: what the simulator exposes, what the scraper
keeps and what every reader (analysis, report, coherence, provenance) looks up.

No other module spells a `vllm:` name out (`tests/test_metric_names.py` checks it), so a rename
in a vLLM release is one edit here. Names are family names as vLLM registers them; a counter's
sample carries `_total`, a histogram's `_sum`/`_count`/`_bucket` (use `total`, `hist_sum`,
`hist_count`). See docs/metrics.md for what each feeds.
"""

from __future__ import annotations

PREFIX = "vllm:"  # the scraper keeps the families with this prefix

# --------------------------------------------------------------------------- gauges
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
HISPARSE_HOST_CACHE_USAGE_PERC = "vllm:hisparse_host_cache_usage_perc"  # vLLM >= 0.32
HISPARSE_PENDING_PAGE_TRANSFERS = "vllm:hisparse_pending_page_transfers"  # vLLM >= 0.32
CACHE_CONFIG_INFO = "vllm:cache_config_info"  # an info gauge: its labels are the cache config

# --------------------------------------------------------------------------- counters
NUM_PREEMPTIONS = "vllm:num_preemptions"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"
SPEC_DECODE_NUM_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DECODE_NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_DECODE_NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
KV_OFFLOAD_LOAD_BYTES = "vllm:kv_offload_load_bytes"
KV_OFFLOAD_STORE_BYTES = "vllm:kv_offload_store_bytes"
KV_OFFLOAD_TOTAL_BYTES = "vllm:kv_offload_total_bytes"  # labelled by transfer_type
HISPARSE_CACHE_HITS = "vllm:hisparse_cache_hits"
HISPARSE_CACHE_MISSES = "vllm:hisparse_cache_misses"
HISPARSE_HOST_TO_DEVICE_BYTES = "vllm:hisparse_host_to_device_bytes"

# --------------------------------------------------------------------------- histograms
REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS = "vllm:request_time_per_output_token_seconds"
TIME_TO_FIRST_TOKEN_SECONDS = "vllm:time_to_first_token_seconds"
E2E_REQUEST_LATENCY_SECONDS = "vllm:e2e_request_latency_seconds"
REQUEST_DECODE_TIME_SECONDS = "vllm:request_decode_time_seconds"
REQUEST_PREFILL_TIME_SECONDS = "vllm:request_prefill_time_seconds"
REQUEST_QUEUE_TIME_SECONDS = "vllm:request_queue_time_seconds"
REQUEST_INFERENCE_TIME_SECONDS = "vllm:request_inference_time_seconds"


def total(counter: str) -> str:
    """The sample name of a counter family (`vllm:x` -> `vllm:x_total`)."""
    return counter + "_total"


def hist_sum(histogram: str) -> str:
    return histogram + "_sum"


def hist_count(histogram: str) -> str:
    return histogram + "_count"
