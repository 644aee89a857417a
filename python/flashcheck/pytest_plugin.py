"""pytest plugin (entry point `pytest11`, loaded wherever the package is installed; from a checkout
`-p flashcheck.pytest_plugin`): fuzz an attention function from a test, with the campaign's seed
and size on the command line and everything needed to reproduce a failure in the failure itself.

    def test_my_attention(flashcheck_fuzz):
        flashcheck_fuzz(my_attention, dtypes=["f16", "bf16"], causal=["none", "bottom_right"])

    pytest --flashcheck-seed=S --flashcheck-cases=N [--flashcheck-html-dir DIR]

flashcheck_fuzz(kernel, **keywords) runs flashcheck.fuzz(kernel, cases=N, seed=S, **keywords)
(keywords as fuzz takes them; cases= or seed= given there win over the options) and fails the test
unless every case passed: a failing case, or a kernel that declined every case ("nothing tested"),
fails it with the seed, the smallest failing case and its report, the pytest command line and the
Python that reproduce it, and the path of each failure's HTML report. It returns the FuzzResult.

Without --flashcheck-seed each session draws a fresh seed (printed in the header and in every
failure), so repeated runs explore new cases while any failure names the seed that repeats it.
"""
import random
import re
import shlex
from pathlib import Path

import pytest

from ._fuzz import fuzz

DEFAULT_CASES = 50


def _seed(text):
    value = int(text, 0)
    if not 0 <= value < 1 << 64:
        raise ValueError(text)
    return value


def _cases(text):
    value = int(text, 0)
    if value < 1:
        raise ValueError(text)
    return value


def pytest_addoption(parser):
    group = parser.getgroup("flashcheck", "flashcheck attention fuzzing (fixture flashcheck_fuzz)")
    group.addoption("--flashcheck-seed", type=_seed, default=None, metavar="S",
                    help="seed of every flashcheck_fuzz campaign (default: a fresh one per session, printed)")
    group.addoption("--flashcheck-cases", type=_cases, default=DEFAULT_CASES, metavar="N",
                    help=f"cases per flashcheck_fuzz campaign (default {DEFAULT_CASES})")
    group.addoption("--flashcheck-html-dir", default=None, metavar="DIR",
                    help="write each failure's HTML report under DIR/<test>/ (default: the test's tmp_path)")


def pytest_configure(config):
    # Fixed once for the session, so the header, every test and every failure name the same seed.
    if config.option.flashcheck_seed is None:
        config.option.flashcheck_seed = random.SystemRandom().getrandbits(63)


def pytest_report_header(config):
    return (f"flashcheck: --flashcheck-seed={config.option.flashcheck_seed} "
            f"--flashcheck-cases={config.option.flashcheck_cases}")


def _safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:120] or "test"


class FuzzFixture:
    """The callable flashcheck_fuzz returns; one per test."""

    def __init__(self, request):
        self._request = request

    def _html_dir(self, kernel_name):
        chosen = self._request.config.option.flashcheck_html_dir
        if chosen:
            base = Path(chosen).resolve() / _safe(self._request.node.nodeid)
        else:
            base = self._request.getfixturevalue("tmp_path") / "flashcheck"
        where = base / _safe(kernel_name)
        if where.is_dir():  # pages of an earlier run of this test would be taken for this one's
            for old in where.glob("*.html"):
                old.unlink()
        return where

    def _reproduce(self, cases, seed, from_options):
        config = self._request.config
        command = ["python", "-m", "pytest", self._request.node.nodeid]
        if "seed" in from_options:
            command.append(f"--flashcheck-seed={seed}")
        if "cases" in from_options:
            command.append(f"--flashcheck-cases={cases}")
        return f"{' '.join(shlex.quote(c) for c in command)}   (in {config.rootpath})"

    def __call__(self, kernel, **keywords):
        options = self._request.config.option
        from_options = {k for k in ("cases", "seed") if k not in keywords}
        keywords.setdefault("cases", options.flashcheck_cases)
        keywords.setdefault("seed", options.flashcheck_seed)
        name = keywords.get("name") or getattr(kernel, "__qualname__", None) or getattr(kernel, "__name__", "kernel")
        keywords.setdefault("html_dir", self._html_dir(name))
        keywords.setdefault("verbose", False)
        self._request.node.user_properties.append(("flashcheck_seed", keywords["seed"]))

        result = fuzz(kernel, **keywords)
        if result:
            return result
        pages = sorted(Path(keywords["html_dir"]).glob("*.html")) if keywords["html_dir"] is not None else []
        lines = [str(result).rstrip(),
                 f"reproduce this test: {self._reproduce(keywords['cases'], keywords['seed'], from_options)}"]
        if pages:
            lines += [f"HTML report: {page}" for page in pages]
        elif result.failed:
            lines.append("HTML report: none written (the replay of the failing case passed: a flaky kernel?)")
        pytest.fail("\n".join(lines), pytrace=False)


@pytest.fixture
def flashcheck_fuzz(request):
    """flashcheck_fuzz(kernel, **fuzz_keywords): fuzzes the kernel with --flashcheck-seed and
    --flashcheck-cases and fails the test, with the seed, reproduce command and HTML report path,
    unless every case passed. Returns flashcheck.fuzz's FuzzResult."""
    return FuzzFixture(request)
