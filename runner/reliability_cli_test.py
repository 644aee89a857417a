#!/usr/bin/env python3
"""The exit-code contract end to end (README, "Reliability"): whatever a kernel does, flashcheck
exits 0 (pass), 1 (mismatch: the kernel failed, crashed, exited or hung) or 125 (cannot test: bad
command line, refused plugin), names what happened, writes its --json, and leaves other kernels'
results intact; `git bisect run` over a commit that starts crashing finds that commit. A plugin's
loading, supports() and unloading are isolated as its forward() is; a failure is re-run before it
is called reproduced.

    reliability_cli_test.py FLASHCHECK HOSTILE_PLUGINS.so EXAMPLE_PLUGIN.so BUILD_DIR
"""
import json
import os
import shutil
import subprocess
import sys

FC, HOSTILE, EXAMPLE, BUILD = (os.path.abspath(a) for a in sys.argv[1:5])
LIFECYCLE = {b: os.path.join(BUILD, f"hostile_{b}.so")
             for b in ("ctor_segv", "ctor_hang", "ctor_exit", "ctor_printf", "dtor_exit0", "dtor_segv")}
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "testing"))
from cli_harness import CliTest, write_small_safetensors  # noqa: E402
cli = CliTest("reliability_cli", FC)
run, check, failures, tmp = cli.run, cli.check, cli.failures, cli.tmp


def summary_row(stdout, kernel):
    """The kernel's row of the summary table (after its header line)."""
    lines = stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if l.split()[:2] == ["variant", "cases"]), len(lines))
    for line in lines[start + 1:]:
        if line.split()[:1] == [kernel]:
            return line
    return ""


quick = ["--cases", "3", "--max-seq", "40", "--max-work", "2e5"]

# 1. Each hostile kernel: its verdict, its exit code, the JSON written.
# kernel: (exit code, what the report says, what its summary row says, whether any case was judged)
EXPECT = {
    "hostile_segv": (1, "crashed (SIGSEGV)", "crashed (SIGSEGV)", False),
    "hostile_abort": (1, "crashed (SIGABRT)", "crashed (SIGABRT)", False),
    "hostile_exit3": (1, "exited 3", "exited 3", False),
    "hostile_hang": (1, "timed out after 1 s", "timed out after 1 s", False),
    "hostile_far_write": (1, "at byte 65535 past the end of o", "at byte 65535 past the end of o", False),
    "hostile_read_past_q": (1, "at byte 100 past the end of q", "at byte 100 past the end of q", False),
    "hostile_write_q": (1, "(inputs are read-only)", "(inputs are read-only)", False),
    "hostile_underrun": (1, "out_of_bounds", "out_of_bounds", True),  # within the page: the canary sees it
    "hostile_error": (1, "out of patience", "kernel_error", False),
    "hostile_chatty": (0, None, None, True),
    "hostile_polite": (0, None, None, True),
}
for kernel, (code, says, row_says, judged) in EXPECT.items():
    out = os.path.join(tmp, kernel + ".json")
    extra = ["--timeout", "1", "--no-shrink"] if kernel == "hostile_hang" else []
    p = run("run", "--plugin", HOSTILE, "--kernel", kernel, *quick, *extra, "--json", out)
    check(p.returncode == code, f"{kernel}: exit {p.returncode}, expected {code}", p)
    if says:
        check(says in p.stdout, f"{kernel}: '{says}' not in the report", p)
        check(row_says in summary_row(p.stdout, kernel), f"{kernel}: the summary row does not say '{row_says}'", p)
    check(os.path.exists(out), f"{kernel}: --json {out} not written", p)
    if os.path.exists(out):
        j = json.load(open(out))
        v = j["variants"][0]
        check(v["name"] == kernel and (v["failed"] > 0) == (code == 1), f"{kernel}: JSON says {v}")
        if not judged:
            check(v["judged"] == 0 and v["worst_cos"] is None and v["worst_ulp"] is None,
                  f"{kernel}: JSON aggregates over unjudged cases: {v}")
    if kernel == "hostile_chatty":
        check("xxxxxxxx" not in p.stdout, "chatty: the kernel's output reached stdout", p)
        check(len(p.stderr) < 64 * 1024, f"chatty: {len(p.stderr)} bytes on stderr", p)
        check("more bytes of the kernel's output not shown" in p.stderr, "chatty: the cut is not said", p)

