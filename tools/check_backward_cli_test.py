"""`flashcheck check` on files that hold gradients (do, dq, dk, dv[, dsinks]): the backward judged
beside the forward, each verdict said apart in the text, JSON and JUnit; exit 0 when both pass, 1
when either fails, 125 naming the tensor for bad gradient input. Files are written here from fresh
random inputs (the seed is printed); correct gradients are the fp64 oracle's (flashcheck's Python
package over libflashcheck.so) rounded to the file's dtype.

usage: check_backward_cli_test.py FLASHCHECK_BIN PYTHON_DIR   (FLASHCHECK_LIB names the library)"""
import json
import os
import struct
import sys
import xml.etree.ElementTree as ET

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from cli_harness import CliTest  # noqa: E402

FC, PYTHON_DIR = sys.argv[1], sys.argv[2]
sys.path.insert(0, PYTHON_DIR)
import flashcheck  # noqa: E402

cli = CliTest("check_backward_cli", FC, seeded=True)
rng = np.random.default_rng(cli.seed)
ST = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.uint16): "BF16", np.dtype(np.int32): "I32"}


def write(path, tensors, metadata):
    """A safetensors file of numpy arrays (bf16 as uint16 bits), byte by byte."""
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": ST[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def narrow(x, kind):
    if kind == "bf16":
        return flashcheck.float32_to_bf16(np.asarray(x, np.float64).astype(np.float32))
    return np.asarray(x).astype(np.float32 if kind == "f32" else np.float16)


def widen(x, kind):
    return flashcheck.bf16_to_float32(x).astype(np.float64) if kind == "bf16" else np.asarray(x, np.float64)


# (name, problem line, metadata): GQA with a causal alignment and an LSE; a packed varlen batch with
# an empty sequence and padding rows; BSHD with sinks and their gradient.
CASES = [
    ("gqa", "b=2 hq=4 hkv=2 sq=21 skv=30 dqk=32 dv=32 causal=bottom_right dtype=bf16", {"causal": "bottom_right"}),
    ("varlen", "b=3 hq=2 hkv=1 layout=thd sq=9,0,14 skv=12,5,20 dqk=16 dv=16 causal=bottom_right dtype=f16",
     {"causal": "bottom_right"}),
    ("sinks", "b=1 hq=2 hkv=2 sq=11 skv=17 dqk=16 dv=8 dtype=f32 layout=bshd sinks=1", {"layout": "bshd"}),
]


def tensors_for(line, salt):
    """(tensors of a correct kernel's file, metadata, problem, dsinks or None)."""
    q, k, v, p = flashcheck.make_case(line, "normal", int(rng.integers(1 << 62)) + salt)
    kw = p.keywords()
    o, lse = flashcheck.reference(q, k, v, **kw)
    do = narrow(rng.standard_normal(o.shape), p.out_dtype)
    grads = flashcheck.reference_backward(q, k, v, do, **kw)
    t = {"q": q, "k": k, "v": v, "o": narrow(np.nan_to_num(o), p.out_dtype), "do": do}
    t.update(dq=narrow(grads[0], p.dtype), dk=narrow(grads[1], p.dtype), dv=narrow(grads[2], p.dtype))
    if p.layout == "thd":
        t["lse"] = np.nan_to_num(lse, nan=0.0).astype(np.float32)
        t["cu_seqlens_q"], t["cu_seqlens_k"] = kw["cu_seqlens_q"], kw["cu_seqlens_k"]
    else:
        t["lse"] = lse.astype(np.float32)
    if p.has_sinks:
        t["sinks"] = kw["sinks"]
        t["dsinks"] = grads[3].astype(np.float32)
    return t, p


def check(path, *extra):
    p = cli.run("check", path, "--json", "-", *extra)
    try:
        j = json.loads(p.stdout)
    except ValueError:
        cli.check(False, f"check {path}: stdout is not one JSON document", p)
        j = {}
    return p, j


files = {}
for i, (name, line, meta) in enumerate(CASES):
    t, prob = tensors_for(line, i)
    files[name] = (t, meta, prob)
    path = os.path.join(cli.tmp, f"{name}.safetensors")
    write(path, t, meta)
    p, j = check(path)
    cli.check(p.returncode == 0 and j.get("pass") is True, f"{name}: a correct kernel's gradients do not pass", p)
    b = j.get("backward", {})
    cli.check(b.get("pass") is True and j.get("forward_pass") is True, f"{name}: forward/backward verdicts not both pass", p)
    names = [g["name"] for g in b.get("gradients", [])]
    cli.check(names == ["dq", "dk", "dv"] + (["dsinks"] if prob.has_sinks else []), f"{name}: gradients judged {names}", p)
    cli.check("PASS  backward" in p.stderr and "PASS  file: forward PASS, backward PASS" in p.stderr,
              f"{name}: the text does not say both verdicts", p)

