"""The tool's own test on toy sources: the lexer, the operators (the async-race class and the
perturbed build's code included), ids, apply, a real build and run of toy mutants and the report;
with --flashcheck BUILD also plugin modules of gpu/plugin/host_module. Standard library only."""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

from .build import build_one, plan_build
from .commands import check_work_kind, make_plan, save_catalogue
from .operators import OPERATORS
from .report import compute_report, print_report, read_equivalent
from .run import check_env, run_check, run_one
from .plugin import MODULE_SOURCES
from .sources import apply_mutant, enumerate_mutants, original_line
from .store import read_json, write_json


TOY_KERNEL = r'''// toy kernel: comments like a < b, __syncthreads(); and if (x) must never be mutated
#include "toy/util.h"
#define LIMIT(a) ((a) < 4)
/* block comment: cp_async_wait<0>(); fmaxf(a, b) */
static_assert(sizeof(int) >= 4, "int < 32 bits");
int body(int n, int* out, float* f) {
  const char* s = "x < y && __syncthreads();";
  int acc = 0;
  for (int i = 0; i < n; ++i) {
    if (i >= n - 1) acc += out[i + 1];
    acc += out[(i * 3) ^ (i & 7)];
  }
  f[0] = fmaxf(f[1], f[2]) * f[3];
  f[1] *= f[4];
  __syncthreads();
  cp_async_wait<1>();
  cp_async_commit();
  asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(acc) : "f"(f[0]), "f"(f[1]));
  unsigned v = __floats2bfloat162_rn(f[0], f[1]);
  return acc == 0 && n != 2 ? -INFINITY : (acc >> 2) / n;
}
'''

# The async-race class (REL, wgmma WAIT) and the perturbed build's code, which is never mutated.
TOY_ASYNC = r'''__device__ void consume(int n) {
  for (int t = 0; t < n; ++t) {
    gemm();
    wgmma::commit();
    wgmma::wait<1>();
    sync::mbar_arrive(sm.k_empty(t));
    work();
    wgmma::wait<0>();
    sync::mbar_arrive(sm.v_empty(t));
  }
  wgmma::wait<0>();
  pipeline.consumer_release(state);
#ifdef FLASHCHECK_PERTURB
  if (n < 3) perturb::on_use(1);
#else
  int x = a < b;
#endif
#ifndef FLASHCHECK_PERTURB
  int y = c < d;
#else
  int z = e < f;
#endif
}
'''


def selftest_async(tmp, check):
    os.makedirs(os.path.join(tmp, "toy_async"))
    with open(os.path.join(tmp, "toy_async", "a.cuh"), "w") as f:
        f.write(TOY_ASYNC)
    ms = enumerate_mutants(tmp, "toy_async", ops=list(OPERATORS))
    by_op = {}
    for m in ms:
        by_op.setdefault(m.op, []).append(m)
    rel = sorted(m.description for m in by_op.get("REL", []))
    check(rel == sorted(["`sync::mbar_arrive(sm.k_empty(t));` moved above `wgmma::wait<1>();`",
                         "`sync::mbar_arrive(sm.v_empty(t));` moved above `wgmma::wait<0>();`",
                         "`sync::mbar_arrive(sm.v_empty(t));` moved above `wgmma::wait<1>();`",
                         "`pipeline.consumer_release(state);` moved above `wgmma::wait<0>();`"]), "REL mutants: %s" % rel)
    m = [x for x in by_op["REL"] if "k_empty" in x.description][0]
    out = apply_mutant(TOY_ASYNC, m)
    check("    sync::mbar_arrive(sm.k_empty(t));\n    wgmma::wait<1>();\n    work();" in out, "REL moves the line:\n" + out)
    check(out.count("\n") == TOY_ASYNC.count("\n") and sorted(out.split("\n")) == sorted(TOY_ASYNC.split("\n")),
          "REL only reorders lines")
    waits = sorted(m.description for m in by_op.get("WAIT", []))
    check(waits == sorted(["`wait<1>` -> `wait<2>` (shallower)", "`wait<0>` -> `wait<1>` (shallower)",
                           "`wait<0>` -> `wait<1>` (shallower)", "`wgmma::wait<1>()` removed",
                           "`wgmma::wait<0>()` removed", "`wgmma::wait<0>()` removed"]), "wgmma WAIT mutants: %s" % waits)
    removed = [x for x in by_op["WAIT"] if x.description == "`wgmma::wait<1>()` removed"][0]
    check("wgmma::wait<1>" not in apply_mutant(TOY_ASYNC, removed) and "  \n" in apply_mutant(TOY_ASYNC, removed),
          "the qualifier goes with the removed wait")
    # Instrumentation (#ifdef FLASHCHECK_PERTURB, the #else of #ifndef) is left alone; the normal
    # build's branches are mutated.
    ror = sorted(m.description + "@" + str(m.line) for m in by_op.get("ROR", []))
    check([r.split("@")[1] for r in ror] == ["16", "19", "2"], "ROR only on lines 2, 16, 19: %s" % ror)
    check("COND" not in by_op, "no COND inside #ifdef FLASHCHECK_PERTURB: %s" % by_op.get("COND"))