# 2. A crash among other kernels: theirs intact, the reproduce lines name the right library, and
#    the shrunk reproduce line reproduces.
out = os.path.join(tmp, "mixed.json")
p = run("run", "--plugin", EXAMPLE, "--plugin", HOSTILE, "--kernel", "all", "--cases", "4", "--max-seq", "40",
        "--max-work", "2e5", "--timeout", "1", "--json", out, timeout=600)
check(p.returncode == 1, "mixed: exit should be 1", p)
for good in ("replica", "example_cpu_plugin", "hostile_polite", "hostile_chatty"):
    row = summary_row(p.stdout, good).split()
    check(len(row) >= 5 and row[3] == "0" and int(row[2]) > 0, f"mixed: {good} did not pass its cases: {row}", p)
for bad in ("hostile_segv", "hostile_abort", "hostile_exit3", "hostile_hang"):
    row = summary_row(p.stdout, bad).split()
    check(len(row) >= 5 and int(row[3]) > 0, f"mixed: {bad} not failed: {row}", p)
repro = [l for l in p.stdout.splitlines() if l.startswith("reproduce: ")]
check(repro, "mixed: no reproduce line", p)
for l in repro:
    check(f"--plugin {HOSTILE}" in l and EXAMPLE not in l, f"mixed: reproduce line names the wrong library: {l}")
if check(os.path.exists(out), "mixed: --json not written", p):
    names = [v["name"] for v in json.load(open(out))["variants"]]
    check("replica" in names and "hostile_segv" in names and "example_cpu_plugin" in names, f"mixed: JSON has {names}")
segv = [l for l in repro if "--kernel hostile_segv " in l]
if check(segv, "mixed: no reproduce line for hostile_segv", p):
    args = segv[0][len("reproduce: flashcheck "):]
    import shlex
    r = run(*shlex.split(args))
    check(r.returncode == 1 and "crashed (SIGSEGV)" in r.stdout, "the reproduce line does not reproduce the crash", r)

# 3. Without isolation, the 64 KiB canaries still see a 64 KiB overrun.
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_far_write", *quick, "--no-shrink", "--no-isolation")
check(p.returncode == 1 and "out_of_bounds: 65536" in p.stdout, "no-isolation: far write not caught by canaries", p)

# 4. Plugins with bad fields are refused (125) with the field named; a path without a slash is a
#    file in the working directory.
for bad_set, says in [("name_replica", "may not shadow"), ("name_spaces", '"my kernel" is not a kernel name'),
                      ("name_nonprintable", "\\x01"), ("duplicate", "used twice"),
                      ("lse_base_77", "lse_base = 77 is out of range"), ("memory_9", "memory = 9")]:
    p = run("run", "--plugin", HOSTILE, "--cases", "1", env={"FLASHCHECK_HOSTILE_SET": bad_set})
    check(p.returncode == 125 and says in p.stderr, f"bad field {bad_set}: not refused with '{says}'", p)
p = run("list", "--plugin", os.path.basename(HOSTILE), cwd=os.path.dirname(HOSTILE))
check(p.returncode == 0 and "hostile_polite" in p.stdout, "--plugin NAME.so (no slash) not found in the working directory", p)
p = run("list", "--plugin", HOSTILE, "--plugin", HOSTILE)
check(p.returncode == 125 and "same name" in p.stderr, "the same plugin twice: duplicate names not refused", p)

