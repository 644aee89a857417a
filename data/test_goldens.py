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
        if t["dtype"] == "BF16":  # bfloat16 is the top half of a float32
            a = (np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F16":
            a = np.frombuffer(chunk, dtype="<f2")
        else:
            a = np.frombuffer(chunk, dtype="<f4")
        out[name] = a.astype(np.float64).reshape(t["shape"])
    return out, meta, raw


def attention(q, k, v, causal, scale):
    b, hq, sq, _ = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    k = np.repeat(k, hq // hkv, axis=1)
    v = np.repeat(v, hq // hkv, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    vis = np.ones((sq, skv), bool)
    if causal == "top_left":
        vis = j <= i
    elif causal == "bottom_right":
        vis = j <= i + skv - sq
    s = np.where(vis, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = ~vis.any(axis=-1)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    o = np.where(empty[None, None, :, None], 0.0, (p / np.where(l == 0, 1, l)) @ v)
    lse = np.where(empty[None, None, :], -np.inf, (m + np.log(np.where(l == 0, 1, l)))[..., 0])
    return o, lse


manifest = json.load(open(os.path.join(data_dir, "manifest.json")))
failures = 0
checked = 0
for case in manifest["cases"]:
    path = os.path.join(data_dir, case["file"])
    t, meta, raw = load(path)
    assert hashlib.sha256(raw).hexdigest() == case["sha256"], case["name"] + ": sha256 mismatch"
    if t["q"].size * t["k"].shape[2] > 5e7:
        continue
    scale = float(meta["scale"]) if "scale" in meta else 1.0 / np.sqrt(t["q"].shape[-1])
    o, lse = attention(t["q"], t["k"], t["v"], meta.get("causal", "none"), scale)
    err = np.max(np.abs(o - t["o_f32"]) / (1 + np.abs(o)))
    with np.errstate(invalid="ignore"):
        lerr = np.max(np.where(np.isfinite(lse), np.abs(lse - t["lse"]) / (1 + np.abs(lse)), 0))
    same_inf = np.array_equal(np.isinf(lse), np.isinf(t["lse"]))
    ok = err < 1e-6 and lerr < 1e-6 and same_inf
    checked += 1
    if not ok:
        failures += 1
        print(f"FAIL {case['name']}: numpy disagrees (o err {err:.3g}, lse err {lerr:.3g}, inf match {same_inf})")


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

print(f"{checked} goldens recomputed with numpy, {failures} failed")
sys.exit(1 if failures else 0)
