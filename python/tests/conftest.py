"""Makes the checkout's flashcheck package importable and fixes this run's seed: FLASHCHECK_SEED
pins it (printed at the end of every run), otherwise it is fresh."""
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python/
sys.path.insert(0, str(Path(__file__).resolve().parent))  # kernels.py

# Kept in the environment so that every import of this module (pytest's, and the tests' own
# `from conftest import seed_for`) sees the one seed.
os.environ.setdefault("FLASHCHECK_SEED", str(random.getrandbits(63)))
SEED = int(os.environ["FLASHCHECK_SEED"], 0)


def seed_for(salt):
    """A distinct, reproducible seed per test, as testing/test_seed.h derives them."""
    return (SEED * 0x9E3779B97F4A7C15 + salt * 0xBF58476D1CE4E5B9 + 1) % (1 << 64)


def pytest_report_header(config):
    return f"flashcheck test seed: FLASHCHECK_SEED={SEED}"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"flashcheck test seed: FLASHCHECK_SEED={SEED}")
