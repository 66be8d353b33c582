"""`repro plan`: search the calibrated simulator over arm x host pool x max-num-seqs x
concurrency for the configurations with the most goodput per GPU (docs/plan.md).

Modules: `inputs`/`resolve` (what is asked, validated), `arms` (a configuration as profile
overrides and its serve command), `evaluate` (one simulated point, cached), `search` (sharing,
bounds, parallel evaluation), `rank`/`explain` (ranking, capacity figures, why an arm loses),
`render` (the versioned record and the text).
"""
