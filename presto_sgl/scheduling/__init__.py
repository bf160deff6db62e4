"""Many chains on one engine: the shared scheduler, a chain's offers and lane to it, the
pool of chains in flight (serve) and the runner of many prompts.
"""
