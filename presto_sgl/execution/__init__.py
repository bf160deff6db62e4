"""How a stage's transitions run: the walker (which path MH takes through the stored draws),
the executor of the rounds (plan -> one call -> walk), a chain's offers and lane to the
scheduler, resume from a trace, and exact choices.
"""