# A scaled dK: the backward fails on dk alone, the forward passes; exit 1; the text and JSON name dk and
# its worst element, the JUnit document a failed "dk: ..." test case beside the forward's passing ones.
t, meta, prob = files["gqa"]
bad = dict(t, dk=narrow(2 * widen(t["dk"], "bf16"), "bf16"))
path = os.path.join(cli.tmp, "scaled_dk.safetensors")
write(path, bad, meta)
junit = os.path.join(cli.tmp, "scaled_dk.xml")
p, j = check(path, "--junit", junit)
b = j.get("backward", {})
cli.check(p.returncode == 1 and j.get("pass") is False and j.get("forward_pass") is True, "a scaled dK does not fail alone", p)
cli.check(b.get("failed") and all(f.startswith("dk: ") for f in b["failed"]), f"failed: {b.get('failed')}", p)
worst = {g["name"]: g.get("worst") for g in b.get("gradients", [])}
cli.check(worst.get("dk") is not None and worst["dk"]["kernel"] != worst["dk"]["oracle"], "dk's worst element not named", p)
cli.check("FAIL  file: forward PASS, backward FAIL (dk)" in p.stderr and "dk (FAIL)" in p.stderr
          and "worst element: (b=" in p.stderr and "reproduce: flashcheck check" in p.stderr, "the text hides dk's failure", p)
try:
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    cli.check(any(n.startswith("dk: ") and c.find("failure") is not None for n, c in cases.items()),
              "JUnit: no failed dk test case", p)
    cli.check(all(c.find("failure") is None for n, c in cases.items() if not n.startswith("dk: ")),
              "JUnit: a test case other than dk's failed", p)
except (OSError, ET.ParseError) as e:
    cli.check(False, f"JUnit document unreadable: {e}", p)

# The same file with --html: one page holds both verdicts apart, headed by the file's FAIL; dk's part
# marks its failed criteria FAIL (never ok), names its worst element as the JSON does, and its map.
html = os.path.join(cli.tmp, "scaled_dk.html")
p = cli.run("check", path, "--html", html)
try:
    page = open(html, encoding="utf-8").read()
except OSError as e:
    page = ""
    cli.check(False, f"--html wrote no page: {e}", p)
cli.check(p.returncode == 1 and "<title>flashcheck FAIL" in page and 'id="verdicts"' in page, "the page's headline is not the file's FAIL", p)
cli.check('<h2>Forward verdict (o, lse)</h2>' in page and 'id="verdict"' in page, "the forward's verdict is not on the page", p)
cli.check('id="backward"' in page and page.index('id="verdict"') < page.index('id="backward"'), "no backward part after the forward's", p)
for g in ["dq", "dk", "dv"]:
    cli.check(f'data-gradient="{g}" data-pass="{"false" if g == "dk" else "true"}"' in page, f"{g}'s verdict is not on the page", p)
dk_part = page[page.index('id="grad-dk"'):page.index('id="grad-dv"')] if 'id="grad-dv"' in page else ""
for f in b.get("failed", []):
    crit = f.split(": ", 1)[1]
    cli.check(f'data-criterion="{crit}" data-status="FAIL"' in dk_part, f"dk's failed {crit} is not marked FAIL on the page", p)
w = worst.get("dk") or {}
cli.check(f'data-gradient="dk" data-b="{w.get("b")}" data-h="{w.get("h")}" data-row="{w.get("row")}" data-col="{w.get("col")}"' in dk_part
          and "KV head h=" in dk_part and "in kv-tile " in dk_part, "dk's worst element is not named as the JSON names it", p)
cli.check('<canvas id="grad-map-dk">' in dk_part and 'id="fc-backward-data"' in page, "dk has no error map", p)

# Right gradients beside a wrong o: the forward fails, the backward passes; exit 1.
bad = dict(t, o=narrow(0.5 * widen(t["o"], "bf16"), "bf16"))
path = os.path.join(cli.tmp, "wrong_o.safetensors")
write(path, bad, meta)
p, j = check(path)
cli.check(p.returncode == 1 and j.get("forward_pass") is False and j.get("backward", {}).get("pass") is True,
          "a wrong o with right gradients is not a forward failure alone", p)
cli.check("FAIL  file: forward FAIL, backward PASS" in p.stderr, "the text does not say which verdict failed", p)

