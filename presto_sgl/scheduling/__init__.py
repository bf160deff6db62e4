"""Many chains on one engine: the shared scheduler, the pool of chains in flight (serve) and
the runner of many prompts.
"""
