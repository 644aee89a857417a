"""The pytest plugin (flashcheck/pytest_plugin.py) as its users meet it, through pytest's own
pytester: a test file using the flashcheck_fuzz fixture runs in an inner pytest session. A correct
kernel passes; a broken one fails with the seed, the command and Python that reproduce it and the
path of an HTML report that exists; the seed printed for a fresh session repeats its failure."""
import re
from pathlib import Path

import pytest

import flashcheck  # noqa: F401 - imported once here: the inner sessions' imports are undone after each (pytester)
import kernels  # noqa: F401

pytest_plugins = ["pytester"]

# From a checkout the plugin is named on the command line (installed, its entry point loads it and
# this names the same plugin). No cache: the inner sessions write nothing beside their test file.
PLUGIN = ("-p", "flashcheck.pytest_plugin", "-p", "no:cacheprovider")

INNER = '''
import flashcheck
import kernels


def declines_everything(q, k, v, p):
    raise flashcheck.Unsupported("not this one")


def test_reference(flashcheck_fuzz):
    flashcheck_fuzz(kernels.reference, dtypes=["f32"], max_seq=64)


def test_wrong_alignment(flashcheck_fuzz):
    flashcheck_fuzz(kernels.wrong_causal_alignment, dtypes=["f32"], causal=["top_left", "bottom_right"], max_seq=64)


def test_declines(flashcheck_fuzz):
    flashcheck_fuzz(declines_everything, dtypes=["f32"])


def test_options_reach_the_campaign(flashcheck_fuzz, pytestconfig):
    o = pytestconfig.option
    result = flashcheck_fuzz(kernels.reference, dtypes=["f32"], max_seq=64)
    assert (result.cases, result.seed) == (o.flashcheck_cases, o.flashcheck_seed)
    assert flashcheck_fuzz(kernels.reference, dtypes=["f32"], cases=3).cases == 3  # a keyword wins
'''


@pytest.fixture
def inner(pytester):
    pytester.makepyfile(test_inner=INNER)

    def run(*args):
        return pytester.runpytest(*PLUGIN, *args)
    return run


def failure_text(result):
    return result.stdout.str()


def test_a_correct_kernel_passes_and_the_header_names_seed_and_cases(inner):
    r = inner("--flashcheck-cases=8", "-k", "test_reference")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["flashcheck: --flashcheck-seed=* --flashcheck-cases=8"])


def test_a_broken_kernel_fails_with_seed_reproduce_command_and_report(inner):
    r = inner("--flashcheck-seed=4242", "--flashcheck-cases=30", "-k", "test_wrong_alignment")
    r.assert_outcomes(failed=1)
    out = failure_text(r)
    assert "failed:" in out and "(seed 4242," in out, out
    assert "smallest failing case: " in out, out
    assert ("reproduce this test: python -m pytest test_inner.py::test_wrong_alignment --flashcheck-seed=4242 "
            "--flashcheck-cases=30") in out, out
    assert "flashcheck.replay(wrong_causal_alignment, " in out, out  # the Python that replays the case
    pages = re.findall(r"^HTML report: (/\S+\.html)$", out, re.M)
    assert pages, out
    for page in pages:
        assert Path(page).is_file(), page
        assert "<html" in Path(page).read_text().lower()


def test_the_fresh_seed_of_a_session_repeats_its_failure(inner):
    first = failure_text(inner("--flashcheck-cases=30", "-k", "test_wrong_alignment"))
    seed = re.search(r"^flashcheck: --flashcheck-seed=(\d+) ", first, re.M).group(1)
    assert f"(seed {seed}," in first and f"--flashcheck-seed={seed} " in first, first
    case = re.search(r"^smallest failing case: .*$", first, re.M).group(0)
    again = failure_text(inner(f"--flashcheck-seed={seed}", "--flashcheck-cases=30", "-k", "test_wrong_alignment"))
    assert re.search(r"^smallest failing case: .*$", again, re.M).group(0) == case


def test_options_reach_the_campaign_and_keywords_win(inner):
    inner("--flashcheck-seed=99", "--flashcheck-cases=7", "-k", "test_options").assert_outcomes(passed=1)


def test_a_kernel_that_declines_everything_fails_as_nothing_tested(inner):
    r = inner("--flashcheck-seed=5", "--flashcheck-cases=6", "-k", "test_declines")
    r.assert_outcomes(failed=1)
    out = failure_text(r)
    assert "nothing tested" in out and "--flashcheck-seed=5 --flashcheck-cases=6" in out, out


def test_html_dir_option_collects_the_reports(inner, tmp_path):
    where = tmp_path / "reports"
    r = inner("--flashcheck-seed=7", "--flashcheck-cases=30", f"--flashcheck-html-dir={where}", "-k",
              "test_wrong_alignment")
    r.assert_outcomes(failed=1)
    pages = list(where.glob("test_inner.py_test_wrong_alignment/*/*.html"))
    assert pages, failure_text(r)
    assert f"HTML report: {pages[0]}" in failure_text(r)


@pytest.mark.parametrize("bad", ["--flashcheck-cases=0", "--flashcheck-seed=-1", "--flashcheck-seed=x"])
def test_bad_option_values_are_usage_errors(inner, bad):
    r = inner(bad, "-k", "test_reference")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
