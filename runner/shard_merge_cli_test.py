#!/usr/bin/env python3
"""Sharded campaigns merge to the unsharded run, end to end (README, "Commands"):

1. `flashcheck merge` of `run --shard i/4 --json` gives the JSON of the unsharded run (timing fields
   and the merge's own `shards` list aside): totals, per-kernel counts, every verdict, the kept
   failures with their shrunk reproduce lines, in case order; the same summary table and reproduce
   lines; with --html the same failure pages and overview. On the CPU replica and the example plugin (all pass)
   and on hostile_wrong_some (wrong on half of its problems: more failures than are kept).
2. Every refusal is 125 naming the problem: shards of different campaigns (seed, cases, kernels,
   options), a shard missing or given twice, a file that is not JSON, truncated, empty, edited, or
   not a campaign report.
3. `run --gpus`: without a GPU, 125 saying so; with FLASHCHECK_TEST_FAKE_GPUS (CPU workers standing
   in for GPUs) the split and merge equal the single run, CUDA_VISIBLE_DEVICES is mapped into ours,
   and a worker killed or hung becomes a failed verdict for each of its cases while the others finish.

    shard_merge_cli_test.py FLASHCHECK HOSTILE_PLUGINS.so EXAMPLE_PLUGIN.so BUILD_DIR BACKWARD_PLUGINS.so

4. `run --backward` (each kernel's backward pass, gradients judged apart) shards, merges, writes its
   failure pages (the gradients' verdict on each) and splits across stand-in GPUs like a forward
   campaign: backward_dq_no_scale (gpu/plugin/backward_plugins.c) fails on dQ wherever the scale matters.

The campaign seed is drawn fresh each run and printed; FLASHCHECK_SEED=<s> repeats a run.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

FC, HOSTILE, EXAMPLE, BUILD, BACKWARD = (os.path.abspath(a) for a in sys.argv[1:6])
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "testing"))
from cli_harness import CliTest  # noqa: E402
# CUDA_VISIBLE_DEVICES scrubbed: the test checks how `run --gpus` sets it for its workers.
cli = CliTest("shard_merge_cli", FC, seeded=True, timeout=600, scrub=("CUDA_VISIBLE_DEVICES",))
SEED, run, check, failures, tmp = cli.seed, cli.run, cli.check, cli.failures, cli.tmp
T0 = time.time()


def mark(what):
    print(f"{time.time() - T0:6.1f} s  {what}", flush=True)

SMALL = ["--max-seq", "40", "--max-work", "2e5"]


def comparable(doc):
    """The report without what may differ between equal campaigns: timings, the merge's list of
    shards and run --gpus's per-GPU section (provenance), and where HTML pages lie."""
    if isinstance(doc, dict):
        return {k: comparable(v) for k, v in doc.items() if k not in ("timings_s", "shards", "gpus", "html_page")}
    if isinstance(doc, list):
        return [comparable(v) for v in doc]
    return doc


def first_difference(a, b, path="$"):
    if type(a) is not type(b):
        return f"{path}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'the first' if k in a else 'the second'}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def summary(stdout):
    """From the summary table's header to the end: the table, skip reasons and reproduce lines (not
    run --gpus's per-GPU table)."""
    lines = stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if l.split()[:2] == ["variant", "cases"]), len(lines))
    out, per_gpu = [], False
    for l in lines[start:]:
        if l.split()[:2] == ["gpu", "CUDA_VISIBLE_DEVICES"]:
            per_gpu = True
        elif per_gpu and not (l.split()[:1] and l.split()[0].isdigit()):
            per_gpu = False
        if l.strip() and not per_gpu:
            out.append(l)
    return out


def load(path):
    with open(path) as f:
        return json.load(f)


def shards_of(name, campaign, n, extra=()):
    paths = []
    for i in range(n):
        path = os.path.join(tmp, f"{name}_{i}.json")
        p = run(*campaign, "--shard", f"{i}/{n}", "--json", path, *extra)
        check(p.returncode in (0, 1) and os.path.exists(path), f"{name}: shard {i}/{n} did not run", p)
        paths.append(path)
    return paths


def same_as_unsharded(name, whole_json, whole_stdout, got_json, got_stdout, p):
    a, b = comparable(load(whole_json)), comparable(load(got_json))
    check(a == b, f"{name}: the merged JSON differs from the unsharded run's: {first_difference(a, b)}", p)
    check(summary(whole_stdout) == summary(got_stdout),
          f"{name}: the merged summary differs:\n" + "\n".join(summary(whole_stdout)) + "\n--- merged\n" +
          "\n".join(summary(got_stdout)), p)