# 5. Strict command lines: 125, the option and the accepted form named, no flood.
BAD = [
    (["run", "--shard", "1/2abc"], "--shard"), (["run", "--shard", "0/2/3"], "i/N"), (["run", "--shard", "2/2"], "i/N"),
    (["run", "--seed", "-1"], "--seed"), (["run", "--cases", "99999999999999999999"], "whole number from 1 to"),
    (["run", "--cases", "9" * 300], "--cases"), (["run", "--cases", "0"], "--cases"), (["run", "--cases", "5x"], "--cases"),
    (["run", "--max-work", "abc"], "--max-work"), (["run", "--timeout", "0"], "--timeout"),
    (["run", "--input-seed", "1e3"], "--input-seed"), (["run", "--max-seq", "-4"], "--max-seq"),
    (["run", "--problem", "b=1 b=2"], "given twice"), (["run", "--problem", "h=4 hq=4"], "given twice"),
    (["run", "--problem", "d=64 dqk=64"], "given twice"), (["run", "--problem", "b=1 scale=abc"], "expects a number"),
    (["run", "--problem", "sq=" + "9" * 300], "characters"),
    (["run", "--json", "/nonexistent/dir/x.json"], "no directory"),
    (["determinism", "--kernel", "replica", "--runs", "0"], "--runs"), (["bench", "--iters", "1.5"], "--iters"),
    (["calibrate", "--seed", "-5"], "--seed"), (["oracle", "--input-seed", "x"], "--input-seed"),
]
for args, says in BAD:
    p = run(*args)
    check(p.returncode == 125 and says in p.stderr, f"`flashcheck {' '.join(a[:40] for a in args)}`: expected 125 naming '{says}'", p)
    check(len(p.stderr) < 400, f"`{args[0]} {args[1]}`: {len(p.stderr)} bytes of message", p)

# 6. `git bisect run` over history where the kernel starts crashing at one commit: the crash is
#    "bad" (1), never 139 (which stops the bisect), and the first bad commit is found.
if shutil.which("git"):
    repo = os.path.join(tmp, "bisect")
    os.makedirs(repo)
    g = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=repo,
                                  capture_output=True, text=True, check=False)
    g("init", "-q")
    with open(os.path.join(repo, "check.sh"), "w") as f:
        f.write(f'#!/bin/sh\nexec "{FC}" run --plugin "{HOSTILE}" --kernel "$(cat kernel)" --cases 2 --max-seq 16 --no-shrink\n')
    os.chmod(os.path.join(repo, "check.sh"), 0o755)
    shas = []
    for i, k in enumerate(["hostile_polite"] * 3 + ["hostile_segv"] * 3):
        open(os.path.join(repo, "kernel"), "w").write(k + "\n")
        g("add", "-A")
        g("commit", "-q", "-m", f"commit {i}: {k}")
        shas.append(g("rev-parse", "HEAD").stdout.strip())
    g("bisect", "start", shas[-1], shas[0])
    b = g("bisect", "run", "./check.sh")
    check(b.returncode == 0 and f"{shas[3]} is the first bad commit" in b.stdout,
          f"git bisect run did not find commit 3 ({shas[3]}):\n{b.stdout[-2000:]}\n{b.stderr[-2000:]}")
    g("bisect", "reset")
else:
    print("git not found: the bisect part did not run")

# 7. Loading runs in a worker: a constructor, flashcheck_get_kernel or a declared space that
#    crashes, exits or hangs is "cannot test" (125) naming the plugin; a constructor's printf never
#    reaches stdout, so `list --json -` stays JSON.
for lib, env, says in [(LIFECYCLE["ctor_segv"], {}, "crashed (SIGSEGV) while loading"),
                       (LIFECYCLE["ctor_exit"], {}, "exited 0 while loading"),
                       (LIFECYCLE["ctor_hang"], {}, "timed out after 1 s while loading"),
                       (HOSTILE, {"FLASHCHECK_HOSTILE_SET": "get_kernel_segv"}, "crashed (SIGSEGV) while loading"),
                       (HOSTILE, {"FLASHCHECK_HOSTILE_SET": "space_bad_pointer"}, "crashed (SIGSEGV) while loading")]:
    for cmd in (["run", "--cases", "2"], ["list"]):
        p = run(*cmd, "--plugin", lib, "--load-timeout", "1", env=env)
        check(p.returncode == 125 and f"cannot test: plugin '{lib}'" in p.stderr and says in p.stderr,
              f"{cmd[0]} --plugin {os.path.basename(lib)} {env}: not refused with '{says}'", p)
p = run("list", "--json", "-", "--plugin", LIFECYCLE["ctor_printf"])
try:
    listed = [k["name"] for k in json.loads(p.stdout)]
except ValueError:
    listed = None
check(p.returncode == 0 and listed is not None and "lifecycle_ctor_printf" in listed, "list --json -: not pure JSON", p)
check("[plugin hostile_ctor_printf.so] hello from lifecycle_ctor_printf's constructor" in p.stderr,
      "list: the constructor's printf is not on stderr, marked as the plugin's", p)

