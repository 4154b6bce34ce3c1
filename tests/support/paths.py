"""Where things are, for tests at any depth of the tests/ tree."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
"""The tests/ folder."""
ROOT = TESTS.parent
"""The checkout."""
