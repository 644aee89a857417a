"""flashcheck.fuzz over torch SDPA's flash, cuDNN and memory-efficient backends (issue #12).

Each backend is fuzzed alone (sdpa_kernel([backend])) per dtype and per declared mask, realising
the declared mask the way torch documents it:
  none          is_causal=False
  top_left      is_causal=True (torch: "the upper-left triangle", i.e. key j visible to query i iff j <= i)
  bottom_right  attn_mask=torch.nn.attention.bias.causal_lower_right(Sq, Skv)
torch's own refusal, a RuntimeError "No available kernel" (and only that), is a decline
(flashcheck.Unsupported, counted apart, never failed or shrunk to); the per-backend UserWarnings
torch emits with it become the decline's reason. Any other exception fails the case.

The alignment probe then states, from data, which alignment is_causal=True uses per backend when
Sq != Skv (its output is judged against top_left and against bottom_right), whether an explicit
causal_lower_right mask runs and matches bottom_right, what a row with no visible key gets, and
which aten op actually ran (profiler), so a dispatch that silently used another backend shows.

--backward fuzzes each backend's backward pass instead (issue 23 item 5): flashcheck.fuzz(...,
backward=True) differentiates the same call with torch (o.backward(dO) for a dO drawn per case)
and judges dQ, dK, dV against the fp64 backward oracle; a failure shrinks as a forward's does. GQA
goes through enable_gqa, the masks as above; the alignment probe is the forward's and is skipped.

usage (from the repository root, on a GPU machine):
  PYTHONPATH=python FLASHCHECK_LIB=build/libflashcheck.so python3 tools/device/fuzz_sdpa.py \
      [--budget 240] [--seed 7] [--cases 200] [--backward] [--out DIR]
Writes a table on stdout and fuzz_sdpa.json under --out (default $OUT, else .). Exit 0 when every
backend passed wherever it ran; 1 when a case failed; 2 when the script could not run at all.
"""
import argparse
import collections
import json
import os
import re
import sys
import time
import traceback
import warnings

BACKENDS = ("flash", "cudnn", "efficient")
DTYPES = ("bf16", "f16", "f32")
MASKS = ("none", "top_left", "bottom_right")
# Probe shapes with Sq != Skv: both orders, under and over a 64/128 tile. Sq > Skv under
# bottom_right leaves rows that see no key: what a backend writes there is reported apart.
PROBE_SHAPES = ((5, 17), (17, 5), (64, 200), (200, 64), (1, 130))


def normalise(reason):
    """One decline reason per kind: numbers vary per shape and would split the counts."""
    return re.sub(r"\d+", "N", " ".join(reason.split()))[:240]


class Sdpa:
    """One backend's SDPA as a flashcheck kernel for one declared mask."""

    def __init__(self, torch, F, backend, mask):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right

        self.torch, self.F, self.mask, self.name = torch, F, mask, backend
        self.sdpa_kernel, self.causal_lower_right = sdpa_kernel, causal_lower_right
        self.backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

    def raw(self, q, k, v, p, mask=None):
        mask = mask or self.mask
        kw = dict(scale=p.scale)
        if p.heads_q != p.heads_kv:
            kw["enable_gqa"] = True
        if mask == "top_left":
            kw["is_causal"] = True
        elif mask == "bottom_right":
            kw["attn_mask"] = self.causal_lower_right(p.seq_q, p.seq_kv)
        with self.sdpa_kernel([self.backend]):
            return self.F.scaled_dot_product_attention(q, k, v, **kw)

    def __call__(self, q, k, v, p):
        import flashcheck

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                return self.raw(q, k, v, p)
            except RuntimeError as e:
                if "No available kernel" not in str(e):
                    raise
                raise flashcheck.Unsupported(normalise(self.reason([str(w.message) for w in seen]) or str(e))) from e

    # The words torch's "<backend> ... not used because:" headers start with.
    HEADER = {"flash": "flash", "cudnn": "cudnn", "efficient": "memory efficient"}

    def reason(self, messages):
        """torch warns per backend: a header "<backend> ... not used because:" and then the
        reasons. Keep the reasons under this backend's header (device call B showed the flash
        cells citing the memory-efficient backend's reason when every non-header line was kept);
        without such a header, every non-header line."""
        own, other, current = [], [], None
        for m in messages:
            if "not used because" in m:
                current = m.strip().lower()
                continue
            mine = current is not None and current.startswith(self.HEADER[self.name])
            (own if mine else other).append(m)
        return "; ".join(own or other)