# 1. Merge equals the unsharded run.
CAMPAIGNS = {
    # the CPU replica and the example plugin (the default kernels without a GPU): every case passes
    "cpu": ["run", "--cases", "40", "--seed", str(SEED), *SMALL],
    # wrong when Skv is even: more failures than the 5 kept (~20 of 40), shrunk, re-run
    "wrong": ["run", "--plugin", HOSTILE, "--kernel", "hostile_wrong_some", "--cases", "40", "--dtype", "f32", "--dtype", "bf16",
              "--seed", str(SEED), *SMALL],
    # a backward campaign whose dQ misses the softmax scale: it fails wherever the scale is not ~1
    # (a third of the cases or so), more than the 5 kept
    "backward": ["run", "--backward", "--plugin", BACKWARD, "--kernel", "backward_dq_no_scale", "--cases", "40",
                 "--seed", str(SEED), *SMALL],
}
shard_files, whole_stdout = {}, {}
for name, campaign in CAMPAIGNS.items():
    html = ["--html", os.path.join(tmp, f"{name}_html")] if name != "cpu" else []
    whole = os.path.join(tmp, f"{name}_whole.json")
    pw = run(*campaign, "--json", whole, *html)
    check(pw.returncode in (0, 1), f"{name}: the unsharded run failed to run", pw)
    whole_stdout[name] = pw.stdout
    doc = load(whole)
    if name == "cpu":
        names = [v["name"] for v in doc["variants"]]
        check("replica" in names and "example_cpu_plugin" in names, f"cpu: kernels {names}", pw)
    elif name == "backward":
        v = doc["variants"][0]
        check(doc["campaign"].get("backward") is True and v["failed"] > 5 and len(v["failures"]) == 5 and
              all("backward" in f and not f["backward"]["pass"] for f in v["failures"]),
              f"backward: more cases should fail on their gradients than the 5 kept: {v['failed']} failed", pw)
    else:
        v = doc["variants"][0]
        check(v["failed"] > 5 and len(v["failures"]) == 5 and v["passed"] > 0,
              f"wrong: the campaign should fail more cases than it keeps and pass others: {v['failed']} failed, "
              f"{len(v.get('failures', []))} kept, {v['passed']} passed", pw)
    shard_html = []
    paths = []
    for i in range(4):
        path = os.path.join(tmp, f"{name}_{i}.json")
        extra = ["--html", os.path.join(tmp, f"{name}_html_{i}")] if html else []
        p = run(*campaign, "--shard", f"{i}/4", "--json", path, *extra)
        check(p.returncode in (0, 1) and os.path.exists(path), f"{name}: shard {i}/4 did not run", p)
        paths.append(path)
    shard_files[name] = paths
    merged = os.path.join(tmp, f"{name}_merged.json")
    merged_html = ["--html", os.path.join(tmp, f"{name}_merged_html")] if html else []
    pm = run("merge", *reversed(paths), "--json", merged, *merged_html)  # any order
    check(pm.returncode == pw.returncode, f"{name}: merge exit {pm.returncode}, the unsharded run's {pw.returncode}", pm)
    if check(os.path.exists(merged), f"{name}: merge wrote no JSON", pm):
        same_as_unsharded(name, whole, pw.stdout, merged, pm.stdout, pm)
        check([s["shard"] for s in load(merged)["shards"]] == ["3/4", "2/4", "1/4", "0/4"], f"{name}: the shards are not listed", pm)
    if html and name == "backward":
        with open(os.path.join(html[1], "backward_dq_no_scale_0.html"), encoding="utf-8") as f:
            page = f.read()
        check('id="backward"' in page and "dq" in page, "backward: a failure's page has no backward verdict", pw)
    if html:
        want = sorted(os.listdir(html[1]))
        got = sorted(os.listdir(merged_html[1])) if os.path.isdir(merged_html[1]) else []
        check(want == got and len(want) == 6 and "index.html" in want,  # 5 kept failures and the overview
              f"{name}: merge --html pages {got}, the unsharded run's {want}", pm)
        for page in set(want) & set(got):
            with open(os.path.join(html[1], page), "rb") as f1, open(os.path.join(merged_html[1], page), "rb") as f2:
                check(f1.read() == f2.read(), f"{name}: page {page} differs from the unsharded run's", pm)
    # `--json -`: the merged document alone on stdout
    p = run("merge", *paths, "--json", "-")
    check(p.returncode == pw.returncode and comparable(json.loads(p.stdout)) == comparable(doc), f"{name}: merge --json - differs", p)

mark("merges compared")
# 2. Refusals: 125, the problem named.
cpu = shard_files["cpu"]


def refused(args, says, what):
    p = run("merge", *args)
    check(p.returncode == 125 and says in p.stderr, f"merge refusal ({what}): expected 125 and '{says}'", p)
    return p