# 8. supports() runs in the kernel's worker: its crash fails the kernel (1), in run and determinism.
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_supports_segv", *quick)
check(p.returncode == 1 and "crashed (SIGSEGV) in its supports()" in summary_row(p.stdout, "hostile_supports_segv"),
      "supports() crash: not a failed kernel", p)
p = run("determinism", "--plugin", HOSTILE, "--kernel", "hostile_supports_segv", "--runs", "2", "--problem",
        "b=1 h=2 s=20 d=16 dtype=f32")
check(p.returncode == 1 and "in its supports()" in p.stdout, "determinism: supports() crash not a failure", p)

# 9. Unloading runs in the worker: a destructor's _exit(0) can no longer turn a failed run into
#    exit 0; the kernel whose library does it fails, named.
out = os.path.join(tmp, "dtor.json")
p = run("run", "--plugin", LIFECYCLE["dtor_exit0"], "--kernel", "all", *quick, "--json", out)
check(p.returncode == 1, "dtor _exit(0): the run must fail (its _wrong kernel fails, its library exits at unload)", p)
check("exited 0 while unloading" in summary_row(p.stdout, "lifecycle_dtor_exit0"), "dtor _exit(0): not named in the summary", p)
if check(os.path.exists(out), "dtor _exit(0): --json not written", p):
    v = {x["name"]: x for x in json.load(open(out))["variants"]}
    check(v.get("lifecycle_dtor_exit0", {}).get("unload_failure", "").startswith("exited 0 while unloading"),
          f"dtor _exit(0): JSON has no unload_failure: {v.get('lifecycle_dtor_exit0')}")
p = run("run", "--plugin", LIFECYCLE["dtor_segv"], "--kernel", "lifecycle_dtor_segv", *quick)
check(p.returncode == 1 and "crashed (SIGSEGV) while unloading" in p.stdout, "dtor segv: not a failed kernel", p)

# 10. --timeout cannot apply without isolation: said, not silently ignored.
p = run("run", "--kernel", "replica", "--cases", "1", "--no-isolation", "--timeout", "5")
check(p.returncode == 0 and "--timeout cannot apply with --no-isolation" in p.stderr, "no warning for --no-isolation --timeout", p)

# 11. A failure is re-run from scratch before it is called reproduced; one that fails only some
#     re-runs is flaky with k of n, never a plain reproduce line.
state = os.path.join(tmp, "flaky_state")
out = os.path.join(tmp, "flaky.json")
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_flaky", *quick, "--json", out, env={"FLASHCHECK_FLAKY_STATE": state})
check(p.returncode == 1, "flaky: exit should be 1", p)
check(not [l for l in p.stdout.splitlines() if l.startswith("reproduce: ") or l.startswith("  reproduce")],
      "flaky: a reproduce line for a failure that does not reproduce", p)
check([l for l in p.stdout.splitlines() if l.startswith("flaky (failed ")], "flaky: no 'flaky (failed k of n ...)' line", p)
if check(os.path.exists(out), "flaky: --json not written", p):
    kept = json.load(open(out))["variants"][0].get("failures", [])
    check(kept, "flaky: no failure kept in the JSON")
    for f in kept:
        r = f.get("reproduced", {})
        check(r.get("runs") == 3 and 0 < r.get("failed", -1) < 3 and r.get("flaky") is True, f"flaky: JSON reproduced is {r}")
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_segv", "--cases", "3", "--max-seq", "16", "--json", out)
if check(os.path.exists(out), "segv: --json not written", p):
    kept = json.load(open(out))["variants"][0].get("failures", [])
    check(kept, "segv: no failure kept in the JSON")
    for f in kept:
        check(f.get("reproduced") == {"runs": 3, "failed": 3, "flaky": False, "fresh_processes": True},
              f"segv: JSON reproduced is {f.get('reproduced')}")

# 12. Reports survive any text (issue 21, item 3): a kernel's error text that is not UTF-8, holds
#    escapes and a newline before a fake `reproduce:` line, and ends mid-character; file paths of
#    the same kind. The run keeps its verdict (1, not 125), its JSON parses, and nothing reaches
#    the terminal that acts on it.

