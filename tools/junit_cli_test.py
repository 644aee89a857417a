#!/usr/bin/env python3
"""`--junit FILE` end to end (README, "CI dashboards"): every document `run`, `check` and `merge`
write validates against verify/junit.xsd with xmllint (libxml2-utils) and parses strictly; its
counts are its elements'; it says what the JSON says.

1. `run`: a suite per kernel; the failures of hostile_wrong_some each a test case, the kept ones
   with their shrunk reproduce line in the message; passed cases grouped; unavailable or skipped
   ones skipped, never passed.
2. Hostile text: a kernel's error message with invalid UTF-8, escapes, C0 controls, U+FFFE, "]]>"
   and "</failure>" leaves a valid document that carries the message (bad bytes as U+FFFD).
3. `check`: a test case per criterion, the reproduce line in a failure; a file name holding
   markup and bad bytes.
4. `merge --junit` of shards, and `run --gpus --junit`, are byte for byte the unsharded run's --junit.
5. `run --problem --junit`; refusals (a directory, a missing folder, `-`, with `check --identify`)
   are 125 before any work; a refused command line replaces an earlier JUnit report with its error
   and never overwrites a file that is not one.

    junit_cli_test.py FLASHCHECK HOSTILE_PLUGINS.so JUNIT.xsd

The campaign seed is drawn fresh each run and printed; FLASHCHECK_SEED=<s> repeats a run.
"""
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

FC, HOSTILE, XSD = (os.path.abspath(a) for a in sys.argv[1:4])
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "testing"))
from cli_harness import CliTest, write_small_safetensors  # noqa: E402
cli = CliTest("junit_cli", FC, seeded=True, timeout=600)
SEED, run, check, failures, tmp = cli.seed, cli.run, cli.check, cli.failures, cli.tmp
XMLLINT = shutil.which("xmllint")
SMALL = ["--max-seq", "40", "--max-work", "2e5"]


def junit(path, what):
    """The document at path, validated against the schema and parsed; its counts checked."""
    if not os.path.isfile(path):
        check(False, f"{what}: no JUnit report at {path}")
        return None
    v = subprocess.run([XMLLINT, "--noout", "--schema", XSD, path], capture_output=True, text=True, errors="replace")
    check(v.returncode == 0, f"{what}: {path} is not valid for {XSD}:\n{v.stderr[-2000:]}")
    try:
        root = ET.parse(path).getroot()  # expat: a strict, non-validating parser, a second opinion
    except ET.ParseError as e:
        check(False, f"{what}: {path} does not parse: {e}")
        return None
    check(root.tag == "testsuites", f"{what}: the root is <{root.tag}>, not <testsuites>")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        n = {"tests": len(cases), "failures": sum(c.find("failure") is not None for c in cases),
             "errors": sum(c.find("error") is not None for c in cases),
             "skipped": sum(c.find("skipped") is not None for c in cases)}
        for k, count in n.items():
            check(suite.get(k) == str(count), f"{what}: suite {suite.get('name')} says {k}={suite.get(k)}, its cases {count}")
            totals[k] += count
    for k, count in totals.items():
        check(root.get(k) == str(count), f"{what}: <testsuites> says {k}={root.get(k)}, its suites {count}")
    return root


def suites(root):
    return {s.get("name"): s for s in root.findall("testsuite")} if root is not None else {}


def outcome(case):
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return tag
    return "passed"


if not XMLLINT:
    print("FAILED: xmllint not found (Debian: apt-get install libxml2-utils; .ci/run installs it)")
    sys.exit(1)
T = str(SEED % 1000000)

# 1. run: suites per kernel, failures with their reproduce lines, groups of passed cases.
out = os.path.join(tmp, "run.xml")
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_wrong_some", "--cases", "24", "--seed", T, "--dtype", "f32",
        *SMALL, "--junit", out, "--json", os.path.join(tmp, "run.json"))
