"""Beyond one node: sweeps as Slurm jobs (submitit), job facts, cancel, status; Kubernetes
manifests rendered for a cluster this harness does not reach."""
