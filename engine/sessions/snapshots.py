"""Kept for code that imported it from here: rollback targets and previews live in
`engine.recovery.targets`."""

from engine.recovery.targets import preview_rollback, suggested_target

__all__ = ["preview_rollback", "suggested_target"]