def selftest(flashcheck_build=None):
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL:", what)

    tmp = tempfile.mkdtemp(prefix="mutate-selftest-")
    try:
        os.makedirs(os.path.join(tmp, "toy"))
        with open(os.path.join(tmp, "toy", "k.cu"), "w") as f:
            f.write(TOY_KERNEL)
        with open(os.path.join(tmp, "toy", "util.h"), "w") as f:
            f.write("#pragma once\n// nothing to mutate: a < b\n")
        ms = enumerate_mutants(tmp, "toy", ops=list(OPERATORS))
        by_op = {}
        for m in ms:
            by_op.setdefault(m.op, []).append(m)
        # Comments, strings, preprocessor lines and static_assert are never touched.
        for m in ms:
            line = TOY_KERNEL.split("\n")[m.line - 1]
            check(not line.lstrip().startswith(("//", "/*", "#", "static_assert")), "mutant on an excluded line: %s" % m.description)
            check(m.line != 7 or m.op in ("RND",), "mutant inside the string literal on line 7: %s %s" % (m.op, m.description))
        expected = {"ROR": 2, "NEG": 2, "LOG": 1, "BND": 2, "OBO": 2, "SYNC": 1, "WAIT": 2, "COMMIT": 1, "RND": 2,
                    "MAXMIN": 1, "MUL": 2, "ADDR": 1, "DIV": 1, "SWZ": 1, "MASK": 1, "SHIFT": 1, "IDX": 2, "INF": 1, "COND": 2}
        for op, n in expected.items():
            check(len(by_op.get(op, [])) == n, "%s: expected %d mutants, got %d: %s" %
                  (op, n, len(by_op.get(op, [])), [m.description for m in by_op.get(op, [])]))
        check(set(by_op) <= set(expected), "unexpected operators: %s" % (set(by_op) - set(expected)))
        # Each mutant is one small change: its diff removes and adds exactly one line.
        for m in ms:
            body = m.diff.splitlines()[2:]
            minus = [l for l in body if l.startswith("-")]
            plus = [l for l in body if l.startswith("+")]
            check(len(minus) == 1 and len(plus) == 1, "%s changes more than one line:\n%s" % (m.id, m.diff))
        descs = {m.op + ":" + m.description for m in ms}
        for want in ("ROR:`<` -> `<=`", "WAIT:`cp_async_wait<1>` -> `cp_async_wait<2>` (shallower)",
                     "RND:PTX `cvt.rn` -> `cvt.rz` (truncates)", "INF:`-INFINITY` -> `-2^30`",
                     "BND:bound `< n` -> `< n - 1`", "SWZ:` ^ (i & 7)` dropped", "MUL:`f[1] *= f[4];` removed",
                     "MAXMIN:`fmaxf` -> `fminf`", "DIV:` / n` dropped"):
            check(want in descs, "missing mutant %s" % want)
        rnd = [m for m in ms if m.op == "RND" and "__floats2bfloat162_rn" in m.description][0]
        check("__halves2bfloat162(__float2bfloat16_rz(f[0]), __float2bfloat16_rz(f[1]))" in apply_mutant(TOY_KERNEL, rnd),
              "pair conversion rewritten as two truncations")
        # Ids are unique and stable: an edit elsewhere in the file changes none of them.
        ids = [m.id for m in ms]
        check(len(ids) == len(set(ids)), "duplicate ids")
        with open(os.path.join(tmp, "toy", "k.cu"), "w") as f:
            f.write("// a new first line\n\n" + TOY_KERNEL)
        ms2 = enumerate_mutants(tmp, "toy", ops=list(OPERATORS))
        check(sorted(ids) == sorted(m.id for m in ms2), "ids changed after an unrelated edit")
        check(all(a.line + 2 == b.line for a, b in zip(sorted(ms, key=lambda m: m.id), sorted(ms2, key=lambda m: m.id))),
              "lines follow the edit")
        # Sampling is by id: the same seed picks the same mutants after the edit.
        s1 = [m.id for m in enumerate_mutants(tmp, "toy", sample=5, sample_seed=3)]
        with open(os.path.join(tmp, "toy", "k.cu"), "w") as f:
            f.write(TOY_KERNEL)
        s2 = [m.id for m in enumerate_mutants(tmp, "toy", sample=5, sample_seed=3)]
        check(sorted(s1) == sorted(s2) and len(s1) == 5, "sample not stable")
        # --only and --match narrow the catalogue before the sample: the mutants of one file, of the
        # lines matching a pattern (as they were, not as mutated), drawn from those alone.
        only = enumerate_mutants(tmp, "toy", only=["toy/k.cu"], match=r"^\s*f\[")
        check(only and {m.file for m in only} == {"toy/k.cu"} and
              {m.line for m in only} == {i + 1 for i, l in enumerate(TOY_KERNEL.split("\n")) if l.lstrip().startswith("f[")},
              "--only/--match keep the mutants of the f[...] lines: %s" % [(m.line, m.description) for m in only])
        check({m.op for m in only} == {"MAXMIN", "MUL"},
              "--match tests the line as it was: %s" % [m.op for m in only])
        pick = enumerate_mutants(tmp, "toy", only=["toy/k.cu"], match=r"^\s*f\[", sample=2, sample_seed=1)
        check(len(pick) == 2 and {m.id for m in pick} <= {m.id for m in only}, "the sample is drawn after --match")
        for bad in (dict(only=["toy/none.cu"]), dict(match="(")):
            try:
                enumerate_mutants(tmp, "toy", **bad)
                check(False, "%s refused" % bad)
            except SystemExit as e:
                check("--only" in str(e) or "--match" in str(e), "refusal names the option: %s" % e)
        # apply: the mutated copy differs in exactly the described place.
        m = [x for x in ms if x.op == "SYNC"][0]
        out = apply_mutant(TOY_KERNEL, m)
        check(out.count("__syncthreads();") == TOY_KERNEL.count("__syncthreads();") - 1, "SYNC apply")
        # run + report on fabricated builds: shell scripts stand in for mutant binaries.
        work = os.path.join(tmp, "work")
        ns = argparse.Namespace(kernel_dir="toy", also=[])
        save_catalogue(work, ms[:7], ns)
        behaviours = ["exit 1", "exit 0", "exit 0", "exit 125", "sleep 30", "kill -SEGV $$", None]
        for m, beh in zip(ms[:7], behaviours):
            d = os.path.join(work, m.id)
            os.makedirs(d)
            if beh is None:
                write_json(os.path.join(d, "build.json"), {"id": m.id, "status": "build_failed", "seconds": 0})
                continue
            exe = os.path.join(d, "fakebin")
            with open(exe, "w") as f:
                f.write("#!/bin/bash\n%s\n" % beh)
            os.chmod(exe, 0o755)
            write_json(os.path.join(d, "build.json"), {"id": m.id, "status": "built", "seconds": 0.1, "binary": "fakebin"})
        env = check_env(1)
        for m in ms[:6]:
            run_one(m.id, os.path.join(work, m.id), ["{bin}"], 2, env)
        status = [read_json(os.path.join(work, m.id, "result.json"))["status"] for m in ms[:6]]
        check(status == ["killed", "survived", "survived", "untestable", "killed", "killed"], "run statuses %s" % status)
        check("timeout" in read_json(os.path.join(work, ms[4].id, "result.json"))["killed_by"], "timeout named")
        eq_path = os.path.join(tmp, "equivalent.txt")
        with open(eq_path, "w") as f:
            f.write("# id reason\n%s the change is dead code\n" % ms[2].id)
        rep = compute_report(work, read_equivalent(eq_path))
        s = rep["summary"]
        check((s["killed"], s["survived"], s["equivalent"], s["untestable"], s["stillborn"]) == (3, 2, 1, 1, 1),
              "report counts %s" % s)
        check(abs(s["score"] - 3 / 4) < 1e-12, "score = 3 / (5 - 1), got %s" % s["score"])
        check([x["id"] for x in rep["survivors"]] == [ms[1].id], "survivors %s" % rep["survivors"])
        import io
        buf = io.StringIO()
        print_report(rep, out=buf)
        check("3 / 4 = 75.0%" in buf.getvalue() and ms[1].id in buf.getvalue(), "printed report:\n" + buf.getvalue())
        selftest_async(tmp, check)
        # build: a toy CMake project where the "kernel" is one library object; the mutants relink
        # the executable with only their object recompiled.
        if shutil.which("cmake") and shutil.which("cc"):
            selftest_build(tmp, check)
        else:
            print("skip: build self-test needs cmake and cc")
        if flashcheck_build:
            selftest_plugin(tmp, check, flashcheck_build)
        else:
            print("skip: plugin-module self-test needs --flashcheck BUILD (a flashcheck build dir with compile commands)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("selftest: %s (%d failure%s)" % ("FAILED" if failures else "ok", len(failures), "" if len(failures) == 1 else "s"))
    return 1 if failures else 0


def selftest_plugin(tmp, check, build):
    """--plugin on the host kernel folder gpu/plugin/host_module: its mutants become modules that an
    unmutated flashcheck loads; the unmutated module passes a CPU campaign and a real fault dies.
    The module exports ABI 2, so a campaign draws variant problems from it: a window fault that no
    plain problem shows is killed by a `--require window` campaign. A module source named by --also
    is rebuilt for its mutants; the fixed problems of mutate_device.py's check sets are valid."""
    root = os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", ".."))
    fc = os.path.join(build, "flashcheck")
    if not os.path.exists(fc):
        check(False, "plugin self-test: %s not built" % fc)
        return
    kd = "gpu/plugin/host_module"
    also = ["gpu/common/var_params_host.cpp"]
    ms = enumerate_mutants(root, kd, also, ops=["ROR", "DIV", "MAXMIN", "OBO", "MUL"])
    # DIV: `h / group` -> `h` reads KV head h instead of h / group: wrong for every GQA problem (and
    # out of bounds past heads_kv), so a 40-case CPU campaign must kill it.
    want = [m for m in ms if m.op == "DIV" and "/ group" in m.description]
    # OBO: the window's left bound `... + 1)` dropped: keys one further left become visible, which
    # only a problem with a bounded left window can show.
    window = [m for m in ms if m.op == "OBO" and "p.window.left" in original_line(m) and
              any(l.startswith("+") and "sq + skv + 1));" in l for l in m.diff.splitlines()[2:])]
    host = [m for m in ms if m.file == also[0] and m.op == "MUL"]
    check(len(want) == 1, "host_module: one DIV mutant of `h / group`, got %s" % [m.description for m in ms if m.op == "DIV"])
    check(len(window) == 1, "host_module: one OBO mutant of the left window bound, got %s" %
          [m.diff for m in ms if m.op == "OBO"])
    check(len(host) >= 1, "var_params_host.cpp: a MUL mutant")
    if not (want and window and host):
        return
    work = os.path.join(tmp, "pwork")
    args = argparse.Namespace(plugin=True, base=build, kernel_dir=kd, work=work, plugin_arch="90a",
                              plugin_suffix=".mutant", cudart="shared", jobs=2, check=["x"], baseline=None,
                              perturb=False, target="flashcheck")
    plan = make_plan(root, args)
    check(os.path.basename(args.baseline) == "host_module.so" and os.path.exists(args.baseline),
          "the unmutated module is the baseline: %s" % args.baseline)
    rels = {t["rel"] for t in plan.tus}
    check({"gpu/plugin/host_module/host_attention.cpp", "gpu/plugin/host_module/host_backward.cpp",
           "gpu/plugin/host_module/register.cpp"} | set(MODULE_SOURCES) == rels,
          "module TUs: the kernel's and the module's own, %s" % sorted(rels))
    nm = subprocess.run(["nm", "-D", "--defined-only", args.baseline], capture_output=True, text=True).stdout.split()
    check("flashcheck_get_kernel" in nm and "flashcheck_get_kernel2" in nm and not any("registered_kernels" in x for x in nm),
          "a module exports both ABI entry points alone: %s" % nm)
    listed = subprocess.run([fc, "list", "--plugin", args.baseline], capture_output=True, text=True).stdout
    check("host_attention.mutant" in listed and "variants: window softcap" in listed,
          "flashcheck reads the module's ABI 2 space (its variants):\n%s" % listed[-800:])
    save_catalogue(work, want + window + host, argparse.Namespace(kernel_dir=kd, also=also, perturb=False))
    for m in want + window + host:
        r = build_one(plan, m, work, kd, also)
        check(r["status"] == "built", "%s builds: %s" % (m.id, r.get("why", r)))
    # A module source's mutant: that unit alone recompiled, and its object, not the unmutated one, linked.
    b = read_json(os.path.join(work, host[0].id, "build.json")) or {}
    check(b.get("tus") == also, "a var_params_host.cpp mutant rebuilds that unit: %s" % b.get("tus"))
    log = open(os.path.join(work, host[0].id, "build.log")).read()
    check("obj0_var_params_host.cpp.o" in log and "m_var_params_host.cpp.o" not in log.split("-shared", 1)[-1],
          "the mutant's object replaces the module's own in the link")
    base = ("%s run --plugin {bin} --kernel host_attention.mutant --seed 3 --max-seq 96 --no-shrink --fail-fast"
            % shlex.quote(fc))
    plain = base + " --cases 40 --variants none"
    windows = base + " --cases 30 --require window"
    env = check_env(1)
    for name, cmd in (("plain", plain), ("window", windows)):
        v, rc, _, tail = run_check(cmd.replace("{bin}", shlex.quote(args.baseline)), 300, env)
        check(v == "pass", "the unmutated module passes the %s campaign (rc=%s):\n%s" % (name, rc, tail[-1500:]))
    res = run_one(want[0].id, os.path.join(work, want[0].id), [plain], 300, env)
    check(res["status"] == "killed" and res["checks"][0]["rc"] == 1,
          "the GQA fault is killed by the campaign: %s" % {k: res[k] for k in ("status", "checks")})
    res = run_one(window[0].id, os.path.join(work, window[0].id), [plain, windows], 300, env)
    verdicts = [c["verdict"] for c in res["checks"]]
    check(verdicts == ["pass", "killed"] and res["checks"][1]["rc"] == 1,
          "the window fault passes plain problems and is killed by variant ones (ABI 2): %s" %
          [(c["verdict"], c["rc"], c["tail"][-600:]) for c in res["checks"]])
    import importlib.util
    spec = importlib.util.spec_from_file_location("mutate_device", os.path.join(os.path.dirname(__file__), "mutate_device.py"))
    md = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(md)
    # mutate_device.py pack + run --checks variants, as on the device, on small campaigns: the
    # fixed bf16/f16 problems are outside the f32 host kernel's space (125 on the unmutated module:
    # dropped), the campaigns draw variants; the window fault dies, the host-only mutant (the host
    # kernel never calls var_params_host.cpp) survives; --resume reuses every result.
    pack = os.path.join(tmp, "pack.tar.xz")
    q = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    r = subprocess.run([sys.executable, md.__file__, "pack", "--work", "host=%s,host_attention" % work, "--out", pack], **q)
    check(r.returncode == 0, "mutate_device.py pack:\n" + r.stdout[-1500:])
    dev_out, dest = os.path.join(tmp, "dev_out"), os.path.join(tmp, "dev_dest")
    run_args = [sys.executable, md.__file__, "run", "--pack", pack, "--flashcheck", fc, "--checks", "variants", "-j", "2",
                "--cases", "24", "--max-seq", "96", "--max-work", "2e6", "--dest", dest, "--out", dev_out,
                "--deadline", "240", "--hard-deadline", "280"]
    for resume in ([], ["--resume"]):
        r = subprocess.run(run_args + resume, env=env, **q)
        rep = read_json(os.path.join(dev_out, "mutation_host.json")) or {}
        status = {i: (read_json(os.path.join(dest, "host", i, "result.json")) or {}).get("status")
                  for i in (want[0].id, window[0].id, host[0].id)}
        check(r.returncode == 0 and status == {want[0].id: "killed", window[0].id: "killed", host[0].id: "survived"},
              "mutate_device.py run --checks variants %s: %s\n%s" % (resume, status, r.stdout[-2500:]))
        check(rep.get("checks", [])[:3] == ["variants", "window", "varlen"] and not any(
            c.startswith("edge") for c in rep.get("checks", [])), "the bf16/f16 problems dropped: %s" % rep.get("checks"))
        if resume:
            check("checked" in r.stdout and not any("survived" in l or "killed" in l for l in r.stdout.splitlines()
                                                    if l.startswith("[")), "--resume re-ran mutants:\n" + r.stdout[-1500:])
    # mutate_device.py's fixed problems: each parses and passes on the CPU replica (a problem line
    # the kernels' space refuses would only be dropped on the device, a bad one would stop a kernel).
    for shapes in (md.EDGE_SHAPES, md.VARIANT_EDGE_SHAPES):
        for i, s in enumerate(shapes):
            line = "%s dtype=%s" % (s, md.DTYPES[i % 2])
            v, rc, _, tail = run_check("%s run --kernel replica --problem %s --dist normal --input-seed 11"
                                       % (shlex.quote(fc), shlex.quote(line)), 300, env)
            check(v == "pass", "mutate_device.py fixed problem %r on the replica (rc=%s):\n%s" % (line, rc, tail[-800:]))
    selftest_plugin_backward(tmp, check, root, build, md, window[0], pack)


def selftest_plugin_backward(tmp, check, root, build, md, window, forward_pack):
    """--plugin-backward on gpu/plugin/host_module: the module exports the folder's backward with its
    own declared space (head dims 16 and 32, deterministic); mutate_device.py --checks backward kills
    a fault of the backward that the forward's checks cannot see, and a forward-only (window) fault
    survives it; a forward module's pack is refused for the backward set; the set's fixed problems
    are valid backward problems (the CPU example kernel with a backward passes each)."""
    fc = os.path.join(build, "flashcheck")
    kd, also = "gpu/plugin/host_module", ["gpu/common/var_params_host.cpp"]
    ms = enumerate_mutants(root, kd, also, ops=["OBO"], only=["gpu/plugin/host_module/host_backward.cpp"])
    # The causal bound `i + d + 1` without its + 1: the diagonal key dropped from every causal row's
    # gradients (the forward still sees it): only a backward check can tell.
    diag = [m for m in ms if "i + d + 1" in original_line(m)]
    check(len(diag) == 1, "host_backward.cpp: one OBO mutant of the causal bound, got %s" % [m.description for m in ms])
    if not diag:
        return
    work = os.path.join(tmp, "bwork")
    args = argparse.Namespace(plugin=True, base=build, kernel_dir=kd, work=work, plugin_arch="90a", plugin_suffix=".mutant",
                              cudart="shared", jobs=2, check=["x"], baseline=None, perturb=False, plugin_backward=True,
                              target="flashcheck", also=also)
    plan = make_plan(root, args)
    listed = subprocess.run([fc, "list", "--plugin", args.baseline, "--json", "-"], capture_output=True, text=True).stdout
    desc = {}
    try:
        desc = {k["name"]: k for k in json.loads(listed)}.get("host_attention.mutant", {})
    except ValueError:
        pass
    check((desc.get("backward") or {}).get("deterministic") is True and desc.get("head_dims") == [16, 32],
          "the backward module exports a deterministic backward and declares its space (head dims 16, 32):\n%s" % listed[-1500:])
    # The fixed problems' input seeds pick each mode of a backward declared deterministic as
    # flashcheck does (runner/backward_campaign.cpp deterministic_mode).
    for det in (True, False):
        seed = md.backward_mode_seed(11, det)
        out = subprocess.run("%s run --backward --plugin %s --kernel host_attention.mutant --problem %s --input-seed %d" % (
            shlex.quote(fc), shlex.quote(args.baseline), shlex.quote("b=1 hq=2 hkv=1 sq=20 skv=30 d=16 dtype=f32"), seed),
            shell=True, capture_output=True, text=True).stdout
        ran = "3 calls gave the same bits" in out, "deterministic=false" in out
        check(ran == (det, not det), "input seed %d runs the %s mode:\n%s" % (seed, "deterministic" if det else "default", out[-1500:]))
    try:  # a forward module's work folder is not a backward one's
        check_work_kind(os.path.join(tmp, "pwork"), args)
        check(False, "a backward build into a forward-module work folder is refused")
    except SystemExit:
        pass
    mutants = [diag[0], window]
    save_catalogue(work, mutants, args)
    for m in mutants:
        r = build_one(plan, m, work, kd, also)
        check(r["status"] == "built", "%s builds as a backward module: %s" % (m.id, r.get("why", r)))
    env = check_env(1)
    plain = ("%s run --plugin %s --kernel host_attention.mutant --seed 5 --max-seq 96 --no-shrink --fail-fast --cases 20"
             % (shlex.quote(fc), shlex.quote(os.path.join(work, diag[0].id, "host_module.so"))))
    v, rc, _, tail = run_check(plain, 300, env)
    check(v == "pass", "the backward fault passes a forward campaign (rc=%s):\n%s" % (rc, tail[-800:]))
    pack = os.path.join(tmp, "bpack.tar.xz")
    q = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    r = subprocess.run([sys.executable, md.__file__, "pack", "--work", "hostb=%s,host_attention" % work, "--out", pack], **q)
    check(r.returncode == 0, "mutate_device.py pack (backward):\n" + r.stdout[-1500:])
    dry = subprocess.run([sys.executable, md.__file__, "run", "--pack", pack, "--flashcheck", fc, "--checks", "backward",
                          "--dry-run"], **q).stdout
    check("run --backward --plugin '{bin}' --kernel host_attention.mutant" in dry and "bedge7" in dry,
          "--dry-run prints the backward checks:\n" + dry[-1500:])
    dev_out, dest = os.path.join(tmp, "bdev_out"), os.path.join(tmp, "bdev_dest")
    run_args = [sys.executable, md.__file__, "run", "--flashcheck", fc, "--checks", "backward", "-j", "2", "--cases", "16",
                "--backward-max-seq", "64", "--backward-max-work", "2e6", "--dest", dest, "--out", dev_out,
                "--deadline", "240", "--hard-deadline", "280"]
    r = subprocess.run(run_args + ["--pack", pack], **q)
    rep = read_json(os.path.join(dev_out, "mutation_hostb.json")) or {}
    status = {i: (read_json(os.path.join(dest, "hostb", i, "result.json")) or {}).get("status") for i in (diag[0].id, window.id)}
    check(r.returncode == 0 and status == {diag[0].id: "killed", window.id: "survived"},
          "mutate_device.py run --checks backward: %s\n%s" % (status, r.stdout[-2500:]))
    # The bf16/f16 fixed problems are outside the f32 host backward's space: dropped, the campaigns kept.
    check(rep.get("checks") == ["backward", "backward2"], "backward checks kept: %s" % rep.get("checks"))
    check(os.path.exists(os.path.join(dev_out, "survivors.txt")) and window.id in open(os.path.join(dev_out, "survivors.txt")).read(),
          "survivors.txt lists the survivor")
    r = subprocess.run(run_args + ["--pack", forward_pack, "--dest", dest + "_fwd"], **q)
    check(r.returncode == 2 and "without --plugin-backward" in r.stdout,
          "a forward module's pack is refused for --checks backward (rc=%s):\n%s" % (r.returncode, r.stdout[-800:]))
    # The backward set's fixed problems on a CPU kernel with a backward (bf16/f16, 3 calls compared).
    plugins = os.path.join(build, "backward_plugins.so")
    for i, s in enumerate(md.BACKWARD_EDGE_SHAPES):
        line = "%s dtype=%s" % (s, md.DTYPES[i % 2])
        v, rc, _, tail = run_check("%s run --backward --plugin %s --kernel backward_correct --problem %s --dist normal "
                                   "--input-seed 11" % (shlex.quote(fc), shlex.quote(plugins), shlex.quote(line)), 300, env)
        check(v == "pass", "mutate_device.py backward problem %r on backward_correct (rc=%s):\n%s" % (line, rc, tail[-800:]))


def selftest_build(tmp, check):
    proj = os.path.join(tmp, "proj")
    os.makedirs(os.path.join(proj, "kern"))
    os.makedirs(os.path.join(proj, "app"))
    with open(os.path.join(proj, "CMakeLists.txt"), "w") as f:
        f.write("cmake_minimum_required(VERSION 3.16)\nproject(toy C)\n"
                "add_library(kern STATIC kern/k.c app/other.c)\n"
                "target_include_directories(kern PUBLIC ${PROJECT_SOURCE_DIR})\n"
                "add_executable(toy app/main.c)\ntarget_link_libraries(toy PRIVATE kern)\n")
    with open(os.path.join(proj, "kern", "k.h"), "w") as f:
        f.write("#pragma once\nstatic inline int limit(void) { return 10; }\nint count(int n);\n")
    with open(os.path.join(proj, "kern", "k.c"), "w") as f:
        f.write('#include "kern/k.h"\nint count(int n) {\n  int c = 0;\n  for (int i = 0; i < n; ++i) c += i < limit();\n  return c;\n}\n')
    with open(os.path.join(proj, "app", "other.c"), "w") as f:
        f.write("int other(void) { return 7; }\n")
    with open(os.path.join(proj, "app", "main.c"), "w") as f:
        f.write('#include <stdio.h>\n#include "kern/k.h"\nint other(void);\n'
                'int main(void) { printf("%d %d\\n", count(12), other()); return 0; }\n')
    base = os.path.join(tmp, "base")
    q = dict(stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    if subprocess.call(["cmake", "-S", proj, "-B", base, "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"], **q) or \
            subprocess.call(["cmake", "--build", base, "--target", "toy"], **q):
        check(False, "toy base build")
        return
    plan = plan_build(proj, base, "toy", "kern")
    check([os.path.basename(t["file"]) for t in plan.tus] == ["k.c"], "only the kernel's TU is rebuilt")
    ms = enumerate_mutants(proj, "kern", ops=["ROR", "OBO"])
    work = os.path.join(tmp, "bwork")
    results = {m.id: build_one(plan, m, work, "kern", []) for m in ms}
    check(all(r["status"] == "built" for r in results.values()), "toy mutants build: %s" % results)
    outputs = []
    for m in ms:
        exe = os.path.join(work, m.id, "toy")
        outputs.append(subprocess.run([exe], capture_output=True, text=True).stdout.strip())
        left = sorted(os.listdir(os.path.join(work, m.id)))
        check(left == ["build.json", "build.log", "diff.patch", "toy"], "only the binary and logs are kept: %s" % left)
    # The base prints "10 7". `i < n` -> `i <= n` adds i = 12, which is not < 10: still "10 7" (an
    # equivalent mutant); `i < limit()` -> `i <= limit()` counts 11. other.c is not rebuilt: "7".
    check(sorted(outputs) == ["10 7", "11 7"], "mutant outputs %s" % outputs)
    check(subprocess.run([os.path.join(base, "toy")], capture_output=True, text=True).stdout.strip() == "10 7",
          "the base binary is untouched")
