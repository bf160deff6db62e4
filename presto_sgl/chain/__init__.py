"""The MH chain: its state, keys, proposals, the walker, the executor of a stage's rounds,
the sampler, resume, traces and metrics.
"""
