#!/usr/bin/env python3
"""Mutation score on a GPU machine that cannot build flashcheck: mutants built elsewhere as small
plugin libraries (`tools/mutate build --plugin`), packed here, checked there by one unmutated flashcheck.

  pack  (build machine) WORK folders of `tools/mutate build --plugin` -> one .tar.xz with a manifest
  run   (GPU machine)   unpack, check the unmutated module first (every check must pass, else stop),
                        then every mutant's checks in parallel under a per-check timeout and a global
                        deadline; result.json per mutant, a report per kernel and a summary table

The checks (`--checks`) are, on the module loaded with --plugin, either the standard device check
for a kernel (a campaign of 150 cases, fail-fast, the fixed edge/regression shapes of
runner/gpu_variants_test.cpp (EdgeShapesPass) as `run --problem` lines, and a production-load slice
`run --load`), or the variant check (problem model 2 through the module's ABI 2 space: campaigns
`--variants all`, `--require window`, `--require varlen`, fixed variant problems, a plain campaign),
or the backward check (modules built with `build --plugin --plugin-backward`: `run --backward`
campaigns under two seeds and fixed backward problems, a deterministic backward called 3 times a case).
A fixed problem the unmutated module does not run (not in the kernel's declared space: exit 125) is
dropped for its mutants. Python 3 standard library only; see tools/mutate/MUTATION.md ("Plugin mutants").
"""
import argparse
import concurrent.futures
import hashlib
import io
import json
import lzma
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

# The mutation tool's package (this file's folder) by its name, from the folder above: its work
# folders' JSON is read and written the way the tool's report expects.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
from mutate.report import compute_report, print_report, read_equivalent  # noqa: E402  (stdlib only)
from mutate.store import read_json, write_json  # noqa: E402

# runner/gpu_variants_test.cpp EdgeShapesPass, dtype alternated per shape (bf16, f16, ...) to halve
# the runs; the campaign and the load slice draw both dtypes.
EDGE_SHAPES = [
    "b=1 hq=1 hkv=1 sq=1 skv=1 dqk=64 dv=64 causal=none",
    "b=1 hq=2 hkv=1 sq=1 skv=1000 dqk=128 dv=128 causal=bottom_right",
    "b=1 hq=2 hkv=2 sq=1000 skv=1 dqk=64 dv=64 causal=bottom_right",
    "b=2 hq=8 hkv=2 sq=129 skv=257 dqk=256 dv=256 causal=top_left",
    "b=1 hq=4 hkv=4 sq=257 skv=129 dqk=192 dv=128 causal=bottom_right",
    "b=1 hq=3 hkv=1 sq=4097 skv=4097 dqk=64 dv=64 causal=bottom_right",
    "b=2 hq=8 hkv=8 sq=1000 skv=100 dqk=128 dv=128 causal=bottom_right",
    "b=1 hq=16 hkv=4 sq=3000 skv=65 dqk=64 dv=64 causal=bottom_right",
    "b=4 hq=8 hkv=2 sq=777 skv=1 dqk=128 dv=128 causal=none",
    "b=8 hq=32 hkv=8 sq=1 skv=8191 dqk=128 dv=128 causal=bottom_right",
    "b=3 hq=12 hkv=4 sq=1025 skv=2049 dqk=256 dv=256 causal=top_left",
]
DTYPES = ("bf16", "f16")
# --sanitize (standard checks): >= 3 KV tiles of 128 per block (the ring wraps), tails in both
# lengths, GQA, bottom-right rows that see a partial tile.
SANITIZE_SHAPE = "b=1 hq=2 hkv=1 sq=200 skv=700 dqk=128 dv=128 causal=bottom_right"
# A sanitizer (%s: memcheck, racecheck) over one check, on buffers without their canary fence
# (FLASHCHECK_GUARD_BYTES=0: a read past a tensor's end would land in it, unseen), following the
# worker process.
SANITIZE = "FLASHCHECK_GUARD_BYTES=0 compute-sanitizer --tool %s --error-exitcode 1 --target-processes all "

