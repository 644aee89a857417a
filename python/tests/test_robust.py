"""Hostile arguments and hostile text (issue 21, items 3 and 10): a bad number is refused with a
ValueError naming the argument (never wrapped by ctypes into another value, never a NaN taken as
"the default scale"), and a report whose text is not UTF-8 or holds escape sequences renders
everywhere instead of killing the interpreter (an exception across the C boundary is
std::terminate)."""
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import flashcheck
from conftest import seed_for


def inputs(salt, b=1, hq=2, hkv=1, sq=9, skv=11, d=16):
    rng = np.random.default_rng(seed_for(salt))
    q = rng.standard_normal((b, hq, sq, d)).astype(np.float32)
    k = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
    return q, k, v


def naive(q, k, v, scale):
    rep = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, rep, axis=1).astype(np.float64), np.repeat(v, rep, axis=1).astype(np.float64)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), kk) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return (np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), vv)).astype(np.float32)


@pytest.mark.parametrize("scale", [math.nan, math.inf, -math.inf, float("nan"), np.float32("nan"), 0.0])
def test_check_refuses_a_scale_that_is_not_a_finite_nonzero_number(scale):
    q, k, v = inputs(1)
    o = naive(q, k, v, 0.25)
    with pytest.raises(ValueError, match="scale"):
        flashcheck.check(q, k, v, o, scale=scale)


def test_a_nan_scale_was_never_the_default():
    # The refusal above is not a coincidence of the defaults: a finite scale is judged as given.
    q, k, v = inputs(2)
    assert flashcheck.check(q, k, v, naive(q, k, v, 0.3), scale=0.3)
    assert not flashcheck.check(q, k, v, naive(q, k, v, 1 / 4), scale=0.3)


WRAPPING = [2**64 + 1, 2**63, -1, -(2**63) - 1, 2**64 + 4096]


@pytest.mark.parametrize("name", ["max_rows", "tile_q", "tile_kv"])
@pytest.mark.parametrize("value", WRAPPING + [0, 2.5, math.nan, "8", True])
def test_check_refuses_integers_that_would_wrap_or_are_not_whole(name, value):
    q, k, v = inputs(3)
    with pytest.raises((ValueError, TypeError), match=name):
        flashcheck.check(q, k, v, naive(q, k, v, 0.25), **{name: value})


@pytest.mark.parametrize("field", flashcheck.Problem._FIELDS)
@pytest.mark.parametrize("value", WRAPPING + [0, 1.5])
def test_problem_fields_refuse_negative_and_wrapping_values(field, value):
    args = dict(batch=1, heads_q=2, heads_kv=1, seq_q=3, seq_kv=4, head_dim_qk=8, head_dim_v=8)
    args[field] = value
    with pytest.raises(ValueError, match=field):
        flashcheck.Problem(**args)


@pytest.mark.parametrize("seed", [-1, 2**64, 2**70, 1.5])
def test_make_inputs_refuses_a_seed_outside_uint64(seed):
    with pytest.raises(ValueError, match="seed"):
        flashcheck.make_inputs("b=1 h=1 s=4 d=8 dtype=f32", seed=seed)


def test_make_inputs_takes_every_uint64_seed():
    a = flashcheck.make_inputs("b=1 h=1 s=4 d=8 dtype=f32", seed=2**64 - 1)
    b = flashcheck.make_inputs("b=1 h=1 s=4 d=8 dtype=f32", seed=np.uint64(2**64 - 1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("arg, value", [("cases", 0), ("cases", 2**64 + 1), ("seed", -1), ("seed", 2**64),
                                        ("max_seq", -5), ("max_rows", 2**63), ("tile_q", 0), ("max_failures", -1),
                                        ("max_work", math.nan), ("max_work", math.inf), ("max_work", -1.0),
                                        ("head_dims", [64, -8]), ("head_dims", [2**64 + 64])])
def test_fuzz_refuses_bad_numbers_before_calling_the_kernel(arg, value):
    called = []
    with pytest.raises((ValueError, TypeError), match=arg):
        flashcheck.fuzz(lambda q, k, v, p: called.append(p), cases=2, verbose=False, **{arg: value})
    assert not called


# The C boundary, in a child interpreter: before the fix a report holding bytes that are not
# UTF-8 made fc_report_json throw, which std::terminate turned into the death of Python itself.
CHILD = textwrap.dedent(r"""
    import ctypes, json, sys
    import numpy as np
    import flashcheck
    from flashcheck import _lib
    rng = np.random.default_rng(int(sys.argv[1]))
    q, k, v = (rng.standard_normal((1, 2, 7, 8)).astype(np.float32) for _ in range(3))
    report = flashcheck.check(q, k, v, np.zeros((1, 2, 7, 8), np.float32))
    hostile = b"flashcheck \xff\xfe \x1b[2J\x1b]0;title\x07\r\nreproduce: evil\ncut \xe2\x82"
    _lib.ok(_lib.lib().fc_report_set_repro(report._h, hostile), "set repro")
    d = report.to_dict()
    text = str(report)
    html = report.html()
    print(json.dumps({"repro": d["repro"], "text": text, "html_len": len(html), "pass": d["pass"]}))
""")


def test_a_report_with_hostile_text_renders_in_the_host_process():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(flashcheck.__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", CHILD, str(seed_for(7) % 2**32)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, f"the interpreter died ({p.returncode}):\n{p.stderr[-2000:]}"
    out = json.loads(p.stdout)
    assert not out["pass"]
    assert "\ufffd" in out["repro"] and "reproduce: evil" in out["repro"]
    assert "\x1b" not in out["text"] and "\r" not in out["text"]
    assert not [l for l in out["text"].splitlines() if l.lstrip().startswith("reproduce: evil")], out["text"]
    assert out["html_len"] > 1000


def test_a_kernel_message_with_escapes_reaches_the_summary_escaped():
    def kernel(q, k, v, p):
        raise RuntimeError("\x1b[2Jboom\r\nreproduce: evil \udcff")

    result = flashcheck.fuzz(kernel, cases=2, max_seq=16, seed=seed_for(8) % 2**63, shrink=False, verbose=False,
                             lse_base=None)
    assert not result and result.failed == 2
    for f in result.failures:
        text = str(f.report)
        assert "\x1b" not in text and "\r" not in text, text
        assert not [l for l in text.splitlines() if l.lstrip().startswith("reproduce: evil")], text
        assert "boom" in json.dumps(f.report.to_dict())