def run_cell(torch, F, backend, dtype, mask, args, deadline):
    """Fuzzes one (backend, dtype, mask) cell in chunks of --chunk cases until its share of the
    budget is spent; chunk i uses seed args.seed + i (printed), so every chunk is reproducible."""
    import flashcheck

    kernel = Sdpa(torch, F, backend, mask)
    cell = dict(backend=backend, dtype=dtype, declared=mask, cases=0, passed=0, failed=0, declined=0,
                seeds=[], decline_reasons=collections.Counter(), failures=[], error=None)
    chunk = 0
    # At least one chunk per cell, even past the deadline: a cell of 0 cases would read as
    # "nothing tested". The budget is therefore soft by one chunk (and its shrinking) per cell.
    while cell["cases"] < args.cases and (chunk == 0 or time.monotonic() < deadline):
        seed = args.seed + chunk
        n = min(args.chunk, args.cases - cell["cases"])
        r = flashcheck.fuzz(kernel, cases=n, seed=seed, backend="torch", dtypes=[dtype], causal=[mask],
                            head_dims=args.head_dims, max_seq=args.max_seq, lse_base=None, dv_ne_dqk=False,
                            name=f"sdpa_{backend}_{dtype}_{mask}", verbose=False, max_failures=1,
                            shrink=not cell["failures"],  # shrink the cell's first failure only: time
                            **(dict(backward=True) if args.backward else {}))
        cell["seeds"].append(seed)
        for key in ("cases", "passed", "failed", "declined"):
            cell[key] += getattr(r, key)
        cell["decline_reasons"].update(r.decline_reasons)
        for f in r.failures:
            if len(cell["failures"]) < 2:
                cell["failures"].append(dict(problem=f.problem.line, dist=f.dist, input_seed=f.seed, seed=seed,
                                             failed=f.report.failed, report=str(f.report)[:1500]))
        chunk += 1
    cell["status"] = "failed" if cell["failed"] else ("passed" if cell["passed"] else "nothing tested")
    cell["decline_reasons"] = dict(cell["decline_reasons"].most_common(5))
    return cell