other = {
    "seed": ["run", "--cases", "40", "--seed", str(SEED + 1), *SMALL],
    "cases": ["run", "--cases", "41", "--seed", str(SEED), *SMALL],
    "kernel": ["run", "--kernel", "replica", "--cases", "40", "--seed", str(SEED), *SMALL],
    "max_seq": ["run", "--cases", "40", "--seed", str(SEED), "--max-seq", "41", "--max-work", "2e5"],
}
for key, campaign in other.items():
    path = os.path.join(tmp, f"other_{key}.json")
    run(*campaign, "--shard", "1/4", "--json", path)
    refused([cpu[0], path, cpu[2], cpu[3]], f"shards of different campaigns: '{key}' is", f"a different {key}")
refused(cpu[:3], "shard 3/4 missing", "a missing shard")
refused([cpu[0], cpu[1], cpu[2], cpu[2], cpu[3]], "shard 2/4 is given twice", "a duplicated shard")
refused([cpu[0], os.path.join(tmp, "wrong_1.json"), cpu[2], cpu[3]], "shards of different campaigns", "another campaign's shard")
text = open(cpu[1]).read()
for name, content, says in [
    ("truncated", text[: len(text) // 2], "is truncated"),
    ("garbage", "{not json", "is not JSON"),
    ("empty", "", "is empty"),
    ("other_doc", '{"seed": 1, "variants": []}', "no 'campaign'"),
    ("error_doc", '{"exit_code": 125, "error": "plugin x.so: no such file"}', "a run that could not test"),
    ("edited", text.replace('"passed": ', '"passed": 1', 1), "is not what its verdicts and failures give"),
]:
    path = os.path.join(tmp, f"bad_{name}.json")
    with open(path, "w") as f:
        f.write(content)
    refused([cpu[0], path, cpu[2], cpu[3]], says, name)
refused([cpu[0], os.path.join(tmp, "no_such.json")], "cannot read shard report", "a missing file")
p = run("merge", cpu[0], os.path.join(tmp, "bad_truncated.json"), "--json", "-")
check(p.returncode == 125 and json.loads(p.stdout).get("exit_code") == 125, "merge --json - on a refusal: no error document", p)

mark("refusals checked")
# 3. run --gpus.
wrong = CAMPAIGNS["wrong"]
p = run(*wrong, "--gpus", "2")
check(p.returncode == 125 and "--gpus: no GPU can be used here" in p.stderr, "run --gpus without a GPU: not refused clearly", p)
for bad, says in [("0", "a count N >= 1"), ("5", "5 GPUs asked for, 3 visible"), ("0,3", "there is no GPU 3"),
                  ("1,1", "GPU 1 is listed twice"), ("0,x", "'x' is not a GPU index")]:
    p = run(*wrong, "--gpus", bad, env={"FLASHCHECK_TEST_FAKE_GPUS": "3"})
    check(p.returncode == 125 and says in p.stderr, f"run --gpus {bad}: expected 125 and '{says}'", p)
p = run(*wrong, "--gpus", "2", "--shard", "0/2", env={"FLASHCHECK_TEST_FAKE_GPUS": "3"})
check(p.returncode == 125 and "give no --shard" in p.stderr, "run --gpus --shard: not refused", p)
p = run(*wrong, "--worker-timeout", "5")
check(p.returncode == 125 and "give --gpus too" in p.stderr, "--worker-timeout without --gpus: not refused", p)

# Split and merged across 3 stand-in GPUs, and across GPUs 0 and 2 of CUDA_VISIBLE_DEVICES=4,5,6,
# each equal to the single run; the per-GPU table and JSON say which device ran which shard.
whole, pw_stdout = os.path.join(tmp, "wrong_whole.json"), whole_stdout["wrong"]
# (GPUs 0 and 2 of three: the shard count is what was chosen, and each worker's device the entry
# of ours at its index.)
for gpus, env, devices in [("0,2", {"CUDA_VISIBLE_DEVICES": "4,5,6"}, ["4", "6"])]:
    out = os.path.join(tmp, f"gpus_{gpus.replace(',', '_')}.json")
    p = run(*wrong, "--gpus", gpus, "--json", out, env={"FLASHCHECK_TEST_FAKE_GPUS": "3", **env})
    check(p.returncode == 1, f"run --gpus {gpus}: exit {p.returncode}", p)
    if check(os.path.exists(out), f"run --gpus {gpus}: no JSON", p):
        same_as_unsharded(f"run --gpus {gpus}", whole, pw_stdout, out, p.stdout, p)
        g = load(out)["gpus"]
        check([x["cuda_visible_devices"] for x in g] == devices and [x["shard"] for x in g] == ["0/2", "1/2"] and
              all(x["exit"] == "exit 1" for x in g), f"run --gpus {gpus}: per-GPU section {g}", p)
        check(sum(x["cases"] for x in g) == 40, f"run --gpus {gpus}: the workers ran {[x['cases'] for x in g]} cases", p)
        check("CUDA_VISIBLE_DEVICES" in p.stdout and "shard" in p.stdout, f"run --gpus {gpus}: no per-GPU table", p)
# The backward campaign across 2 stand-in GPUs: the single run's verdicts and kept failures.
out = os.path.join(tmp, "gpus_backward.json")
p = run(*CAMPAIGNS["backward"], "--gpus", "2", "--json", out, env={"FLASHCHECK_TEST_FAKE_GPUS": "2"})
check(p.returncode == 1, f"run --backward --gpus 2: exit {p.returncode}", p)
if check(os.path.exists(out), "run --backward --gpus 2: no JSON", p):
    same_as_unsharded("run --backward --gpus 2", os.path.join(tmp, "backward_whole.json"), whole_stdout["backward"], out,
                      p.stdout, p)
mark("run --gpus compared")


def children(pid):
    """The processes whose parent is `pid`, with their command lines."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            if int(stat[stat.rindex(")") + 2:].split()[1]) != pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                out.append((int(entry), f.read().split(b"\0")))
        except (OSError, ValueError):
            pass
    return out


def stop_worker(proc, shard):
    """SIGSTOPs the worker of `shard` as soon as it runs, before it can finish; its pid."""
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        for pid, argv in children(proc.pid):
            if shard.encode() in argv and b"--shard" in argv:
                os.kill(pid, signal.SIGSTOP)
                return pid
        time.sleep(0.005)
    return None


# A worker killed mid-campaign (SIGKILL, as the OOM killer would) and one that hangs (stopped, so
# it never ends; --worker-timeout ends it): each of its cases fails as worker_died, the others'
# verdicts stand, the exit code is 1, the per-GPU section says what happened.
# (The worker is stopped as soon as it exists, long before it could end, so small campaigns do.)
for how, workers, cases, extra in [("killed", 3, 300, []), ("hung", 2, 40, ["--worker-timeout", "20"])]:
    out = os.path.join(tmp, f"gpus_{how}.json")
    e = dict(os.environ, FLASHCHECK_TEST_FAKE_GPUS=str(workers))
    e.pop("CUDA_VISIBLE_DEVICES", None)
    args = [FC, "run", "--kernel", "replica", "--cases", str(cases), "--seed", str(SEED), *SMALL, "--gpus", "all", "--json", out, *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e, errors="replace")
    victim = stop_worker(proc, f"1/{workers}")
    if victim and how == "killed":
        os.kill(victim, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=600)
    p = subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)
    if not check(victim is not None, f"run --gpus ({how}): never saw worker 1 running", p):
        continue
    check(p.returncode == 1, f"run --gpus ({how}): exit {p.returncode}, expected 1", p)
    if not check(os.path.exists(out), f"run --gpus ({how}): no JSON", p):
        continue
    doc = load(out)
    v = doc["variants"][0]
    mine = len(range(1, cases, workers))
    says = "died: killed by SIGKILL" if how == "killed" else "hung: still running after 20 s (--worker-timeout)"
    check(v["failed_by"] == {"worker_died": mine} and v["failed"] == mine and v["passed"] == cases - mine,
          f"run --gpus ({how}): counts {v['passed']} passed, {v['failed']} failed, {v.get('failed_by')}: expected "
          f"{cases - mine} passed and worker_died {mine}", p)
    check(says in v.get("first_abnormal", "") and "worker on GPU 1" in v.get("first_abnormal", ""),
          f"run --gpus ({how}): first_abnormal {v.get('first_abnormal')!r}", p)
    lost = [g for g in doc["gpus"] if "lost" in g]
    check(len(lost) == 1 and lost[0]["gpu"] == 1 and says in lost[0]["lost"], f"run --gpus ({how}): per-GPU {doc['gpus']}", p)
    check(says in p.stdout and "worker_died" in p.stdout, f"run --gpus ({how}): the summary does not say it", p)
    check(not v.get("failures"), f"run --gpus ({how}): a lost case was kept as a failure", p)
    log = lost[0].get("log") if lost else None
    check(log and os.path.exists(log), f"run --gpus ({how}): the dead worker's log is not kept: {log}", p)
    if log:
        shutil.rmtree(os.path.dirname(log), ignore_errors=True)
    mark(f"a {how} worker checked")

cli.finish("all shard-merge and --gpus checks passed")