# The variant set's fixed problems (problem model 2, `--checks variants`): window bounds on the
# declared KV tiles (wgmma_f16: BN 128 causal and 176 non-causal at D = 128, 128 at D = 64, 80 at
# D = 256; mma_f16: 128 at D = 64, 64 at D = 128/256), windows that leave rows empty, packed batches
# with empty sequences and seqused_kv, more than 32 sequences (the packed tile search's second
# round of 32), sinks on empty rows, softcap and ALiBi with and without a window, BSHD strides with
# nothing to modify, and (wgmma_f16 alone; 125 for mma_f16, dropped) Dqk = 192; last, a packed
# batch whose every sequence is empty (a grid of 0 q-tiles: the launch must not happen; session 10's
# run had a mutant launching it survive).
_B40 = 40
VARIANT_EDGE_SHAPES = [
    "b=1 hq=4 hkv=2 sq=512 skv=512 d=128 causal=bottom_right window=128,0",
    "b=1 hq=4 hkv=2 sq=512 skv=512 d=128 causal=bottom_right window=127,0",
    "b=1 hq=4 hkv=2 sq=512 skv=512 d=128 causal=none window=176,175",
    "b=1 hq=4 hkv=4 sq=384 skv=1024 d=64 causal=none window=128,127",
    "b=2 hq=4 hkv=2 sq=700 skv=300 d=128 causal=none window=-1,0",
    "b=1 hq=2 hkv=1 sq=200 skv=900 d=256 causal=top_left window=80,0 softcap=20 alibi=symmetric",
    "b=5 hq=2 hkv=2 sq=128,0,257,64,1 skv=128,64,0,640,1 d=256 causal=none layout=thd used=64,0,0,639,1 alibi=symmetric",
    "b=4 hq=4 hkv=2 sq=0,129,0,128 skv=0,0,300,128 d=128 causal=bottom_right layout=thd window=64,0",
    "b=2 hq=8 hkv=2 sq=1000 skv=64 d=128 causal=bottom_right window=32,0 sinks=1",
    "b=3 hq=4 hkv=1 sq=300 skv=500 d=64 causal=none layout=bshd used=500,1,250 softcap=30 sinks=1",
    "b=%d hq=2 hkv=1 sq=%s skv=%s d=64 causal=bottom_right layout=thd" % (
        _B40, ",".join(str(37 * i % 211) for i in range(_B40)), ",".join(str((53 * i + 17) % 301) for i in range(_B40))),
    "b=3 hq=8 hkv=2 sq=150 skv=400 d=128 causal=top_left alibi=symmetric slopes=batch",
    "b=2 hq=4 hkv=2 sq=257 skv=383 d=128 causal=none layout=bshd",
    "b=2 hq=6 hkv=2 sq=333 skv=700 dqk=192 dv=128 causal=none layout=bshd window=100,-1 softcap=15",
    "b=3 hq=2 hkv=1 sq=0,0,0 skv=5,0,64 d=64 causal=none layout=thd",
]

# The backward set's fixed problems (`--checks backward`, plain attention, Dqk = Dv in {64, 128} as
# mma_f16's backward declares; a problem outside a module's backward space is 125 on the unmutated
# module and dropped): a single query and a single key, Sq = 1 against a long Skv (GQA), Sq > Skv
# bottom-right (rows that see no key: zero gradients, lengths off every tile), Sq < Skv
# bottom-right, GQA 4 of 8 (groups of 2 and of 4) with top-left masking, lengths one off a 64-row
# tile either way, several batches of one long head, and a problem of one query row in all. dtype alternates bf16, f16, and the mode
# of a backward that declares determinism alternates every two problems (backward_mode_seed), so
# each (dtype, mode) pair runs twice.
BACKWARD_EDGE_SHAPES = [
    "b=1 hq=2 hkv=2 sq=1 skv=1 d=64 causal=none",
    "b=2 hq=8 hkv=2 sq=1 skv=300 d=128 causal=bottom_right",
    "b=2 hq=4 hkv=1 sq=300 skv=1 d=64 causal=bottom_right",
    "b=1 hq=8 hkv=2 sq=257 skv=129 d=128 causal=bottom_right",
    "b=1 hq=4 hkv=4 sq=129 skv=383 d=64 causal=bottom_right",
    "b=2 hq=8 hkv=4 sq=200 skv=333 d=128 causal=top_left",
    "b=1 hq=2 hkv=1 sq=65 skv=63 d=64 causal=top_left",
    "b=3 hq=4 hkv=1 sq=97 skv=191 d=128 causal=none",
    # A query tile whose last row's diagonal key starts a 64-key tile (row 128 sees key 128): the
    # deterministic dQ pass must walk that tile. (A kv_end one short still survives it: the one
    # missing term of 129 is under the gradient criteria's global limits; DETECTION.md.)
    "b=1 hq=2 hkv=1 sq=129 skv=129 d=64 causal=top_left",
    # One query row in all (B·Hq·Sq = 1): a pass launched only for "more than one row" (D's, or the
    # dQ sum's rounding) is skipped here alone (wgmma_f16's backward survivors, session 21).
    "b=1 hq=1 hkv=1 sq=1 skv=200 d=128 causal=none",
]


BACKWARD_MEMCHECK_SHAPE = "b=2 hq=8 hkv=4 sq=200 skv=333 d=128 causal=top_left"
# Racecheck runs the kernels far slower: one small problem with several query and key tiles, GQA.
BACKWARD_RACECHECK_SHAPE = "b=1 hq=2 hkv=1 sq=150 skv=200 d=64 causal=bottom_right"