def ran_ops(torch, fn):
    """The aten SDPA ops a call dispatched to, from the profiler: which backend really ran."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = {e.name for e in prof.events()}
    return sorted(n for n in names if re.search(r"flash|efficient|cudnn|_math|fused_attention", n))


def probe(torch, F, backend, args):
    """Which alignment is_causal=True uses when Sq != Skv, and whether causal_lower_right works,
    judged by flashcheck.check against each declared alignment."""
    import flashcheck

    out = dict(backend=backend, shapes=[], is_causal=None, lower_right=None)
    votes = collections.Counter()
    lr_votes = collections.Counter()
    kern = Sdpa(torch, F, backend, "none")
    for i, (sq, skv) in enumerate(PROBE_SHAPES):
        p = flashcheck.Problem(1, 2, 2, sq, skv, 64, 64, causal="none", dtype=args.probe_dtype)
        seed = args.seed * 1000 + i
        q, k, v = flashcheck.make_inputs(p, "normal", seed, backend="torch", device="cuda")
        row = dict(seq_q=sq, seq_kv=skv, dtype=args.probe_dtype, input_seed=seed)
        for mode, vote in (("top_left", votes), ("bottom_right", lr_votes)):  # is_causal, then the explicit mask
            key = "is_causal" if mode == "top_left" else "causal_lower_right"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    o = kern.raw(q, k, v, p, mask=mode)
                    ops = ran_ops(torch, lambda: kern.raw(q, k, v, p, mask=mode))
            except RuntimeError as e:
                verdict = "declined" if "No available kernel" in str(e) else f"error: {str(e)[:160]}"
                row[key] = dict(verdict=verdict)
                vote[verdict] += 1
                continue
            matches = [a for a in ("top_left", "bottom_right")
                       if flashcheck.check(q, k, v, o, causal=a, scale=p.scale)]
            empty = None
            if sq > skv:  # bottom-right rows 0 .. Sq-Skv-1 see no key
                rows = o[:, :, : sq - skv].float()
                empty = "nan" if torch.isnan(rows).any().item() else ("zero" if (rows == 0).all().item() else "other")
            verdict = "+".join(matches) if matches else "neither"
            row[key] = dict(verdict=verdict, ops=ops, empty_rows=empty)
            vote[verdict] += 1
        out["shapes"].append(row)
    out["is_causal"] = dict(votes)
    out["lower_right"] = dict(lr_votes)
    return out


def summarise_probe(pr):
    def one(v):
        ran = {k: n for k, n in v.items() if k not in ("declined",) and not k.startswith("error")}
        if not ran:
            return "declined on every probe shape" if v.get("declined") else ", ".join(v)
        (best, n), = collections.Counter(ran).most_common(1)
        return f"{best} ({n}/{sum(v.values())} shapes" + (f", {v['declined']} declined)" if v.get("declined") else ")")
    return one(pr["is_causal"]), one(pr["lower_right"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=240,
                    help="seconds for the whole run (default 240; soft: each cell runs at least one chunk)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--cases", type=int, default=200, help="most cases per cell")
    ap.add_argument("--chunk", type=int, default=10, help="cases per fuzz call (the budget is checked between)")
    ap.add_argument("--max-seq", type=int, default=300)
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    ap.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    ap.add_argument("--probe-dtype", default="bf16", choices=DTYPES)
    ap.add_argument("--backward", action="store_true", help="fuzz the backward passes (dQ, dK, dV) instead")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    t0 = time.monotonic()
    end = t0 + args.budget

    try:
        import torch
        import torch.nn.functional as F

        import flashcheck
        assert torch.cuda.is_available(), "no CUDA device"
    except Exception as e:  # noqa: BLE001 - say why nothing ran, as JSON too
        print(f"fuzz_sdpa: cannot run: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    env = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, cudnn=torch.backends.cudnn.version(),
               flashcheck_api=flashcheck.API_VERSION, seed=args.seed, budget_s=args.budget,
               head_dims=args.head_dims, max_seq=args.max_seq, date=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    print(f"fuzz_sdpa: {env['device']}, torch {env['torch']}, cuDNN {env['cudnn']}, seed {args.seed} "
          f"(cell chunk i uses seed {args.seed}+i), budget {args.budget:.0f} s", flush=True)

    probes = []
    for b in ([] if args.backward else args.backends):  # the probe first: small, answers the alignment question
        try:
            probes.append(probe(torch, F, b, args))
        except Exception as e:  # noqa: BLE001 - one backend's trouble must not hide the others
            probes.append(dict(backend=b, error=f"{type(e).__name__}: {e}", trace=traceback.format_exc()[-2000:]))

    cells = []
    todo = [(b, d, m) for b in args.backends for d in args.dtypes for m in MASKS]
    for i, (b, d, m) in enumerate(todo):
        share = (end - time.monotonic()) / (len(todo) - i)  # what is left, split over the cells left
        try:
            cells.append(run_cell(torch, F, b, d, m, args, time.monotonic() + max(share, 0)))
        except Exception as e:  # noqa: BLE001
            cells.append(dict(backend=b, dtype=d, declared=m, status="error", error=f"{type(e).__name__}: {e}",
                              trace=traceback.format_exc()[-2000:]))
        c = cells[-1]
        print(f"  {b:9} {d:4} {m:12} " + (f"{c['status']}: {c['passed']} passed, {c['failed']} failed, "
              f"{c['declined']} declined ({time.monotonic() - t0:.0f} s)" if "cases" in c else c["error"]), flush=True)

    print(f"\n{'backend':9} {'dtype':5} {'declared':12} {'passed':>6} {'failed':>6} {'declined':>8}  status / first failure")
    for c in cells:
        if "cases" not in c:
            print(f"{c['backend']:9} {c['dtype']:5} {c['declared']:12} {'':>6} {'':>6} {'':>8}  {c['error'][:100]}")
            continue
        note = c["status"]
        if c["failures"]:
            f = c["failures"][0]
            note += f": {f['problem']} ({', '.join(f['failed'])})"
        elif c["declined"] and not c["passed"]:
            note += ": " + next(iter(c["decline_reasons"]), "")[:80]
        print(f"{c['backend']:9} {c['dtype']:5} {c['declared']:12} {c['passed']:6} {c['failed']:6} {c['declined']:8}  {note}")

    if probes:
        print("\nalignment when Sq != Skv (judged by flashcheck.check on "
              f"{', '.join(f'{a}x{b}' for a, b in PROBE_SHAPES)}, {args.probe_dtype}):")
    for pr in probes:
        if "error" in pr:
            print(f"  {pr['backend']:9} probe error: {pr['error'][:160]}")
            continue
        ic, lr = summarise_probe(pr)
        empties = {r["causal_lower_right"].get("empty_rows") for r in pr["shapes"]
                   if r["causal_lower_right"].get("empty_rows")}
        ops = sorted({o for r in pr["shapes"] for key in ("is_causal", "causal_lower_right")
                      for o in r[key].get("ops", [])})
        print(f"  {pr['backend']:9} is_causal=True -> {ic}; causal_lower_right -> {lr}"
              + (f"; rows with no key: {'/'.join(sorted(empties))}" if empties else "")
              + (f"; ran {', '.join(ops)}" if ops else ""))

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fuzz_sdpa_backward.json" if args.backward else "fuzz_sdpa.json")
    with open(path, "w") as fh:
        json.dump(dict(env=env, cells=cells, probes=probes, wall_s=round(time.monotonic() - t0, 1)), fh, indent=1,
                  default=str)
    print(f"\nwrote {path} ({time.monotonic() - t0:.0f} s)")
    return 1 if any(c.get("status") in ("failed", "error") for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
