"""`repro capacity`: the blog's HiSparse concurrency calculator, models as data, figures, and
predicted-vs-measured occupancy for a run."""