TEXT = {"FLASHCHECK_HOSTILE_SET": "text"}


json_file = cli.json_file


def no_terminal_controls(p, what):
    for name, stream in (("stdout", p.stdout), ("stderr", p.stderr)):
        check("\x1b" not in stream and "\r" not in stream and "\x9b" not in stream,
              f"{what}: an escape sequence or carriage return reached {name}", p)


def fake_lines(text):
    return [l for l in text.splitlines() if l.lstrip().startswith("reproduce: flashcheck run --kernel evil")
            or l.lstrip().startswith("reproduce: evil")]


out = os.path.join(tmp, "bad_text.json")
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_bad_text", *quick, "--json", out, env=TEXT)
check(p.returncode == 1, f"bad text: exit {p.returncode}, expected 1 (the kernel failed; the report survives)", p)
no_terminal_controls(p, "bad text")
v = (json_file(out, "bad text", p).get("variants") or [{}])[0]
detail = ((v.get("failures") or [{}])[0].get("criteria") or [{}])[0].get("detail", "")
check(v.get("failed") == 3 and "\ufffd" in detail and "reproduce: flashcheck run --kernel evil" in detail,
      f"bad text: the JSON does not keep the message with its bad bytes replaced: {detail!r}")
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_bad_text", *quick, "--json", "-", env=TEXT)
try:
    check(json.loads(p.stdout)["variants"][0]["failed"] == 3, "bad text: --json - has no failures", p)
except ValueError:
    check(False, "bad text: --json - is not JSON", p)
no_terminal_controls(p, "bad text, --json -")
# One case (the reproduce command): its report is printed whole, the message on its own line.
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_bad_text", "--problem", "b=1 h=2 s=9 d=8 dtype=f32", env=TEXT)
check(p.returncode == 1 and "kernel_error" in p.stdout, "bad text, one case: not failed as kernel_error", p)
check(not fake_lines(p.stdout + p.stderr), f"bad text, one case: a fake reproduce line: {fake_lines(p.stdout)}", p)
no_terminal_controls(p, "bad text, one case")


def safetensors(path, o_zero):
    write_small_safetensors(path, int(os.environ.get("FLASHCHECK_SEED", "0"), 0) ^ 0x5A17, o_zero)


# A path with bytes that are not UTF-8, escapes, and a newline before a fake reproduce line.
evil = os.path.join(tmp.encode(), b"bad\xff\xfe \x1b[2J\x1b]0;t\x07\rname\nreproduce: evil.safetensors")
safetensors(evil, o_zero=True)
p = cli.run_bytes("check", evil, "--json", "-")
check(p.returncode == 1, f"evil path: exit {p.returncode}, expected 1 (a failing output)", p)
try:
    check("reproduce: evil" in json.loads(p.stdout)["repro"], "evil path: JSON repro lost the path", p)
except ValueError:
    check(False, "evil path: --json - is not JSON", p)
no_terminal_controls(p, "evil path")
check(not fake_lines(p.stderr), f"evil path: a fake reproduce line: {fake_lines(p.stderr)}", p)

# 13. `--json -` is one JSON document on stdout on every exit path, 125 included, stating the error.
empty = os.path.join(tmp, "empty.safetensors")
open(empty, "wb").close()
good = os.path.join(tmp, "good.safetensors")
safetensors(good, o_zero=True)
for args, says in [(["check", empty], "too short"), (["run", "--kernel", "nope"], "no kernel named 'nope'"),
                   (["run", "--plugin", os.path.join(tmp, "missing.so")], "cannot load plugin"),
                   (["list", "--plugin", os.path.join(tmp, "missing.so")], "cannot load plugin"),
                   (["run", "--cases", "0x10"], "--cases"), (["check", good, "--max-rows", "0x10"], "--max-rows"),
                   (["check", good, "--html", os.path.join(tmp, "no", "dir", "x.html")], "no directory")]:
    p = run(*args, "--json", "-")
    try:
        j = json.loads(p.stdout)
        check(p.returncode == 125 and j.get("exit_code") == 125 and says in j.get("error", ""),
              f"`{' '.join(args)} --json -`: JSON does not state the 125: {j}", p)
    except ValueError:
        check(False, f"`{' '.join(args)} --json -`: stdout is not JSON", p)