check(p.returncode == 1, f"run: exit {p.returncode}, expected 1 (hostile_wrong_some fails on some problems)", p)
root = junit(out, "run")
reproduce = [l.split("reproduce: ", 1)[1] for l in p.stdout.splitlines() if l.startswith("reproduce: ")]
flaky = [l for l in p.stdout.splitlines() if l.startswith("flaky (")]
wrong = suites(root).get("hostile_wrong_some")
if check(wrong is not None, f"run: no suite hostile_wrong_some in {list(suites(root))}", p):
    failed = [c for c in wrong.findall("testcase") if outcome(c) == "failure"]
    lines = p.stdout.splitlines()
    header = next((i for i, l in enumerate(lines) if l.split()[:2] == ["variant", "cases"]), len(lines))
    row = next((l.split() for l in lines[header + 1:] if l.split()[:1] == ["hostile_wrong_some"]), [])
    check(len(row) > 3 and str(len(failed)) == row[3], f"run: {len(failed)} failed test cases, the summary says {row[3:4]}", p)
    messages = [c.find("failure").get("message") for c in failed]
    for line in reproduce:
        check(any(m.endswith("reproduce: " + line) for m in messages), f"run: reproduce line {line!r} in no failure's message")
    check(len(reproduce) + len(flaky) == 5 or len(failed) < 5,
          f"run: {len(reproduce)} reproduce lines for {len(failed)} failures (5 are kept)", p)
    unkept = [m for m in messages if "reproduce: " not in m and "flaky (" not in m]
    check(len(unkept) == len(failed) - len(reproduce) - len(flaky) and all("not shrunk" in m for m in unkept),
          f"run: failures not kept do not say so: {unkept}")
    check(all(c.get("name").startswith("case ") for c in failed), "run: a failure's test case is not named by its case")
    groups = [c for c in wrong.findall("testcase") if outcome(c) == "passed"]
    check(groups and all(c.get("name").startswith("dtype=f32 causal=") for c in groups),
          f"run: passed cases not grouped by dtype and causal mode: {[c.get('name') for c in groups]}")
    check(all(c.get("classname") == "flashcheck.hostile_wrong_some" for c in wrong.findall("testcase")), "run: classname")
    props = {q.get("name"): q.get("value") for q in wrong.iter("property")}
    check(props.get("seed") == T and props.get("cases") == "24", f"run: the suite's properties lack the seed and cases: {props}")

# 2. Hostile text in a kernel's error message, in a campaign and in one case.
out = os.path.join(tmp, "text.xml")
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_bad_text", "--cases", "2", *SMALL, "--junit", out,
        env={"FLASHCHECK_HOSTILE_SET": "text"})
check(p.returncode == 1, f"bad text: exit {p.returncode}, expected 1", p)
root = junit(out, "bad text")
if root is not None:
    texts = [f.text or "" for f in root.iter("failure")]
    check(len(texts) == 2 and all("]]></failure><testcase name=\"evil\"/> &amp;" in t and "\ufffd" in t for t in texts),
          f"bad text: the failure text does not carry the kernel's message: {texts[:1]!r}")
    check(all("reproduce: flashcheck run --kernel hostile_bad_text" in f.get("message") for f in root.iter("failure")),
          "bad text: a failure's message lacks its reproduce line")
    with open(out, "rb") as f:
        raw = f.read()
    check(not any(b < 0x20 and b not in b"\t\n" for b in raw), "bad text: a control character reached the document")
out = os.path.join(tmp, "one.xml")
p = run("run", "--plugin", HOSTILE, "--kernel", "hostile_bad_text", "--problem", "b=1 h=2 s=9 d=8 dtype=f32", "--junit", out,
        env={"FLASHCHECK_HOSTILE_SET": "text"})
root = junit(out, "bad text, one case")
if check(p.returncode == 1 and root is not None, "bad text, one case: exit or document", p):
    case = root.find("testsuite/testcase")
    check(case is not None and outcome(case) == "failure" and "reproduce: flashcheck run --kernel hostile_bad_text" in
          case.find("failure").get("message"), "bad text, one case: not a failure with its reproduce line")


# 3. check: a test case per criterion; a file name with markup and bad bytes.
def safetensors(path, o_zero):
    write_small_safetensors(path, SEED, o_zero)


bad_name = os.path.join(tmp.encode(), b"o]]><x>&\x01\xff.safetensors")
safetensors(bad_name, o_zero=True)
out = os.path.join(tmp, "check.xml")
p = cli.run_bytes("check", bad_name, "--junit", out)
root = junit(out, "check, failing")
if check(p.returncode == 1 and root is not None, f"check: exit {p.returncode}, expected 1 (o is all zero)", p):
    suite = root.find("testsuite")
    check("]]><x>&" in suite.get("name") and "\ufffd" in suite.get("name"), f"check: the suite is not named by the file: {suite.get('name')!r}")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    check("cosine" in cases and outcome(cases["cosine"]) == "failure", f"check: cosine is not a failed test case: {list(cases)}")
    check(all("reproduce: flashcheck check " in f.get("message") for f in suite.iter("failure")),
          "check: a failure's message lacks the reproduce line")
