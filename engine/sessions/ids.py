"""Kept for code that imported it from here: session ids live in `engine.ids`."""

from engine.ids import MAX_ID_LENGTH, validate_session_id

__all__ = ["MAX_ID_LENGTH", "validate_session_id"]
