"""Where things are, for tests in any folder under tests/: the repository root, tests/ and its data."""
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"
