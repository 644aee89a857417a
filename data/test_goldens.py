"""Loads the goldens with numpy alone (no safetensors package), proving they are usable outside C++,
and drives `flashcheck check` end to end on them: exit 0 for a golden, 1 for a perturbed output,
125 for malformed files.

usage: test_goldens.py DATA_DIR FLASHCHECK_BINARY
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

data_dir, flashcheck = sys.argv[1], sys.argv[2]


def e4m3_to_f64(bits):
    """OCP e4m3 ("fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN."""
    bits = bits.astype(np.int64)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exp = (bits >> 3) & 0xF
    man = (bits & 0x7).astype(np.float64)
    val = np.where(exp == 0, man / 8 * 2.0**-6, (1 + man / 8) * np.exp2(exp - 7.0))
    return np.where((exp == 0xF) & (man == 7), np.nan, sign * val)


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    buf = raw[8 + n :]
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        chunk = buf[b:e]
        dt = t["dtype"]
        if dt == "BF16":  # bfloat16 is the top half of a float32
            a = (np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            a = np.frombuffer(chunk, dtype="<f2")
        elif dt == "F8_E5M2":  # e5m2 is the top byte of a float16
            a = (np.frombuffer(chunk, dtype="u1").astype(np.uint16) << 8).view(np.float16)
        elif dt == "F8_E4M3":
            a = e4m3_to_f64(np.frombuffer(chunk, dtype="u1"))
        elif dt in ("I32", "I64"):
            out[name] = np.frombuffer(chunk, dtype="<i4" if dt == "I32" else "<i8").astype(np.int64).reshape(t["shape"])
            continue
        else:
            a = np.frombuffer(chunk, dtype="<f4")
        out[name] = a.astype(np.float64).reshape(t["shape"])
    return out, meta, raw


# An independent statement of the semantics (issue 20), none of it shared with the C++ oracle: per
# query row i and key j of one sequence, d = Skv - Sq (bottom-right; also without a causal mode),
# 0 for top-left; window (left, right) inclusive, -1 unbounded, a causal mode capping right at 0;
# s = scale * (q*dq).(k*dk) -> softcap c*tanh(s/c) -> mask -> + ALiBi -> softmax with the sink in
# the denominator; a row that sees no key has O = 0 and LSE = -inf.
def attend(q, k, v, meta, slopes, sinks, dq, dk, dv, d_out=None):
    """q [Hq,Sq,D], k/v [Hkv,Skv,D]; slopes/sinks [Hq] or None; dq/dk/dv [Hkv]. Returns O, LSE; with
    d_out (dO [Hq,Sq,Dv]) also the gradients of sum(dO*O) (backward below)."""
    hq, sq, dqk = q.shape
    hkv, skv = k.shape[0], k.shape[1]
    kvh = np.arange(hq) // (hq // hkv)
    qd = q * dq[kvh][:, None, None]
    kd = (k * dk[:, None, None])[kvh]
    vd = (v * dv[:, None, None])[kvh]
    scale = float(meta["scale"]) if "scale" in meta else 1.0 / np.sqrt(dqk)
    s = np.einsum("hid,hjd->hij", qd, kd) * scale
    cap = float(meta.get("softcap", "0"))
    if cap > 0:
        s = cap * np.tanh(s / cap)
    causal = meta.get("causal", "none")
    left, right = (int(x) for x in meta.get("window", "-1,-1").split(","))
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    d = 0 if causal == "top_left" else skv - sq
    vis = np.ones((sq, skv), bool)
    if causal != "none":
        vis &= j <= i + d
    if left >= 0:
        vis &= j >= i + d - left
    if right >= 0:
        vis &= j <= i + d + right
    s = np.where(vis[None], s, -np.inf)
    if "alibi" in meta:
        dist = -np.abs(i + d - j) if meta["alibi"] == "symmetric" else (j - i)
        s = s + slopes[:, None, None] * dist[None].astype(np.float64)
    sink = sinks[:, None, None] if sinks is not None else np.full((hq, 1, 1), -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.maximum(s.max(axis=-1, keepdims=True, initial=-np.inf), sink)
        m = np.where(np.isfinite(m), m, 0.0)
        p = np.exp(s - m)
        l = p.sum(axis=-1, keepdims=True) + np.exp(sink - m)
        empty = ~vis.any(axis=-1)[None, :, None]
        o = np.where(empty, 0.0, (p / np.where(l == 0, 1, l)) @ vd)
        lse = np.where(empty[..., 0], -np.inf, (m + np.log(np.where(l == 0, 1, l)))[..., 0])
    if d_out is None:
        return o, lse
    raw = np.einsum("hid,hjd->hij", qd, kd) * scale
    chain = 1 - np.tanh(raw / cap) ** 2 if cap > 0 else 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = np.where(empty, 0.0, p / np.where(l == 0, 1, l))
        sink_weight = np.where(empty, 0.0, np.exp(sink - m) / np.where(l == 0, 1, l))[..., 0]
    return o, lse, backward(weights, sink_weight, chain, scale, qd, kd, vd, o, d_out, kvh, hkv)


# The backward of that forward, from the chain rule alone: with P the softmax weights (the sink's
# apart), D_i = dO_i.O_i, dS = P (dO.v_j - D_i) c'(s), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO,
# each KV head's summed over its query heads; the sink's gradient -sum_i P_sink,i D_i.
def backward(p, p_sink, chain, scale, qd, kd, vd, o, d_out, kvh, hkv):
    big_d = np.sum(d_out * o, axis=-1)
    ds = p * (np.einsum("hid,hjd->hij", d_out, vd) - big_d[..., None]) * chain
    gq = scale * ds @ kd
    gk, gv = np.zeros((hkv,) + kd.shape[1:]), np.zeros((hkv,) + vd.shape[1:])
    np.add.at(gk, kvh, scale * np.swapaxes(ds, 1, 2) @ qd)
    np.add.at(gv, kvh, np.swapaxes(p, 1, 2) @ d_out)
    return gq, gk, gv, -np.sum(p_sink * big_d, axis=-1)


def sequences(t, meta):
    """Per sequence b: (q, k, v, o_f32, lse) in [H, S, D] / [H, S], gathered from the file's layout
    (bhsd, bshd, thd with cu_seqlens, k/v from a paged cache through block_table), the keys cut to
    those used (seqused_k / cache_seqlens); plus the padding rows of o_f32 and lse."""
    layout = meta.get("layout", "thd" if "cu_seqlens_q" in t else "bhsd")
    q, k, v, o, lse = t["q"], t["k"], t["v"], t["o_f32"], t["lse"]
    paged = "block_table" in t
    if layout == "thd":
        cq = t["cu_seqlens_q"]
        batch = len(cq) - 1
    else:
        batch = q.shape[0]

    def seq_first(x):  # [B,...] tensors to per-sequence [S, H, D]
        return x if layout == "bshd" else np.swapaxes(x, 0, 1)

    out, pad = [], []
    for b in range(batch):
        if layout == "thd":
            rows = slice(cq[b], cq[b + 1])
            qb, ob, lb = q[rows], o[rows], lse[:, rows].T
        else:
            qb, ob, lb = seq_first(q[b]), seq_first(o[b]), lse[b].T
        if paged:
            n = t["cache_seqlens"][b]
            pages, size = t["block_table"][b], k.shape[1]
            slots = [(pages[x // size], x % size) for x in range(n)]
            kb = np.array([k[pg, sl] for pg, sl in slots]).reshape(n, k.shape[2], k.shape[3])
            vb = np.array([v[pg, sl] for pg, sl in slots]).reshape(n, v.shape[2], v.shape[3])
        elif layout == "thd":
            ck = t["cu_seqlens_k"]
            kb, vb = k[ck[b] : ck[b + 1]], v[ck[b] : ck[b + 1]]
        else:
            kb, vb = seq_first(k[b]), seq_first(v[b])
        used = t.get("seqused_k", t.get("cache_seqlens") if not paged else None)
        if used is not None:
            kb, vb = kb[: used[b]], vb[: used[b]]
        out.append(tuple(np.swapaxes(x, 0, 1) for x in (qb, kb, vb, ob)) + (lb.T,))
    if layout == "thd":
        pad = [o[cq[-1] :], lse[:, cq[-1] :]]
    return out, pad


def per_kv_head(t, name, b, hkv):
    if name not in t:
        return np.ones(hkv)
    x = t[name]
    return np.full(hkv, x.reshape(-1)[0]) if x.size == 1 else x[b]


def worst(x):
    """The largest element, or inf if any is NaN (an empty array: 0)."""
    if x.size == 0:
        return 0.0
    return np.inf if np.isnan(x).any() else float(np.max(x))


POISON_F32 = np.array([0xFFE5A5A5], dtype="<u4").view(np.float32)[0]


def recompute(t, meta):
    """Largest O and LSE errors of the stored oracle against this independent recomputation."""
    err = lerr = 0.0
    same_inf = True
    seqs, pad = sequences(t, meta)
    for b, (q, k, v, o, lse) in enumerate(seqs):
        hq, hkv = q.shape[0], k.shape[0]
        slopes = None
        if "alibi_slopes" in t:
            a = t["alibi_slopes"]
            slopes = a[b] if a.ndim == 2 else a
        sinks = t["sinks"] if "sinks" in t else None
        got_o, got_lse = attend(q, k, v, meta, slopes, sinks, *(per_kv_head(t, n, b, hkv) for n in ("q_descale", "k_descale", "v_descale")))
        # No golden holds NaN where a row can see it, so a NaN on either side is an error (inf), not
        # one that max() would pass over.
        err = max(err, worst(np.abs(got_o - o) / (1 + np.abs(got_o))))
        with np.errstate(invalid="ignore"):
            both_inf = np.isinf(got_lse) & (got_lse == lse)
            lerr = max(lerr, worst(np.where(both_inf, 0, np.abs(got_lse - lse) / (1 + np.abs(got_lse)))))
        same_inf = same_inf and np.array_equal(np.isinf(got_lse), np.isinf(lse))
    # Padding rows hold the poison a harness puts there (bit pattern, widened exactly).
    for p in pad:
        same_inf = same_inf and bool(np.all(p.astype(np.float32).view("<u4") == POISON_F32.view("<u4")))
    return err, lerr, same_inf


def recompute_gradients(t, meta):
    """Largest error of the stored oracle's gradients (golden_*_f32, golden_dsinks) against the
    numpy backward, for the golden_do stored; None for a case without gradients, or a paged one (a
    page shared by sequences holds the sum of their gradients, which this gather does not form)."""
    if "golden_do" not in t or "block_table" in t:
        return None
    # The gradients lie where their tensors do (dq as q, dk as k, dO as o), so the same gather reads them.
    grads, _ = sequences(dict(t, q=t["golden_dq_f32"], k=t["golden_dk_f32"], v=t["golden_dv_f32"], o_f32=t["golden_do"]), meta)
    err, dsinks = 0.0, 0.0
    for b, ((q, k, v, o, _), (gq, gk, gv, d_out, _)) in enumerate(zip(sequences(t, meta)[0], grads)):
        slopes = None
        if "alibi_slopes" in t:
            a = t["alibi_slopes"]
            slopes = a[b] if a.ndim == 2 else a
        sinks = t["sinks"] if "sinks" in t else None
        desc = [per_kv_head(t, n, b, k.shape[0]) for n in ("q_descale", "k_descale", "v_descale")]
        o64, _, (wq, wk, wv, wsink) = attend(q, k, v, meta, slopes, sinks, *desc, d_out=d_out)
        for got, want in ((gq, wq), (gk, wk), (gv, wv)):
            err = max(err, worst(np.abs(got - want) / (1 + np.abs(want))))
        dsinks = dsinks + wsink
    if "golden_dsinks" in t:
        err = max(err, worst(np.abs(t["golden_dsinks"] - dsinks) / (1 + np.abs(dsinks))))
    return err


manifest = json.load(open(os.path.join(data_dir, "manifest.json")))
failures = 0
checked = gradients_checked = 0
variants = []
for case in manifest["cases"]:
    path = os.path.join(data_dir, case["file"])
    t, meta, raw = load(path)
    assert hashlib.sha256(raw).hexdigest() == case["sha256"], case["name"] + ": sha256 mismatch"
    err, lerr, same_inf = recompute(t, meta)
    ok = err < 1e-6 and lerr < 1e-6 and same_inf
    checked += 1
    if not ok:
        failures += 1
        print(f"FAIL {case['name']}: numpy disagrees (o err {err:.3g}, lse err {lerr:.3g}, inf and padding match {same_inf})")
    if case.get("gradients") != ("golden_do" in t):
        failures += 1
        print(f"FAIL {case['name']}: manifest says gradients={case.get('gradients')}, the file disagrees")
    gerr = recompute_gradients(t, meta)
    if gerr is not None:
        gradients_checked += 1
        if not gerr < 1e-6:
            failures += 1
            print(f"FAIL {case['name']}: numpy's backward disagrees with the stored gradients (err {gerr:.3g})")
    if set(meta) & {"layout", "window", "softcap", "alibi"} or set(t) & {"sinks", "q_descale"}:
        variants.append(case["file"])


def run_check(path):
    return subprocess.run([flashcheck, "check", path], capture_output=True, text=True)


def expect(code, path, what):
    global failures
    r = run_check(path)
    if r.returncode != code:
        failures += 1
        print(f"FAIL {what}: exit {r.returncode}, wanted {code}\n{r.stdout}{r.stderr}")


golden = os.path.join(data_dir, "bf16_gqa_tails_br.safetensors")
expect(0, golden, "a golden checks clean")
for name in variants:  # every variant's file as a kernel's harness writes it
    r = run_check(os.path.join(data_dir, name))
    if r.returncode != 0:
        failures += 1
        print(f"FAIL variant golden {name}: exit {r.returncode}\n{r.stdout}{r.stderr}")
if len(variants) < 11:
    failures += 1
    print(f"FAIL only {len(variants)} variant goldens found")
raw = open(golden, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8 : 8 + n])
with tempfile.TemporaryDirectory() as tmp:
    def write(name, data):
        p = os.path.join(tmp, name)
        open(p, "wb").write(data)
        return p

    expect(125, write("trunc.safetensors", raw[: len(raw) - 100]), "truncated file")
    expect(125, write("badjson.safetensors", raw[:9] + b"#" + raw[10:]), "bad JSON header")
    expect(125, write("empty.safetensors", b""), "empty file")
    # Overlapping offsets: point k at q's bytes.
    h2 = dict(header)
    h2["k"] = dict(header["k"], data_offsets=header["q"]["data_offsets"])
    hb = json.dumps(h2).encode()
    expect(125, write("overlap.safetensors", struct.pack("<Q", len(hb)) + hb + raw[8 + n :]), "overlapping offsets")
    # NaN in an input: refused as untestable (125) unless NaN propagation is asked for, and then
    # the golden's O (no NaN rows) is a mismatch (1): the oracle propagates the NaN.
    b, e = header["q"]["data_offsets"]
    qb = bytearray(raw[8 + n + b : 8 + n + e])
    qb[0:2] = struct.pack("<H", 0x7FC0)  # bf16 NaN at q[0,0,0,0]
    nan_path = write("nan_q.safetensors", raw[: 8 + n + b] + bytes(qb) + raw[8 + n + e :])
    expect(125, nan_path, "NaN input without --allow-nonfinite-inputs")
    r = subprocess.run([flashcheck, "check", "--allow-nonfinite-inputs", nan_path], capture_output=True, text=True)
    if r.returncode != 1 or "nan_inf_positions" not in r.stdout:
        failures += 1
        print("FAIL NaN input with --allow-nonfinite-inputs: wanted a nan_inf_positions mismatch\n" + r.stdout + r.stderr)
    # A varlen golden whose cu_seqlens_q no longer starts at 0: refused naming the field.
    vraw = open(os.path.join(data_dir, "bf16_varlen_thd.safetensors"), "rb").read()
    (vn,) = struct.unpack("<Q", vraw[:8])
    vh = json.loads(vraw[8 : 8 + vn])
    at = 8 + vn + vh["cu_seqlens_q"]["data_offsets"][0]
    bad_cu = write("bad_cu.safetensors", vraw[:at] + struct.pack("<i", 1) + vraw[at + 4 :])
    r = run_check(bad_cu)
    if r.returncode != 125 or "cu_seqlens_q" not in r.stderr:
        failures += 1
        print("FAIL cu_seqlens_q not from 0: wanted 125 naming it\n" + r.stdout + r.stderr)
    # --json - writes a report that parses and names the verdict.
    r = subprocess.run([flashcheck, "check", "--json", "-", golden], capture_output=True, text=True)
    try:
        report = json.loads(r.stdout[r.stdout.index("{") :])
        assert report["pass"] is True and report["metrics"]["elements"] > 0
    except Exception as ex:
        failures += 1
        print(f"FAIL --json -: {ex}\n{r.stdout[:500]}")
    # One output element off by a lot: a numerical mismatch, exit 1.
    b, e = header["o"]["data_offsets"]
    o = bytearray(raw[8 + n + b : 8 + n + e])
    o[1000:1002] = struct.pack("<H", 0x4120)  # bf16 10.0
    expect(1, write("bad_o.safetensors", raw[: 8 + n + b] + bytes(o) + raw[8 + n + e :]), "perturbed output")

# golden verify names a tampered case; regen refuses to overwrite it without --force.
with tempfile.TemporaryDirectory() as tmp:
    import shutil

    for f in os.listdir(data_dir):
        if f.endswith(".safetensors") or f == "manifest.json":
            shutil.copy(os.path.join(data_dir, f), tmp)
    victim = os.path.join(tmp, "f16_single_key.safetensors")
    blob = bytearray(open(victim, "rb").read())
    blob[-3] ^= 0x40
    open(victim, "wb").write(blob)
    r = subprocess.run([flashcheck, "golden", "verify", "--dir", tmp], capture_output=True, text=True)
    if r.returncode != 1 or "FAIL f16_single_key" not in r.stdout:
        failures += 1
        print("FAIL golden verify did not name the tampered case:\n" + r.stdout + r.stderr)
    r = subprocess.run([flashcheck, "golden", "regen", "--dir", tmp], capture_output=True, text=True)
    if r.returncode != 1 or open(victim, "rb").read() != bytes(blob):
        failures += 1
        print("FAIL golden regen overwrote a differing golden without --force:\n" + r.stdout + r.stderr)
    r = subprocess.run([flashcheck, "golden", "regen", "--force", "--dir", tmp], capture_output=True, text=True)
    r2 = subprocess.run([flashcheck, "golden", "verify", "--dir", tmp], capture_output=True, text=True)
    if r.returncode != 0 or r2.returncode != 0:
        failures += 1
        print("FAIL golden regen --force did not restore the case:\n" + r.stdout + r2.stdout)

if gradients_checked < 15:
    failures += 1
    print(f"FAIL only {gradients_checked} goldens' gradients recomputed")
print(f"{checked} goldens recomputed with numpy ({gradients_checked} with their gradients), {failures} failed")
sys.exit(1 if failures else 0)
