#!/usr/bin/env python3
"""Problem model 2 end to end through the CLI: `flashcheck run --problem` over a sample of every
variant and layout (runner/variant_cases.h) for the replica and the example plugin (ABI 2), isolated
and with --no-isolation; `list` showing what each kernel declares; the variant kernels broken one
way each (broken_variant_plugins.so) failed by their criterion, reproduced; bad input refused (125)
naming the field.

    variants_cli_test.py FLASHCHECK BUILD_DIR VARIANT_CASES_H
"""
import json
import os
import re
import sys

FC, BUILD, CASES_H = (os.path.abspath(a) for a in sys.argv[1:4])
BROKEN = os.path.join(BUILD, "broken_variant_plugins.so")
EXAMPLE = os.path.join(BUILD, "example_cpu_plugin.so")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "testing"))
from cli_harness import CliTest  # noqa: E402
cli = CliTest("variants_cli", FC, timeout=600)
run, check, failures = cli.run, cli.check, cli.failures


def cases():
    """(name, problem line, varlen) of runner/variant_cases.h: one list for the C++ and CLI tests."""
    text = open(CASES_H).read()
    out = []
    for name, body, varlen in re.findall(r'\{"(\w+)",\s*((?:"[^"]*"\s*)+),\s*(true|false)\}', text):
        out.append((name, "".join(re.findall(r'"([^"]*)"', body)), varlen == "true"))
    return out


CASES = cases()
check(len(CASES) >= 12, f"variant_cases.h read as {len(CASES)} cases")

# 1. Every case, replica and example plugin, isolated and in-process: both pass (e5m2: the example
#    alone; the registry's replica declares e4m3 only, see runner/registry.h).
for name, line, varlen in CASES:
    kernels = ["example_cpu_plugin"] if "dtype=e5m2" in line else ["replica", "example_cpu_plugin"]
    for mode in ([], ["--no-isolation"]):
        for kernel in kernels:
            p = run("run", "--kernel", kernel, "--plugin", EXAMPLE, "--problem", line, "--json", "-", *mode)
            try:
                j = json.loads(p.stdout)
                report = j["variants"][0]["report"]
            except (ValueError, KeyError, IndexError):
                check(False, f"{name} {kernel} {mode}: no report in the JSON", p)
                continue
            check(p.returncode == 0 and report["pass"], f"{name} {kernel} {mode}: did not pass", p)
            check(report["problem"] == line or json.loads(p.stdout)["problem"] == line,
                  f"{name}: the problem line did not round-trip", p)

# 2. `list` shows what each kernel declares, in text and JSON.
p = run("list", "--plugin", EXAMPLE, "--plugin", BROKEN, "--json", "-")
listed = {k["name"]: k for k in json.loads(p.stdout)} if p.returncode == 0 else {}
check(p.returncode == 0, "list --json - failed", p)
for kernel in ("replica", "example_cpu_plugin"):
    k = listed.get(kernel, {})
    # The names `run --variants` takes: the full list of problem model 2, in its order.
    check(k.get("variants") == ["window", "softcap", "alibi", "sinks", "varlen", "paged", "seqused", "bshd", "fp8"]
          and k.get("alibi_per_batch") is True and k.get("layouts") == ["bhsd", "bshd", "thd"] and k.get("page_sizes") == []
          # fp8: both declare e4m3; e5m2 only the example plugin (the replica's reason: runner/registry.h).
          and "e4m3" in k.get("dtypes", [])
          and ("e5m2" in k.get("dtypes", [])) == (kernel == "example_cpu_plugin"),
          f"list --json: {kernel} declares {k}")
check(listed.get("variant_window_exclusive", {}).get("window_convention") == "left_exclusive"
      and listed.get("variant_alibi_key_offset", {}).get("alibi_lse") == "key_offset"
      and listed.get("broken_softcap_late", {}).get("layouts") == ["bhsd"], "list --json: declared conventions", p)
# What `list --json` names, `run --variants` / `--require` accept as they are.
names = ",".join(listed.get("example_cpu_plugin", {}).get("variants", []))
p = run("run", "--plugin", EXAMPLE, "--kernel", "example_cpu_plugin", "--cases", "3", "--seed", "5", "--variants", names,
        "--require", names.split(",")[0] if names else "window", "--json", "-")
check(names != "" and p.returncode == 0, f"run --variants {names}: the names list --json gives were refused", p)
p = run("list", "--plugin", EXAMPLE)
check(p.returncode == 0 and "variants: window softcap alibi(symmetric,signed; slopes per batch) sinks seqused paged(any page size)"
      in p.stdout and "layouts bhsd,bshd,thd" in p.stdout, "list: the declared variants are not shown", p)

# A correct fp8 kernel where V's values cancel: P's fp8 rounding is most of O, and only a baseline
# that rounds P the same way tells it from a bug (verify/TOLERANCE.md, session 7; it failed before).
p = run("run", "--kernel", "replica", "--problem", "b=1 hq=1 hkv=1 sq=1 skv=2 dqk=16 dv=16 causal=bottom_right "
        "dtype=e4m3 alibi=symmetric layout=thd page=5 pages=shuffled odtype=bf16 descale=tensor",
        "--dist", "constant_rows", "--input-seed", "1060415485704555654")
check(p.returncode == 0, "a correct e4m3 replica on cancelling values: false alarm", p)