def backward_mode_seed(start, deterministic):
    """The first input seed from `start` whose case runs the asked mode of a backward declared
    deterministic: runner/backward_campaign.cpp deterministic_mode, the top bit of the seed times
    0x9E3779B97F4A7C15 (mod 2^64), picks the deterministic mode (called 3 times, compared
    bitwise) or the default one (atomics allowed, called once). The selftest checks that flashcheck
    runs the mode this says."""
    s = start
    while (((s * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) >> 63 == 1) != deterministic:
        s += 1
    return s


def checks_for(args):
    """(name, command template, droppable) in order: cheap and most killing first; a mutant stops at
    its first kill. {fc} flashcheck, {bin} the module, {kernel} its kernel name. A droppable check
    (one fixed problem) that the unmutated module cannot run (125: outside the kernel's declared
    space) is dropped for that kernel; any other check must pass on it."""
    # --timeout per case: a hanging mutant is failed by flashcheck (kernel_crashed: timed out) long
    # before the per-check limit, and frees its share of the GPU.
    one = "{fc} run --plugin {bin} --kernel {kernel} --timeout %d" % args.case_timeout
    run = one + " --seed %d --no-shrink --fail-fast" % args.seed
    shapes = EDGE_SHAPES
    if args.checks == "backward":
        # run --backward (the module's backward space: plain problems, both dtypes, its head dims,
        # causal modes, GQA). A backward declared deterministic runs, per case, its deterministic
        # mode (3 calls compared bitwise by flashcheck) or its default one (atomic dQ), half the
        # cases each. Two seeds: the second campaign after the fixed problems.
        one = "{fc} run --backward --plugin {bin} --kernel {kernel} --timeout %d" % args.case_timeout
        brun = one + " --no-shrink --fail-fast --max-seq %d --max-work %g%s" % (
            args.backward_max_seq, args.backward_max_work, " --oracle %s" % args.oracle if args.oracle else "")
        out = [("backward", brun + " --seed %d --cases %d" % (args.seed, args.cases), False)]
        out += [("bedge%d" % i, one + " --problem %s --dist normal --input-seed %d"
                 % (shlex.quote("%s dtype=%s" % (s, DTYPES[i % 2])), backward_mode_seed(args.seed, i // 2 % 2 == 0)), True)
                for i, s in enumerate(BACKWARD_EDGE_SHAPES)]
        out.append(("backward2", brun + " --seed %d --cases %d" % (args.seed + 1, args.cases), False))
        if shutil.which("compute-sanitizer"):
            # Last, for what survives the outputs: memory safety and races, which no gradient
            # shows. memcheck over one problem with keys no row sees (top-left, Skv > Sq: KV tiles
            # with no step), rows off the warp tiles and GQA, in each mode (the deterministic one
            # has its own dQ pass), on buffers without their 64 KiB canary fence
            # (FLASHCHECK_GUARD_BYTES=0): a reduction of zeros one row past the dQ sum, a prefetch
            # past the last step or LSE read one row past land in the canary otherwise, where
            # memcheck cannot see them. Then racecheck over a smaller problem in the deterministic
            # mode (every kernel of the backward): a barrier or commit dropped between a stage's
            # copies and its reads, which the values survive when the copies are quick. The worker
            # process is followed (--target-processes all); their own per-case timeout, as the
            # sanitizers run the kernels many times slower.
            slow = "{fc} run --backward --plugin {bin} --kernel {kernel} --timeout %d" % max(120, args.case_timeout)
            for name, deterministic in (("bmemcheck", False), ("bmemcheck_det", True)):
                out.append((name, SANITIZE % "memcheck" + slow + " --problem %s --dist normal --input-seed %d"
                            % (shlex.quote(BACKWARD_MEMCHECK_SHAPE + " dtype=bf16"), backward_mode_seed(args.seed, deterministic)), True))
            out.append(("bracecheck", SANITIZE % "racecheck" + slow + " --problem %s --dist normal --input-seed %d"
                        % (shlex.quote(BACKWARD_RACECHECK_SHAPE + " dtype=f16"), backward_mode_seed(args.seed, True)), True))
        return out
    if args.checks == "variants":
        # Problem model 2 (the module's ABI 2 space): every declared variant, then a window and a
        # packed batch in every case, then plain problems (the plain instantiation shares the
        # headers); sequences long enough for several KV tiles of every declared BN.
        lim = " --max-seq %d --max-work %g" % (args.max_seq, args.max_work)
        vrun = "{fc} run --plugin {bin} --kernel {kernel} --timeout %d --no-shrink --fail-fast%s%s" % (
            args.case_timeout, lim, " --oracle %s" % args.oracle if args.oracle else "")
        part = max(1, args.cases // 2)
        out = [("variants", vrun + " --variants all --seed %d --cases %d" % (args.seed, args.cases), False),
               ("window", vrun + " --require window --seed %d --cases %d" % (args.seed + 1, part), False),
               ("varlen", vrun + " --require varlen --seed %d --cases %d" % (args.seed + 2, part), False)]
        shapes = VARIANT_EDGE_SHAPES
    else:
        out = [("campaign", run + " --cases %d" % args.cases, False)]
    dtypes = args.dtypes.split(",") if args.dtypes else DTYPES
    for i, s in enumerate(shapes):
        out.append(("edge%d" % i, one + " --problem %s --dist normal --input-seed %d"
                    % (shlex.quote("%s dtype=%s" % (s, dtypes[i % len(dtypes)])), args.seed), True))
    if args.checks == "variants":
        out.append(("plain", vrun + " --variants none --seed %d --cases %d" % (args.seed + 3, part), False))
    else:
        out.append(("load", run + " --load --cases %d" % args.load_cases, False))
        if args.sanitize and shutil.which("compute-sanitizer"):
            # What the values survive: a read past a tensor or a ring slot refilled while a GEMM
            # still reads it. memcheck on unfenced buffers (FLASHCHECK_GUARD_BYTES=0: the canary
            # would absorb a read past the end), racecheck on a problem whose ring wraps; the
            # worker is followed, with a per-case timeout for the sanitizers' slowness.
            slow = "{fc} run --plugin {bin} --kernel {kernel} --timeout %d" % max(120, args.case_timeout)
            for tool in ("memcheck", "racecheck"):
                out.append((tool, SANITIZE % tool + slow + " --problem %s --dist normal --input-seed %d"
                            % (shlex.quote(SANITIZE_SHAPE + " dtype=" + dtypes[0]), args.seed), True))
    return out


# ---------------------------------------------------------------------------------------------
# pack (build machine)
# ---------------------------------------------------------------------------------------------

def cmd_pack(args):
    kernels = []
    # A window wider than a module (preset 6's is 8 MiB; a wgmma_f16 module with the variant
    # instantiations is 8 MB): each mutant's module then compresses against its siblings, which
    # share almost every byte (measured: 0.5 MB for an mma_f16 module alone, 60 kB per sibling).
    part = args.out + ".part"  # renamed when complete: a refused work folder leaves no archive behind
    xz = lzma.LZMAFile(part, "w", format=lzma.FORMAT_XZ,
                       filters=[{"id": lzma.FILTER_LZMA2, "preset": 6, "dict_size": 64 << 20}])
    try:
        with xz, tarfile.open(fileobj=xz, mode="w") as tar:
            for spec in args.work:
                name, work = spec.split("=", 1)
                work, _, registered = work.partition(",")  # the kernel's registered name, if not the folder's
                cat = read_json(os.path.join(work, "mutants.json"))
                mod = read_json(os.path.join(work, "_module", "module.json"))
                if not cat or not mod:
                    raise SystemExit("mutate_device.py: %s is not a `tools/mutate build --plugin` work folder" % work)
                lib = mod["library"]
                tar.add(os.path.join(work, "_module", lib), arcname="%s/_module/%s" % (name, lib))
                kept = []
                for m in cat["mutants"]:
                    d = os.path.join(work, m["id"])
                    b = read_json(os.path.join(d, "build.json"))
                    if not b or b.get("status") not in ("built", "build_failed", "unreachable"):
                        continue  # never built here: left out of the pack and the catalogue
                    kept.append(m)
                    for f in ("build.json", "diff.patch", lib):
                        if os.path.exists(os.path.join(d, f)):
                            tar.add(os.path.join(d, f), arcname="%s/%s/%s" % (name, m["id"], f))
                cat = dict(cat, mutants=kept)
                data = json.dumps(cat, indent=1).encode()
                info = tarfile.TarInfo("%s/mutants.json" % name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                kernels.append({"name": name, "library": lib, "plugin_kernel": (registered or name) + args.suffix,
                                "kernel_dir": cat.get("kernel_dir"), "mutants": len(kept),
                                "backward": bool(mod.get("backward", False))})
                print("packed %s: %d mutants" % (name, len(kept)))
            data = json.dumps({"kernels": kernels}, indent=1).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    except BaseException:
        os.remove(part)
        raise
    os.replace(part, args.out)
    print("%s: %.1f MiB" % (args.out, os.path.getsize(args.out) / 2**20))
    if args.flashcheck:
        pack_binary(args.flashcheck, os.path.join(os.path.dirname(os.path.abspath(args.out)), "bin.tar.xz"))
    return 0


def pack_binary(fc, out):
    """The unmutated flashcheck and the BLAS runtime it links (OpenBLAS with its Fortran, quadmath and
    OpenMP libraries: not on every GPU machine; the C and C++ runtimes are the machine's own) as one
    xz tar, flashcheck and lib/; lib/ goes on LD_LIBRARY_PATH there."""
    ldd = subprocess.run(["ldd", fc], capture_output=True, text=True, check=True).stdout
    # "libopenblas.so.0 => /usr/lib/.../libopenblas.so.0 (0x...)": the soname and the path it resolves to
    libs = sorted(set(re.findall(r"^\s*(\S*(?:openblas|gfortran|quadmath|gomp)\S*)\s*=>\s*(/\S+)", ldd, re.M)))
    part = out + ".part"
    xz = lzma.LZMAFile(part, "w", format=lzma.FORMAT_XZ, filters=[{"id": lzma.FILTER_LZMA2, "preset": 9, "dict_size": 192 << 20}])
    with xz, tarfile.open(fileobj=xz, mode="w") as tar:
        tar.add(os.path.realpath(fc), arcname="flashcheck")
        for name, path in libs:
            tar.add(os.path.realpath(path), arcname="lib/" + name)  # the file behind the soname's link
    os.replace(part, out)
    print("%s: flashcheck and %d libraries, %.1f MiB" % (out, len(libs), os.path.getsize(out) / 2**20))


# ---------------------------------------------------------------------------------------------
# run (GPU machine)
# ---------------------------------------------------------------------------------------------

class Clock:
    def __init__(self, deadline, hard):
        self.t0 = time.time()
        self.deadline = self.t0 + deadline  # no mutant starts after this
        self.hard = self.t0 + hard  # every check is cut here (the mutant is then "not run", not killed)

    def left(self):
        return self.hard - time.time()


def run_cmd(cmd, timeout, env):
    t0 = time.time()
    p = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, env=env)
    try:
        out, _ = p.communicate(timeout=max(1.0, timeout))
        return p.returncode, round(time.time() - t0, 2), (out or "")[-3000:]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, round(time.time() - t0, 2), (out or "")[-3000:]


def fill(template, fc, lib, kernel):
    return template.replace("{fc}", shlex.quote(fc)).replace("{bin}", shlex.quote(lib)).replace("{kernel}", kernel)


def check_mutant(k, m_id, checks, args, clock, env):
    """Runs the checks in order; writes WORK/<id>/result.json the way the tool's report reads it."""
    d = os.path.join(k["dir"], m_id)
    lib = os.path.join(d, k["library"])
    result = {"id": m_id, "checks": [], "checks_key": k["checks_key"]}
    final = "survived"
    for name, tpl, timeout in checks:
        limit = min(timeout, clock.left())
        if limit < 5:
            final = "cut"
            break
        rc, dt, tail = run_cmd(fill(tpl, args.flashcheck, lib, k["plugin_kernel"]), limit, env)
        cut = rc is None and limit < timeout
        verdict = ("cut" if cut else "timeout") if rc is None else {0: "pass", 1: "killed", 125: "untestable"}.get(rc, "crash")
        result["checks"].append({"check": name, "verdict": verdict, "rc": rc, "seconds": dt, "tail": tail})
        if verdict == "cut":
            final = "cut"
            break
        if verdict in ("killed", "timeout", "crash"):
            final = "killed"
            result["killed_by"] = "%s: %s%s" % (name, verdict, "" if rc in (None, 1) else " rc=%s" % rc)
            break
        if verdict == "untestable":
            final = "untestable"
    result["status"] = final
    result["seconds"] = round(sum(c["seconds"] for c in result["checks"]), 2)
    if final != "cut":  # a cut mutant stays "not run" in the report, never a kill or a survivor
        write_json(os.path.join(d, "result.json"), result)
    return result


def baseline(k, args, clock, env, log):
    """The unmutated module through every check. Edge shapes it cannot run (125: outside the kernel's
    space) are dropped for this kernel; any other failure stops the kernel's scoring."""
    lib = os.path.join(k["dir"], "_module", k["library"])
    keep = []
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        for name, tpl, droppable in checks_for(args):
            jobs.append((name, tpl, droppable, ex.submit(run_cmd, fill(tpl, args.flashcheck, lib, k["plugin_kernel"]),
                                                         min(args.timeout, clock.left()), env)))
        ok = True
        for name, tpl, droppable, f in jobs:
            rc, dt, tail = f.result()
            log("  base %-9s %-10s rc=%s %.1fs" % (k["name"], name, rc, dt))
            if rc == 0:
                # A mutant's check may take a few times the unmutated one's (6 share the GPU) before
                # it counts as a hang.
                keep.append((name, tpl, max(args.timeout, 4 * dt)))
            elif rc == 125 and droppable:
                continue
            else:
                log(tail[-1500:])
                log("  BASE FAILS %s on %s: this kernel is not scored (a check that fails unmutated kills everything)"
                    % (name, k["name"]))
                ok = False
    return ok, keep


def dry_run(args):
    """The checks each kernel of the pack would run, as shell lines ({bin}: the mutant's module)."""
    fc = args.flashcheck or os.path.join(os.path.abspath(args.dest), "_bin", "flashcheck")  # where --bin unpacks it
    names = [("{kernel}", "{kernel}")]
    if args.pack:
        with tarfile.open(args.pack) as tar:
            man = json.load(tar.extractfile("manifest.json"))
        names = [(k["name"], k["plugin_kernel"]) for k in man["kernels"] if not args.kernel or k["name"] in args.kernel]
    for name, kernel in names:
        print("# %s: %s checks, in order (a mutant stops at its first kill)" % (name, args.checks))
        for check, tpl, droppable in checks_for(args):
            print("%-10s %s%s" % (check, fill(tpl, fc, "{bin}", kernel), "   # dropped if 125 unmutated" if droppable else ""))
    return 0


def unpack_binary(bin_pack, dest, env):
    """pack --flashcheck's bin.tar.xz unpacked under DEST/_bin: its flashcheck, with lib/ first on the
    library path of every check (the checks' environment, `env`)."""
    d = os.path.join(dest, "_bin")
    with tarfile.open(bin_pack) as tar:
        tar.extractall(d)
    lib = os.path.join(d, "lib")
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return os.path.join(d, "flashcheck")


def cmd_run(args):
    if not args.flashcheck and not args.bin:
        raise SystemExit("mutate_device.py run: give --flashcheck or --bin")
    if args.dry_run:
        return dry_run(args)
    if not args.pack:
        raise SystemExit("mutate_device.py run: --pack is required (except with --dry-run)")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    logf = open(os.path.join(out, "mutation.log"), "w")
    lock = threading.Lock()

    def log(s):
        with lock:
            print(s, flush=True)
            logf.write(s + "\n")
            logf.flush()

    clock = Clock(args.deadline, args.hard_deadline)
    dest = os.path.abspath(args.dest)
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(args.pack) as tar:
        tar.extractall(dest)
    man = read_json(os.path.join(dest, "manifest.json"))
    if not args.resume:
        # Results of an earlier call into the same --dest would otherwise count in this report.
        for k in man["kernels"]:
            kd = os.path.join(dest, k["name"])
            for m_id in os.listdir(kd):
                if os.path.exists(os.path.join(kd, m_id, "result.json")):
                    os.remove(os.path.join(kd, m_id, "result.json"))
    env = dict(os.environ)
    if args.bin:
        args.flashcheck = unpack_binary(args.bin, dest, env)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.jobs)))
    for e in args.env or []:
        # e.g. FLASHCHECK_PERTURB_SEED=7 for perturbed modules (gpu/common/perturb_host.h): the
        # kernel workers inherit flashcheck's environment.
        name, eq, value = e.partition("=")
        if not eq or not name:
            raise SystemExit("mutate_device.py: --env wants NAME=VALUE, got %r" % e[:40])
        env[name] = value
    log("unpacked %s in %.1fs: %s; %s checks, -j %d, deadline %ds (hard %ds), timeout %ds per check, OMP_NUM_THREADS=%s%s" %
        (args.pack, time.time() - clock.t0, ", ".join("%s %d mutants" % (k["name"], k["mutants"]) for k in man["kernels"]),
         args.checks, args.jobs, args.deadline, args.hard_deadline, args.timeout, env["OMP_NUM_THREADS"],
         "".join(" " + e for e in args.env or [])))
    only = None
    if args.only_ids:
        # The rest of a sample an earlier call's deadline left unchecked, on a fresh machine (where
        # --resume has nothing to resume): the report then scores these alone, to be added by hand.
        with open(args.only_ids) as f:
            only = {ln.split()[0] for ln in f if ln.strip() and not ln.startswith("#")}
        log("  --only-ids: %d mutants listed in %s" % (len(only), args.only_ids))
    kernels = []
    for k in man["kernels"]:
        if args.kernel and k["name"] not in args.kernel:
            continue
        k["dir"] = os.path.join(dest, k["name"])
        if args.checks == "backward" and not k.get("backward"):
            # Its module exports no backward: every check would be 125 on it.
            log("  %s: its modules were built without --plugin-backward (no backward exported); not scored" % k["name"])
            continue
        ok, checks = baseline(k, args, clock, env, log)
        if ok:
            k["checks"] = checks
            # What a result was checked with: --resume reuses only results of the same checks.
            k["checks_key"] = hashlib.sha1(json.dumps([[n, t] for n, t, _ in checks]).encode()).hexdigest()[:16]
            kernels.append(k)
    if not kernels:
        log("ABORT: no kernel's unmutated module passes its checks; nothing scored")
        return 2
    # Interleave the kernels so a deadline leaves each with a comparable share checked.
    queues = []
    for k in kernels:
        cat = read_json(os.path.join(k["dir"], "mutants.json"))
        ids = [m["id"] for m in cat["mutants"]
               if (read_json(os.path.join(k["dir"], m["id"], "build.json")) or {}).get("status") == "built"]
        if only is not None:
            ids = [i for i in ids if i in only]
        # Hash order, not file order: a deadline then leaves an unbiased sample unchecked, not one file.
        ids.sort(key=lambda i: hashlib.sha1(i.encode()).hexdigest())
        queues.append([(k, i) for i in ids])
    order = []
    while any(queues):
        for q in queues:
            if q:
                order.append(q.pop(0))
    done = [0]

    def task(item):
        k, m_id = item
        old = read_json(os.path.join(k["dir"], m_id, "result.json"))
        if old and old.get("checks_key") == k["checks_key"]:
            return old  # --resume: checked by an earlier call with the same checks
        if time.time() > clock.deadline:
            return None
        r = check_mutant(k, m_id, k["checks"], args, clock, env)
        with lock:
            done[0] += 1
        log("[%d/%d %4.0fs] %-9s %-30s %-9s %s" % (done[0], len(order), time.time() - clock.t0, k["name"], m_id,
                                                  r["status"], r.get("killed_by", "")))
        return r

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        results = [r for r in ex.map(task, order) if r]
    log("checked %d of %d mutants in %.0fs" % (len(results), len(order), time.time() - clock.t0))

    rows = []
    summary = {}
    for k in kernels:
        eq_path = os.path.join(os.path.dirname(os.path.realpath(__file__)), "equivalent_%s.txt" % k["name"])
        rep = compute_report(k["dir"], read_equivalent(eq_path if os.path.exists(eq_path) else None))
        per_check = {}
        for r in results:
            for c in r["checks"]:
                per_check.setdefault(c["check"], []).append(c["seconds"])
        rep["check_seconds_median"] = {n: sorted(v)[len(v) // 2] for n, v in per_check.items()}
        rep["checks"] = [n for n, _, _ in k["checks"]]
        killers = {}
        for r in results:
            if r.get("killed_by") and os.path.isdir(os.path.join(k["dir"], r["id"])):
                kb = r["killed_by"].split(":")[0]
                killers[kb] = killers.get(kb, 0) + 1
        rep["killed_by_check"] = killers
        cand_path = os.path.join(os.path.dirname(os.path.realpath(__file__)), "equivalent_candidates_%s.txt" % k["name"])
        cands = read_equivalent(cand_path if os.path.exists(cand_path) else None)
        argued = [sv["id"] for sv in rep["survivors"] if sv["id"] in cands]
        sm = rep["summary"]
        denom = sm["tested"] - sm["equivalent"] - len(argued)
        rep["candidates"] = {"survived": argued, "killed": [i for i in cands if i not in argued and
                                                            (read_json(os.path.join(k["dir"], i, "result.json")) or {}).get("status") == "killed"],
                             "score_if_equivalent": (sm["killed"] / denom) if denom > 0 else None}
        with open(os.path.join(out, "mutation_%s.json" % k["name"]), "w") as f:
            json.dump(rep, f, indent=1)
        with open(os.path.join(out, "mutation_%s.txt" % k["name"]), "w") as f:
            print_report(rep, show_diffs=True, out=f)
        # Survivors' diffs in the log too: the lead reads only the output tail and $OUT.
        print_report(rep, show_diffs=True, out=logf)
        s = rep["summary"]
        summary[k["name"]] = s
        rows.append((k["name"], s))
    with open(os.path.join(out, "mutation_summary.json"), "w") as f:
        json.dump({"summary": summary, "seconds": round(time.time() - clock.t0, 1)}, f, indent=1)
    with open(os.path.join(out, "survivors.txt"), "w") as f:  # one line a survivor, every kernel
        for name, _ in rows:
            for sv in read_json(os.path.join(out, "mutation_%s.json" % name))["survivors"]:
                f.write("%-9s %-38s %s:%s  %s\n" % (name, sv["id"], sv.get("file", "?"), sv.get("line", "?"),
                                                    sv.get("description", "")))
    print()
    print("MUTATION SCORE (device check on plugin mutants; full reports: $OUT/mutation_<kernel>.txt/.json)")
    print("%-10s %6s %6s %6s %6s %6s %7s %7s %7s" % ("kernel", "built", "tested", "killed", "surv", "equiv", "not_run",
                                                    "untest", "score"))
    for name, s in rows:
        sc = "n/a" if s["score"] is None else "%.1f%%" % (100 * s["score"])
        print("%-10s %6d %6d %6d %6d %6d %7d %7d %7s" % (name, s["built"], s["tested"], s["killed"], s["survived"],
                                                      s["equivalent"], s["not_run"], s["untestable"], sc))
    for name, _ in rows:
        rep = read_json(os.path.join(out, "mutation_%s.json" % name))
        print("%s survivors: %s" % (name, " ".join(sv["id"] for sv in rep["survivors"]) or "none"))
        c = rep["candidates"]
        if c["survived"] or c["killed"]:
            print("%s argued-equivalent candidates (tools/mutate/equivalent_candidates_%s.txt): %d survived, %d killed %s; "
                  "score if the survivors are equivalent: %s" % (name, name, len(c["survived"]), len(c["killed"]),
                                                                 " ".join(c["killed"]),
                                                                 "n/a" if c["score_if_equivalent"] is None else
                                                                 "%.1f%%" % (100 * c["score_if_equivalent"])))
        print("%s killed by: %s; median s per check: %s" % (name, rep["killed_by_check"], rep["check_seconds_median"]))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    sp = sub.add_parser("pack", help="pack `tools/mutate build --plugin` work folders for the GPU machine")
    sp.add_argument("--work", action="append", required=True, help="NAME=WORK_DIR[,KERNEL], e.g. mma_f16=build-mutants/mma_f16 (KERNEL: the "
                    "registered name when it is not NAME)")
    sp.add_argument("--suffix", default=".mutant", help="the --plugin-suffix the modules were built with")
    sp.add_argument("--out", required=True, help="the .tar.xz to write")
    sp.add_argument("--flashcheck", help="also write bin.tar.xz beside --out: this flashcheck binary and the BLAS "
                    "runtime it links (lib/), for a GPU machine that has neither")
    sp.set_defaults(fn=cmd_pack)
    sp = sub.add_parser("run", help="check packed mutants with an unmutated flashcheck (no build)")
    sp.add_argument("--pack", help="the .tar.xz of `pack` (required unless --dry-run)")
    sp.add_argument("--flashcheck", help="the unmutated flashcheck binary")
    sp.add_argument("--bin", help="instead of --flashcheck: the bin.tar.xz of `pack --flashcheck` (flashcheck and its "
                    "BLAS runtime), unpacked under --dest")
    sp.add_argument("--dry-run", action="store_true",
                    help="print each kernel's checks as shell lines (the pack's kernels when --pack is given) and stop")
    sp.add_argument("--dest", default="/tmp/fc_mutants", help="where the pack is unpacked")
    sp.add_argument("--out", default=os.environ.get("OUT", "mutation-out"))
    sp.add_argument("--kernel", action="append", help="only these kernels of the pack")
    sp.add_argument("--resume", action="store_true",
                    help="keep the results an earlier call left in --dest (same pack, same checks) and check only the "
                         "mutants it did not reach (a second call on a warm machine); otherwise they are removed")
    sp.add_argument("--only-ids", help="check only the mutants whose ids this file lists (one per line): the rest "
                    "of a sample an earlier call did not reach, on a fresh machine")
    sp.add_argument("--env", action="append", help="NAME=VALUE set for every check (e.g. FLASHCHECK_PERTURB_SEED=7, "
                    "FLASHCHECK_PERTURB=poison,stretch,delay for perturbed modules)")
    sp.add_argument("-j", "--jobs", type=int, default=6, help="mutants checked at once (they share the GPU)")
    sp.add_argument("--timeout", type=float, default=60,
                    help="seconds per check (at least 4x the unmutated module's); past it the mutant is killed (a hang)")
    sp.add_argument("--deadline", type=float, default=400, help="seconds after which no mutant starts")
    sp.add_argument("--hard-deadline", type=float, default=480,
                    help="seconds after which running checks are cut (their mutants count as not run)")
    sp.add_argument("--seed", type=int, default=11)
    sp.add_argument("--cases", type=int, default=150)
    sp.add_argument("--load-cases", type=int, default=6)
    sp.add_argument("--case-timeout", type=int, default=20, help="flashcheck run --timeout: seconds per case")
    sp.add_argument("--checks", choices=("standard", "variants", "backward"), default="standard",
                    help="standard: campaign, the EdgeShapesPass shapes, load (plain problems); variants: problem "
                         "model 2 (campaigns --variants all, --require window, --require varlen, fixed variant "
                         "problems, a plain campaign), for modules exporting ABI 2; backward: run --backward "
                         "campaigns (--seed, then --seed + 1, --cases each) and BACKWARD_EDGE_SHAPES, for modules "
                         "built with --plugin-backward")
    sp.add_argument("--dtypes", help="standard, variants: the dtypes the fixed problems take in turn (default bf16,f16; "
                                     "e4m3 for an fp8 kernel)")
    sp.add_argument("--sanitize", action="store_true",
                    help="standard: also memcheck (unfenced buffers) and racecheck on one fixed problem")
    sp.add_argument("--backward-max-seq", type=int, default=384, help="backward: the campaigns' --max-seq")
    sp.add_argument("--backward-max-work", type=float, default=3e7, help="backward: the campaigns' --max-work")
    sp.add_argument("--max-seq", type=int, default=600, help="variants: the campaigns' --max-seq")
    sp.add_argument("--max-work", type=float, default=6e7, help="variants: the campaigns' --max-work")
    sp.add_argument("--oracle", choices=("cpu", "gpu", "auto"),
                    help="variants, backward: the campaigns' --oracle (default: flashcheck's)")
    sp.set_defaults(fn=cmd_run)
    args = p.parse_args(argv)
    if getattr(args, "flashcheck", None):
        args.flashcheck = os.path.abspath(args.flashcheck)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