# 14. A 125 run leaves no earlier report in place; an output that cannot be written never costs the
#    others (/dev/full takes the write check, then fails the write).
old_json, old_html = os.path.join(tmp, "old.json"), os.path.join(tmp, "old.html")
open(old_json, "w").write('{"pass": true, "from": "an earlier run"}')
p = run("check", good, "--html", old_html)
check(p.returncode == 1 and os.path.exists(old_html), "an HTML report was not written", p)
p = run("check", empty, "--json", old_json, "--html", old_html)
check(p.returncode == 125 and json_file(old_json, "125").get("exit_code") == 125, "125: the earlier JSON report is still there", p)
check(not os.path.exists(old_html), "125: the earlier HTML report is still there", p)
# The input named as the report path by mistake: a 125 neither deletes nor overwrites it.
bad_input = os.path.join(tmp, "bad_input.safetensors")
open(bad_input, "wb").write(b"\x10\0\0\0\0\0\0\0not json at all!")
for opt in ("--html", "--json"):
    p = run("check", bad_input, opt, bad_input)
    check(p.returncode == 125 and open(bad_input, "rb").read().endswith(b"not json at all!"),
          f"125: {opt} naming the input file cost the input", p)
if os.path.exists("/dev/full"):
    page = os.path.join(tmp, "page.html")
    p = run("check", good, "--json", "/dev/full", "--html", page)
    check(p.returncode == 125 and "/dev/full" in p.stderr, "--json /dev/full: the failed write is not a 125 naming it", p)
    check(os.path.exists(page) and os.path.getsize(page) > 1000, "--json /dev/full: the HTML page was not written", p)
    out = os.path.join(tmp, "kept.json")
    p = run("check", good, "--json", out, "--html", "/dev/full")
    check(p.returncode == 125, "--html /dev/full: not a 125", p)
    if check(os.path.exists(out), "--html /dev/full: the JSON was not written", p):
        j = json_file(out, "--html /dev/full", p)
        check(j.get("exit_code") == 125 and "/dev/full" in j.get("error", "") and "criteria" in j,
              f"--html /dev/full: the JSON lacks the verdict or the error: {list(j)}", p)
p = run("run", "--cases", "1", "--json", os.path.join(tmp, "x.json"), "--html", empty)
check(p.returncode == 125 and "--html" in p.stderr, "run --html onto a file: not refused before the run", p)

# 15. Every integer option takes decimal digits only (no 0x10, +5, spaces, overflow), naming itself.
for opt in ("--max-rows", "--tile-q", "--tile-kv"):
    for value in ("0x10", "+5", " 5", "5 ", "99999999999999999999", "1e3", "0b11"):
        p = run("check", good, opt, value)
        check(p.returncode == 125 and opt in p.stderr and "decimal digits" in p.stderr,
              f"check {opt} {value!r}: not refused naming the option and the form", p)

# 16. A plugin path is printed in reproduce lines: one holding a newline or an escape is refused
#     (125, naming --plugin), one holding bytes that are not UTF-8 works and its JSON parses.
for bad in ("x\nreproduce: evil.so", "x\x1b[2J.so", "x\r.so"):
    p = run("run", "--plugin", os.path.join(tmp, bad), "--cases", "1")
    check(p.returncode == 125 and "--plugin" in p.stderr and "control characters" in p.stderr,
          f"--plugin {bad!r}: not refused naming the option", p)
    no_terminal_controls(p, f"--plugin {bad!r}")
odd = os.path.join(tmp.encode(), b"odd\xff\xfename.so")
shutil.copy(HOSTILE, odd)
p = cli.run_bytes("run", "--plugin", odd, "--kernel", "hostile_error", *quick, "--json", "-")
check(p.returncode == 1, f"a plugin path that is not UTF-8: exit {p.returncode}, expected 1", p)
try:
    check("odd\ufffd\ufffdname.so" in json.loads(p.stdout)["variants"][0]["failures"][0]["repro"],
          "a plugin path that is not UTF-8: the JSON repro does not name it", p)
except (ValueError, KeyError, IndexError):
    check(False, "a plugin path that is not UTF-8: --json - is not the report", p)

cli.finish()