# 3. Broken variant kernels: failed by their criterion (exit 1), the failure re-run and reproduced.
WINDOW = "b=2 hq=4 hkv=2 sq=37 skv=45 dqk=32 dv=32 causal=none dtype=bf16 window=5,3"
PAGED = "b=2 hq=2 hkv=1 sq=9 skv=23,40 dqk=32 dv=32 causal=bottom_right dtype=bf16 page=7 pages=shuffled"
ALIBI = "b=2 hq=4 hkv=2 sq=21 skv=30 dqk=32 dv=32 causal=bottom_right dtype=f16 alibi=symmetric"
THD = "b=3 hq=2 hkv=2 sq=4,7,1 skv=20,33,5 dqk=32 dv=32 causal=bottom_right dtype=bf16 layout=thd page=8 pages=shared"
for kernel, line, criterion in [
        ("broken_window_left", WINDOW, "rel_l2"), ("broken_window_convention", WINDOW, "rel_l2"),
        ("variant_window_exclusive", WINDOW, None), ("broken_past_cache", PAGED, "nan_inf_positions"),
        ("broken_alibi_lse", ALIBI, "lse"), ("variant_alibi_key_offset", ALIBI, None),
        ("broken_softcap_late", "b=1 hq=2 hkv=2 sq=33 skv=47 d=32 causal=top_left dtype=f32 softcap=5", "rel_l2"),
        ("broken_padding_write", THD, "padding_written"), ("broken_input_write", WINDOW, "kernel_crashed")]:
    for mode in ([], ["--no-isolation"]):
        p = run("run", "--plugin", BROKEN, "--kernel", kernel, "--problem", line, "--json", "-", *mode)
        try:
            v = json.loads(p.stdout)["variants"][0]
            failed = [c["name"] for c in v["report"]["criteria"] if not c["pass"]]
        except (ValueError, KeyError, IndexError):
            check(False, f"{kernel} {mode}: no report", p)
            continue
        if criterion is None:
            check(p.returncode == 0 and not failed, f"{kernel} {mode}: a right kernel failed {failed}", p)
            continue
        # In-process, a written input is the harness's finding (kernel_error); isolated, the write faults.
        want = "kernel_error" if criterion == "kernel_crashed" and mode else criterion
        check(p.returncode == 1 and want in failed, f"{kernel} {mode}: expected {want}, failed {failed}", p)
        check(v.get("reproduced", {}).get("failed") == 3, f"{kernel} {mode}: the failure was not reproduced 3 of 3", p)
        check(f"--plugin {BROKEN}" in v["report"].get("repro", ""), f"{kernel}: the reproduce line lacks its plugin", p)

# 4. Bad input: 125, the field named, nothing run.
for line, says in [("b=3 sq=5,3 skv=9,4,20 d=32 layout=thd", "seqlens_q lists 2 sequences"),
                   ("b=2 hq=2 hkv=1 sq=12 skv=40 d=32 used=17,41", "seqused_kv[1] = 41 exceeds"),
                   ("b=1 hq=1 hkv=1 sq=4 skv=4 d=32 window=-2,0", "window bounds must be >= -1"),
                   ("b=1 hq=1 hkv=1 sq=4 skv=4 d=32 softcap=-1", "softcap must be finite and >= 0"),
                   ("b=1 hq=1 hkv=1 sq=4 skv=4 d=32 page=0", "'page' must be positive"),
                   ("b=1 hq=1 hkv=1 sq=4 skv=4 d=32 dtype=bf16 descale=head", "descale factors are for fp8 inputs only")]:
    p = run("run", "--kernel", "replica", "--problem", line)
    check(p.returncode == 125 and says in p.stderr, f"bad problem '{line}': not refused naming '{says}'", p)
# cu_seqlens past int32: refused by every kernel before any input is drawn: nothing tested (125).
p = run("run", "--kernel", "replica", "--problem", "b=2 hq=1 hkv=1 sq=2000000000,2000000000 skv=1,1 d=16 layout=thd dtype=f32")
check(p.returncode == 125 and "int32" in p.stdout, "lengths past int32: not refused", p)

# 5. Campaigns over every variant (issue 20: "a campaign of the CPU replica over every variant
#    passes"): the replica and the example plugin, variants drawn as they declare them, and runs that
#    require each family, every case judged or declined, none failed. A fresh seed each run.
seed = int.from_bytes(os.urandom(4), "little")
print(f"campaign seed {seed} (reproduce: flashcheck run --kernel replica --seed {seed} --cases 120)")
for kernel, extra in [("replica", []), ("example_cpu_plugin", []),
                      ("replica", ["--require", "window,varlen"]), ("replica", ["--require", "paged,alibi,sinks"]),
                      ("replica", ["--require", "softcap,seqused,bshd"]), ("replica", ["--require", "fp8"])]:
    p = run("run", "--kernel", kernel, "--plugin", EXAMPLE, "--cases", "120", "--seed", str(seed), "--json", "-", *extra)
    try:
        v = json.loads(p.stdout)["variants"][0]
    except (ValueError, KeyError, IndexError):
        check(False, f"campaign {kernel} {extra}: no JSON summary", p)
        continue
    check(p.returncode == 0 and v.get("failed") == 0 and v.get("passed", 0) >= 60,
          f"campaign {kernel} {extra} seed {seed}: {v.get('passed')} passed, {v.get('failed')} failed, "
          f"{v.get('skipped')} skipped", p)

cli.finish(f"variants CLI: all checks passed ({len(CASES)} cases)")
