"""A step-level, deterministic model of vLLM v1 serving (scheduler, KV pools, offloading,
Hybrid HiSparse, MTP) that writes run directories in the same schema as a real sweep.

Modules: `blocks` (block pool, prefix LRUs), `request`, `residency` (what a block costs and where
a prefix hit comes from), `mtp`, `scheduler` (vLLM v1 `schedule()`), `cost` (step time),
`client` (EvalScope multi-turn replay), `engine` (the clock), `config` (profile -> engine),
`run` (run directory), `calibrate` (fit to published series).
"""
