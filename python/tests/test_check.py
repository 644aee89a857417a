"""flashcheck.check / assert_close on numpy arrays: the verdict, the report's parts, and every way a
call can be wrong named in its error."""
import math

import numpy as np
import pytest

import flashcheck
import kernels
from conftest import seed_for


def case(line, salt, dist="normal"):
    p = flashcheck.Problem.parse(line)
    q, k, v = flashcheck.make_inputs(p, dist, seed_for(salt))
    o, lse = kernels.reference(q, k, v, p)
    return p, q, k, v, o, lse


BR = "b=2 hq=4 hkv=2 sq=70 skv=53 dqk=32 dv=32 causal=bottom_right dtype="


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_a_correct_output_passes(dtype):
    p, q, k, v, o, lse = case(BR + dtype, 1)
    r = flashcheck.check(q, k, v, o, lse, causal="bottom_right")
    assert r, str(r)
    assert r.passed and r.failed == []
    assert str(r).startswith("PASS  " + p.line)
    d = r.to_dict()
    assert d["pass"] is True and d["problem"] == p.line
    assert {c["name"] for c in d["criteria"]} >= {"cosine", "rel_l2", "baseline_relative", "lse", "empty_rows"}
    assert r.problem == p
    assert flashcheck.assert_close(q, k, v, o, lse, causal="bottom_right")


def test_a_wrong_element_fails_and_is_located():
    p, q, k, v, o, lse = case(BR + "f32", 2)
    o = o.copy()
    o[1, 3, 60, 7] += 2.0
    r = flashcheck.check(q, k, v, o, lse, causal="bottom_right", tile_q=32, tile_kv=16)
    assert not r
    assert "baseline_relative" in r.failed
    w = r.worst
    assert (w.b, w.h, w.row, w.col) == (1, 3, 60, 7)
    assert w.q_tile == 60 // 32
    assert w.kv_tile == (60 + 53 - 70) // 16  # the row's last visible key, bottom-right
    assert math.isclose(w.kernel - w.oracle, 2.0, rel_tol=1e-3)
    with pytest.raises(AssertionError) as e:
        flashcheck.assert_close(q, k, v, o, lse, causal="bottom_right")
    assert "FAIL" in str(e.value) and "baseline_relative" in str(e.value)


def test_the_wrong_mask_fails():
    p, q, k, v, o, lse = case(BR + "bf16", 3)
    r = flashcheck.check(q, k, v, o, lse, causal="top_left")
    assert not r and "cosine" in r.failed


def test_lse_base_is_converted_only_when_declared():
    p, q, k, v, o, lse = case(BR + "f16", 4)
    lse2 = (lse / np.float32(math.log(2))).astype(np.float32)
    assert flashcheck.check(q, k, v, o, lse2, causal="bottom_right").failed == ["lse"]
    assert flashcheck.check(q, k, v, o, lse2, causal="bottom_right", lse_base="2")


def test_empty_row_lse_convention_is_declared():
    # sq > skv, bottom-right: the first rows see no key; FlashAttention-2 writes +inf there.
    p, q, k, v, o, lse = case(BR + "f32", 5)
    plus = np.where(np.isneginf(lse), np.inf, lse).astype(np.float32)
    assert flashcheck.check(q, k, v, o, lse, causal="bottom_right")
    assert flashcheck.check(q, k, v, o, plus, causal="bottom_right").failed == ["lse"]
    assert flashcheck.check(q, k, v, o, plus, causal="bottom_right", empty_row_lse="+inf")


def test_bshd_layout_is_the_same_judgement():
    p, q, k, v, o, lse = case(BR + "bf16", 6)
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    a = flashcheck.check(q, k, v, o, lse, causal="bottom_right")
    b = flashcheck.check(t(q), t(k), t(v), t(o), lse, causal="bottom_right", layout="bshd")
    # The same judgement; the report's problem line says where the tensors lived.
    assert str(b) == str(a).replace(" dtype=bf16", " dtype=bf16 layout=bshd", 1)


def test_custom_scale():
    p, q, k, v, _, _ = case("b=1 hq=2 hkv=1 sq=40 skv=40 dqk=64 dv=64 dtype=f32 scale=0.5", 7)
    o, lse = kernels.reference(q, k, v, p)
    assert flashcheck.check(q, k, v, o, lse, scale=0.5)
    assert not flashcheck.check(q, k, v, o, lse)  # the default scale is 1/8


def test_html_report(tmp_path):
    p, q, k, v, o, lse = case(BR + "f32", 8)
    o = o.copy()
    o[0, 0, 10:20] = 0
    path = tmp_path / "r.html"
    r = flashcheck.check(q, k, v, o, lse, causal="bottom_right", html=path)
    page = path.read_text()
    assert not r and page.startswith("<!DOCTYPE html>")
    assert 'id="tiles"' in page and 'id="head"' in page and 'id="lse"' in page
    assert "No error maps" in flashcheck.check(q, k, v, o, lse, causal="bottom_right").html()


def test_bad_calls_are_named():
    p, q, k, v, o, lse = case(BR + "f32", 9)
    with pytest.raises(ValueError, match="ambiguous"):
        flashcheck.check(q, k, v, o, causal=True)
    with pytest.raises(TypeError, match="float64"):
        flashcheck.check(q.astype(np.float64), k, v, o)
    with pytest.raises(TypeError, match="share one dtype"):
        flashcheck.check(q, k, v, o.astype(np.float16))
    with pytest.raises(ValueError, match="o has shape"):
        flashcheck.check(q, k, v, o[:, :, :-1])
    with pytest.raises(TypeError, match="LSE must be float32"):
        flashcheck.check(q, k, v, o, lse.astype(np.float64))
    with pytest.raises(ValueError, match="lse has shape"):
        flashcheck.check(q, k, v, o, lse[:, :2])
    with pytest.raises(ValueError, match="heads"):
        flashcheck.check(q[:, :3], k, v, o[:, :3])  # 3 query heads over 2 KV heads
    bad = k.copy()
    bad[1, 0, 4, 2] = np.nan
    with pytest.raises(flashcheck.FlashcheckError, match=r"input 'k' holds NaN at \[1,0,4,2\]"):
        flashcheck.check(q, bad, v, o)
    with pytest.raises(ValueError, match="lse_base"):
        flashcheck.check(q, k, v, o, lse, lse_base="10")


def test_bf16_bits_round_trip():
    x = np.random.default_rng(seed_for(10)).standard_normal(1000).astype(np.float32)
    bits = flashcheck.float32_to_bf16(x)
    back = flashcheck.bf16_to_float32(bits)
    assert np.all(np.abs(back - x) <= np.abs(x) * 2.0 ** -8)
    assert np.array_equal(flashcheck.float32_to_bf16(back), bits)  # bf16 values are fixed points
    assert np.isnan(flashcheck.bf16_to_float32(flashcheck.float32_to_bf16(np.float32([np.nan])))).all()


def test_make_inputs_are_the_drawn_inputs():
    p = flashcheck.Problem.parse("b=1 hq=2 hkv=2 sq=9 skv=12 dqk=16 dv=8 dtype=bf16")
    a = flashcheck.make_inputs(p, "outlier_keys", seed_for(11))
    b = flashcheck.make_inputs(p.line, "outlier_keys", seed_for(11))
    c = flashcheck.make_inputs(p, "outlier_keys", seed_for(11) + 1)
    assert a[0].dtype == np.uint16 and a[2].shape == (1, 2, 12, 8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[1], c[1])