random_o = os.path.join(tmp, "random_o.safetensors")
safetensors(random_o, o_zero=False)
out = os.path.join(tmp, "check_random.xml")  # the o of a random file is wrong: it must fail, never pass
p = run("check", random_o, "--junit", out)
root = junit(out, "check, random o")
check(p.returncode == 1 and root is not None and int(root.get("failures")) > 0,
      "check: a random output passed in the JUnit report", p)

# 4. merge --junit of shards is the unsharded run's --junit, byte for byte.
campaign = ["run", "--plugin", HOSTILE, "--kernel", "hostile_wrong_some", "--cases", "30", "--seed", T, "--dtype", "f32", *SMALL]
whole = os.path.join(tmp, "whole.xml")
run(*campaign, "--junit", whole)
shards = []
for i in range(3):
    s = os.path.join(tmp, f"s{i}.json")
    p = run(*campaign, "--shard", f"{i}/3", "--json", s, "--junit", os.path.join(tmp, f"s{i}.xml"))
    junit(os.path.join(tmp, f"s{i}.xml"), f"shard {i}/3")
    shards.append(s)
merged = os.path.join(tmp, "merged.xml")
p = run("merge", *shards, "--junit", merged)
check(p.returncode == 1, f"merge: exit {p.returncode}, expected the run's 1", p)
junit(merged, "merge")
with open(whole, "rb") as a, open(merged, "rb") as b:
    wa, wb = a.read(), b.read()
check(wa == wb, "merge: the merged JUnit report differs from the unsharded run's:\n" +
      next((f"line {i}: {x!r}\n   vs: {y!r}" for i, (x, y) in enumerate(zip(wa.splitlines(), wb.splitlines())) if x != y), "(length)"))

# run --gpus (CPU workers standing in for GPUs): the workers write no JUnit of their own, the run
# writes the merged one, again the unsharded run's bytes.
gpus = os.path.join(tmp, "gpus.xml")
p = run(*campaign, "--gpus", "2", "--junit", gpus, env={"FLASHCHECK_TEST_FAKE_GPUS": "2"})
if junit(gpus, "run --gpus") is not None:
    with open(whole, "rb") as a, open(gpus, "rb") as b:
        check(p.returncode == 1 and a.read() == b.read(), "run --gpus: its JUnit report differs from the unsharded run's", p)

# 5. Refusals before any work, and a refused command line's error report.
for what, target in (("a directory", tmp), ("a missing folder", os.path.join(tmp, "none", "r.xml")), ("stdout", "-")):
    p = run("run", "--cases", "1", "--junit", target)
    check(p.returncode == 125 and "--junit" in p.stderr and "variant" not in p.stdout,
          f"refusal ({what}): not 125 naming --junit before any work", p)
p = run("check", random_o, "--identify", "--junit", os.path.join(tmp, "identify.xml"))
check(p.returncode == 125 and "--junit" in p.stderr, "check --identify --junit: not refused", p)
earlier = os.path.join(tmp, "earlier.xml")
shutil.copy(os.path.join(tmp, "s0.xml"), earlier)
p = run("run", "--cases", "abc", "--junit", earlier)
root = junit(earlier, "refused command line")
check(p.returncode == 125 and root is not None and root.get("errors") == "1" and root.get("tests") == "1",
      "refused command line: the earlier JUnit report was not replaced by the error", p)
p = run("run", "--cases", "1", "--kernel", "no_such_kernel", "--junit", earlier)
root = junit(earlier, "unknown kernel")
check(p.returncode == 125 and root is not None and "no_such_kernel" in root.find(".//error").get("message"),
      "unknown kernel: the JUnit report does not state the error", p)
precious = os.path.join(tmp, "input.txt")
with open(precious, "w") as f:
    f.write("not a report\n")
run("run", "--cases", "abc", "--junit", precious)
with open(precious) as f:
    check(f.read() == "not a report\n", "a refused command line overwrote a file that is not a JUnit report")

cli.finish("junit_cli: all checks passed")
