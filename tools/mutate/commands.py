"""The modes (list, apply, build, run, all, report) over the command line's arguments: which
mutants, which work folder, which build plan, and the build-and-run pipeline under a deadline."""
import concurrent.futures
import hashlib
import json
import os
import queue
import sys
import threading
import time
from dataclasses import asdict

from .build import build_one, plan_build
from .operators import OPERATORS
from .plugin import plan_plugin
from .report import compute_report, print_report, read_equivalent
from .run import check_env, run_baseline, run_one
from .sources import apply_mutant, enumerate_mutants, shard
from .store import read_json, write_json


def save_catalogue(work, mutants, args):
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "mutants.json")
    old = read_json(path) or {"mutants": []}
    perturb, backward = check_work_kind(work, args)
    by_id = {m["id"]: m for m in old["mutants"]}
    for m in mutants:
        by_id[m.id] = asdict(m)
    write_json(path, {"kernel_dir": args.kernel_dir, "also": args.also or [], "perturb": perturb, "backward": backward,
                      "mutants": list(by_id.values())})


def source_root(args):
    if args.root:
        return os.path.realpath(args.root)
    here = os.path.dirname(os.path.realpath(__file__))
    return os.path.realpath(os.path.join(here, "..", ".."))


def selected(args):
    ops = None
    if args.ops == "all":
        ops = list(OPERATORS)
    elif args.ops:
        ops = args.ops.split(",")
    ids = None
    if args.ids:
        ids = []
        for tok in args.ids.split(","):
            if os.path.isfile(tok):
                with open(tok) as f:
                    ids += [l.split()[0] for l in f if l.strip() and not l.startswith("#")]
            else:
                ids.append(tok)
    return enumerate_mutants(source_root(args), args.kernel_dir, args.also, ops, args.sample, args.sample_seed, ids,
                             args.only, args.match)


def check_work_kind(work, args):
    """Built objects are reused by id: perturbed and plain mutants, and modules of the forward and of
    the backward (--plugin-backward), must not share a work folder. Returns (perturb, backward)."""
    kind = {"perturb": bool(getattr(args, "perturb", False)), "backward": bool(getattr(args, "plugin_backward", False))}
    old = read_json(os.path.join(work, "mutants.json")) or {"mutants": []}
    names = {"perturb": ("plain", "perturbed"), "backward": ("forward-module", "backward-module")}
    for key, (no, yes) in names.items():
        if old["mutants"] and bool(old.get(key, False)) != kind[key]:
            raise SystemExit("mutate: %s holds %s mutants; use another --work for %s ones" %
                             (work, yes if old.get(key) else no, yes if kind[key] else no))
    return kind["perturb"], kind["backward"]


def make_plan(root, args):
    check_work_kind(args.work, args)
    if args.perturb and not args.plugin:
        # A flashcheck relinked with perturbed kernel objects would mix two layouts of FwdParams
        # (the perturbed one has a field more) across inline functions the kernels share.
        raise SystemExit("mutate: --perturb builds plugin modules only: add --plugin")
    if getattr(args, "plugin_backward", False) and not args.plugin:
        raise SystemExit("mutate: --plugin-backward builds plugin modules only: add --plugin")
    if not args.plugin:
        return plan_build(root, args.base, args.target, args.kernel_dir)
    plan = plan_plugin(root, args.base, args.kernel_dir, args.work, args.plugin_arch, args.plugin_suffix, args.cudart,
                       args.jobs, ["FLASHCHECK_PERTURB=1"] if args.perturb else [], getattr(args, "plugin_backward", False))
    # The unmutated module is the baseline: every check must pass on it before a mutant is scored.
    if getattr(args, "check", None) and not args.baseline:
        args.baseline = os.path.join(plan.link_cwd, plan.target)
    return plan