# dQ ignoring the causal mask in the varlen file: dq fails, named by sequence.
t, meta, prob = files["varlen"]
q, k, v = t["q"], t["k"], t["v"]
kw = {n: x for n, x in prob.keywords().items()}
kw["cu_seqlens_q"], kw["cu_seqlens_k"], kw["causal"] = t["cu_seqlens_q"], t["cu_seqlens_k"], "none"
wrong_dq = flashcheck.reference_backward(q, k, v, t["do"], **kw)[0]
path = os.path.join(cli.tmp, "dq_no_mask.safetensors")
write(path, dict(t, dq=narrow(wrong_dq, "f16")), meta)
p, j = check(path)
cli.check(p.returncode == 1 and [g["name"] for g in j.get("backward", {}).get("gradients", []) if not g["pass"]] == ["dq"],
          "dQ without the causal mask does not fail dq alone", p)
cli.check("worst element: (sequence " in p.stderr, "a varlen gradient's worst element is not named by sequence", p)

# Bad input: 125 naming the tensor, and no verdict.
t, meta, prob = files["gqa"]
refused = [
    ("do of another dtype", dict(t, do=t["do"].view(np.uint16).astype(np.float32)), "tensor 'do' is F32 but o is BF16"),
    ("do of another shape", dict(t, do=t["do"][:, :, :-1]), "tensor 'do' has shape"),
    ("dk of another dtype", dict(t, dk=widen(t["dk"], "bf16").astype(np.float16)), "tensor 'dk' is F16; the gradients of BF16"),
    ("dv of another shape", dict(t, dv=t["dv"][:, :1]), "tensor 'dv' has shape"),
    ("dq missing", {n: x for n, x in t.items() if n != "dq"}, "tensor 'dq' is missing"),
    ("dsinks without sinks", dict(t, dsinks=np.zeros(4, np.float32)), "tensor 'dsinks' is given but the file has no 'sinks'"),
    ("dO misspelt", dict({n: x for n, x in t.items() if n != "do"}, dO=t["do"]), "did you mean 'do'"),
]
nan_do = t["do"].copy()
nan_do[1, 2, 3, 4] = 0x7FC0  # a bf16 NaN
refused.append(("NaN in do", dict(t, do=nan_do), "tensor 'do' holds NaN at [1,2,3,4]"))
for what, tensors, said in refused:
    path = os.path.join(cli.tmp, what.replace(" ", "_") + ".safetensors")
    write(path, tensors, meta)
    p, j = check(path)
    cli.check(p.returncode == 125 and j.get("exit_code") == 125 and said in j.get("error", ""),
              f"{what}: not refused naming the tensor ({said!r})", p)
# A paged cache whose sequences share a page: its dK/dV slot is their sum, not judged per sequence (125).
q, k, v, pp = flashcheck.make_case("b=2 hq=2 hkv=1 sq=4 skv=9,7 page=4 pages=shared dqk=16 dv=16 dtype=f32", "normal",
                                   int(rng.integers(1 << 62)))
kw = pp.keywords()
o, _ = flashcheck.reference(q, k, v, **kw)
do = rng.standard_normal(o.shape).astype(np.float32)
dq, dk, dv = (g.astype(np.float32) for g in flashcheck.reference_backward(q, k, v, do, **kw))
path = os.path.join(cli.tmp, "shared_pages.safetensors")
write(path, {"q": q, "k": k, "v": v, "o": o.astype(np.float32), "do": do, "dq": dq, "dk": dk, "dv": dv,
             "block_table": kw["block_table"], "cache_seqlens": kw["cache_seqlens"]}, {"causal": "none"})
p, j = check(path)
cli.check(p.returncode == 125 and "read the same slot" in j.get("error", "") and "'dk'" in j.get("error", ""),
          "a paged cache with shared slots is not refused naming dk/dv", p)

# Asked for, a NaN in dO is judged by its propagation: gradients the oracle computes from that dO
# (NaN exactly where it reaches) pass, and the finite ones computed without it fail.
grads = flashcheck.reference_backward(t["q"], t["k"], t["v"], nan_do, **prob.keywords())
nan_file = dict(t, do=nan_do, dq=narrow(grads[0], "bf16"), dk=narrow(grads[1], "bf16"), dv=narrow(grads[2], "bf16"))
cli.check(np.isnan(widen(nan_file["dk"], "bf16")).any(), "the oracle's gradients of a NaN dO hold no NaN: nothing tested")
path = os.path.join(cli.tmp, "nan_do_propagated.safetensors")
write(path, nan_file, meta)
p, j = check(path, "--allow-nonfinite-inputs")
cli.check(p.returncode == 0 and j.get("backward", {}).get("pass") is True, "NaN in dO, propagated as the oracle does, fails", p)
p, j = check(os.path.join(cli.tmp, "NaN_in_do.safetensors"), "--allow-nonfinite-inputs")
cli.check(p.returncode == 1 and "nan_inf_positions" in " ".join(j.get("backward", {}).get("failed", [])),
          "finite gradients of a NaN dO are not failed on their NaN positions", p)

cli.finish()
