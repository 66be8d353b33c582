"""The simulated engine served over HTTP (`repro sim serve`), so real clients drive it.

Modules: `tokens` (prompt ids with the dataset's tokenizer and chat template, prefix-block
hashes, reply text), `live` (the engine advanced in virtual time K x faster than the wall clock in
one thread), `metrics` (/metrics with vLLM's names through prometheus_client), `faults` (injected
failures), `app` (the aiohttp routes), `process` (`SimServer`, the sweep's lifecycle for it).
"""
