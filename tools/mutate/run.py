"""Running check commands on built mutants: a check that exits 1, crashes or times out kills the
mutant; 125 means it could not test. The unmutated baseline must pass every check first."""
import os
import shlex
import signal
import subprocess
import time

from .store import read_json, write_json


def run_check(cmd, timeout, env):
    """(verdict, rc, seconds, tail): verdict pass | killed | untestable | timeout | crash."""
    t0 = time.time()
    p = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, env=env)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return "timeout", None, round(time.time() - t0, 2), (out or "")[-3000:]
    rc = p.returncode
    dt = round(time.time() - t0, 2)
    tail = (out or "")[-3000:]
    if rc == 0:
        return "pass", rc, dt, tail
    if rc == 1:
        return "killed", rc, dt, tail
    if rc == 125:
        return "untestable", rc, dt, tail
    return "crash", rc, dt, tail


def run_one(m_id, d, checks, timeout, env):
    exe_dir = d
    b = read_json(os.path.join(d, "build.json")) or {}
    exe = os.path.join(d, b.get("binary", ""))
    result = {"id": m_id, "checks": []}
    final = "survived"
    for k, c in enumerate(checks):
        cmd = c.replace("{bin}", shlex.quote(exe)).replace("{id}", m_id).replace("{dir}", shlex.quote(exe_dir))
        verdict, rc, dt, tail = run_check(cmd, timeout, env)
        result["checks"].append({"check": k, "verdict": verdict, "rc": rc, "seconds": dt, "tail": tail})
        if verdict in ("killed", "timeout", "crash"):
            final = "killed"
            result["killed_by"] = "check %d: %s%s" % (k, verdict, "" if rc in (None, 1) else " rc=%s" % rc)
            break
        if verdict == "untestable":
            final = "untestable"
    result["status"] = final
    result["seconds"] = round(sum(c["seconds"] for c in result["checks"]), 2)
    result["build_seconds"] = b.get("seconds")
    write_json(os.path.join(d, "result.json"), result)
    return result


def check_env(jobs):
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, jobs)))
    return env


def run_baseline(args, env):
    if not args.baseline:
        return True
    for k, c in enumerate(args.check):
        cmd = c.replace("{bin}", shlex.quote(args.baseline)).replace("{id}", "baseline").replace("{dir}", ".")
        verdict, rc, dt, tail = run_check(cmd, args.timeout, env)
        print("baseline check %d: %s (rc=%s, %.1fs)" % (k, verdict, rc, dt), flush=True)
        if verdict != "pass":
            print(tail)
            print("mutate: the unmutated binary fails check %d: fix the check before scoring mutants" % k)
            return False
    return True
