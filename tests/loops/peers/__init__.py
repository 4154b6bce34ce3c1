"""Peer suites: other agent projects' loop-detection test cases, ported as data (see model)."""

from . import cline, gemini_cli, openclaw, openhands, roo_code
from .model import PeerCase

SUITES: dict[str, list[PeerCase]] = {
    "openhands": openhands.CASES,
    "gemini-cli": gemini_cli.CASES,
    "roo-code": roo_code.CASES,
    "cline": cline.CASES,
    "openclaw": openclaw.CASES,
}
"""Suite name -> its cases."""

__all__ = ["SUITES", "PeerCase"]
