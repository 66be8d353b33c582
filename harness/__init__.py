"""repro: reproduce and watch vLLM's Hybrid HiSparse result for GLM 5.3.

Flow (one module per stage): profiles -> builds -> server -> dataset -> sweep (points)
-> scrape (samples) -> metrics -> results -> figures / dashboard -> compare / regress.
"""

__version__ = "0.1.0"
