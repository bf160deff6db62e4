"""Synthetic tasks with checkable answers, for tests and demos of power sampling."""