def cmd_list(args):
    ms = selected(args)
    if args.json:
        json.dump([asdict(m) for m in ms], sys.stdout, indent=1)
        print()
        return 0
    for m in ms:
        print("%-28s %s:%d  %s" % (m.id, m.file, m.line, m.description))
        if args.diff:
            print("\n".join("    " + l for l in m.diff.splitlines()[2:]))
    counts = {}
    for m in ms:
        counts[m.op] = counts.get(m.op, 0) + 1
    print("%d mutants: %s" % (len(ms), ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    return 0


def cmd_apply(args):
    root = source_root(args)
    ms = enumerate_mutants(root, args.kernel_dir, args.also, None, None, 0, [args.id])
    m = ms[0]
    if not args.into:
        sys.stdout.write(m.diff)
        return 0
    path = os.path.join(args.into, m.file)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(root, m.file), encoding="utf-8") as f:
        if f.read() != text:
            raise SystemExit("mutate: %s differs from the source the mutant was listed from" % path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(apply_mutant(text, m))
    print("applied %s to %s: %s" % (m.id, path, m.description))
    return 0


def cmd_build(args):
    root = source_root(args)
    ms = shard(selected(args), args.shard)
    plan = make_plan(root, args)
    save_catalogue(args.work, ms, args)
    if args.dry_run:
        build_one(plan, ms[0], args.work, args.kernel_dir, args.also, dry_run=True)
        return 0
    todo = [m for m in ms if args.rebuild or (read_json(os.path.join(args.work, m.id, "build.json")) or {}).get("status") is None]
    # Hash order, not file order: a build stopped early (on a busy machine, where one wgmma_f16
    # mutant can take minutes) leaves an unbiased part of the catalogue built, not its first files.
    todo.sort(key=lambda m: hashlib.sha1(m.id.encode()).hexdigest())
    print("building %d mutants (%d already built) with -j %d" % (len(todo), len(ms) - len(todo), args.jobs), flush=True)
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        futs = {ex.submit(build_one, plan, m, args.work, args.kernel_dir, args.also, args.keep): m for m in todo}
        for k, f in enumerate(concurrent.futures.as_completed(futs), 1):
            r = f.result()
            print("[%d/%d] %s %s %.1fs" % (k, len(todo), r["id"], r["status"], r["seconds"]), flush=True)
    built = [read_json(os.path.join(args.work, m.id, "build.json")) for m in todo]
    secs = [b["seconds"] for b in built if b and b.get("status") == "built"]
    print("built %d in %.0fs wall (mean %.1fs per mutant, one job each)" %
          (len(secs), time.time() - t0, sum(secs) / len(secs) if secs else 0.0))
    return 0


def cmd_run(args):
    env = check_env(args.jobs)
    if not run_baseline(args, env):
        return 2
    cat = read_json(os.path.join(args.work, "mutants.json"))
    if not cat:
        raise SystemExit("mutate: no mutants.json in %s" % args.work)
    ids = shard([m["id"] for m in cat["mutants"]], args.shard)
    todo = []
    for i in ids:
        d = os.path.join(args.work, i)
        if (read_json(os.path.join(d, "build.json")) or {}).get("status") != "built":
            continue
        if not args.rerun and read_json(os.path.join(d, "result.json")):
            continue
        todo.append((i, d))
    deadline = time.time() + args.deadline if args.deadline else None
    print("running checks on %d mutants with -j %d" % (len(todo), args.jobs), flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        futs = []
        for i, d in todo:
            futs.append(ex.submit(lambda i=i, d=d: None if deadline and time.time() > deadline
                                  else run_one(i, d, args.check, args.timeout, env)))
        for k, f in enumerate(concurrent.futures.as_completed(futs), 1):
            r = f.result()
            if r:
                print("[%d/%d] %s %s %s" % (k, len(todo), r["id"], r["status"], r.get("killed_by", "")), flush=True)
    return 0


def cmd_all(args):
    """Build and run as one pipeline: each mutant's checks start as soon as it is linked, so one
    call of a few minutes does both. Stops starting work at --deadline; everything is resumable."""
    root = source_root(args)
    env = check_env(args.run_jobs)
    t_start = time.time()
    deadline = t_start + args.deadline if args.deadline else None
    ms = shard(selected(args), args.shard)
    plan = make_plan(root, args)
    save_catalogue(args.work, ms, args)
    if not run_baseline(args, env):
        return 2
    ready = queue.Queue()
    lock = threading.Lock()
    done = {"built": 0, "ran": 0}

    def late():
        return deadline is not None and time.time() > deadline

    def build_task(m):
        d = os.path.join(args.work, m.id)
        b = read_json(os.path.join(d, "build.json"))
        if b is None or args.rebuild:
            if late():
                return
            b = build_one(plan, m, args.work, args.kernel_dir, args.also, args.keep)
            with lock:
                done["built"] += 1
                print("built %s %s %.1fs" % (m.id, b["status"], b["seconds"]), flush=True)
        if b.get("status") == "built" and (args.rerun or read_json(os.path.join(d, "result.json")) is None):
            ready.put((m.id, d))

    def run_worker():
        while True:
            item = ready.get()
            if item is None:
                return
            if late():
                continue
            r = run_one(item[0], item[1], args.check, args.timeout, env)
            with lock:
                done["ran"] += 1
                print("ran %s %s %s" % (r["id"], r["status"], r.get("killed_by", "")), flush=True)

    runners = [threading.Thread(target=run_worker, daemon=True) for _ in range(args.run_jobs)]
    for t in runners:
        t.start()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        list(ex.map(build_task, ms))
    for _ in runners:
        ready.put(None)
    for t in runners:
        t.join()
    print("pipeline: built %d, ran %d in %.0fs%s" % (done["built"], done["ran"], time.time() - t_start,
                                                    " (deadline reached: call again to resume)" if late() else ""))
    rep = compute_report(args.work, read_equivalent(args.equivalent))
    print_report(rep, show_diffs=True)
    return 0


def cmd_report(args):
    rep = compute_report(args.work, read_equivalent(args.equivalent))
    if args.json:
        with (sys.stdout if args.json == "-" else open(args.json, "w")) as f:
            json.dump(rep, f, indent=1)
    if args.json != "-":
        print_report(rep, show_diffs=not args.no_diffs)
    if args.min_score is not None and (rep["summary"]["score"] is None or rep["summary"]["score"] < args.min_score):
        return 1
    return 0
