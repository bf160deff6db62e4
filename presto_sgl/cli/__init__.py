from .sample import main

__all__ = ["main"]
