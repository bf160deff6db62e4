"""Engines behind one token-level protocol (see ``base``). Heavy engines import lazily."""

from ..errors import EngineError
from .base import Completion, Engine, EngineCapabilities, Request, validate_completion

__all__ = ["Completion", "Engine", "EngineCapabilities", "EngineError", "Request", "validate_completion"]
