"""The report: score = killed / (tested - equivalent), with the survivors and their diffs, the
mutants argued equivalent (an `ID reason` file) and those that could not be tested."""
import os
import sys

from .store import read_json


def read_equivalent(path):
    eq = {}
    if not path:
        return eq
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) < 2:
                raise SystemExit("mutate: %s:%d: mutant %s has no reason (format: ID reason...)" % (path, n, parts[0]))
            eq[parts[0]] = parts[1]
    return eq


def gather(work):
    cat = read_json(os.path.join(work, "mutants.json"))
    if not cat:
        raise SystemExit("mutate: no mutants.json in %s (run build or all first)" % work)
    rows = []
    for m in cat["mutants"]:
        d = os.path.join(work, m["id"])
        b = read_json(os.path.join(d, "build.json")) or {}
        r = read_json(os.path.join(d, "result.json")) or {}
        rows.append((m, b, r))
    return cat, rows


def compute_report(work, equivalent):
    cat, rows = gather(work)
    s = {"listed": len(rows), "built": 0, "stillborn": 0, "unreachable": 0, "not_built": 0, "tested": 0,
         "killed": 0, "survived": 0, "untestable": 0, "not_run": 0, "equivalent": 0}
    per_op = {}
    survivors, untestable, stillborn, killed_equiv = [], [], [], []
    known = set()
    for m, b, r in rows:
        known.add(m["id"])
        op = per_op.setdefault(m["op"], {"killed": 0, "survived": 0, "equivalent": 0, "other": 0})
        bs = b.get("status")
        if bs == "build_failed":
            s["stillborn"] += 1
            stillborn.append(m)
            op["other"] += 1
            continue
        if bs == "unreachable":
            s["unreachable"] += 1
            op["other"] += 1
            continue
        if bs != "built":
            s["not_built"] += 1
            op["other"] += 1
            continue
        s["built"] += 1
        st = r.get("status")
        if st is None:
            s["not_run"] += 1
            op["other"] += 1
        elif st == "untestable":
            s["untestable"] += 1
            untestable.append((m, r))
            op["other"] += 1
        elif st == "killed":
            s["tested"] += 1
            s["killed"] += 1
            op["killed"] += 1
            if m["id"] in equivalent:
                killed_equiv.append(m)
        else:
            s["tested"] += 1
            s["survived"] += 1
            if m["id"] in equivalent:
                s["equivalent"] += 1
                op["equivalent"] += 1
            else:
                op["survived"] += 1
                survivors.append((m, r))
    denom = s["tested"] - s["equivalent"]
    s["score"] = (s["killed"] / denom) if denom > 0 else None
    unknown = sorted(set(equivalent) - known)
    return {"kernel_dir": cat.get("kernel_dir"), "summary": s, "per_op": per_op,
            "survivors": [{"id": m["id"], "file": m["file"], "line": m["line"], "description": m["description"],
                           "diff": m["diff"]} for m, _ in survivors],
            "untestable": [{"id": m["id"], "tail": r["checks"][-1]["tail"][-300:] if r.get("checks") else ""}
                           for m, r in untestable],
            "stillborn": [m["id"] for m in stillborn],
            "declared_equivalent_but_killed": [m["id"] for m in killed_equiv],
            "equivalent_ids_not_in_catalogue": unknown}


def print_report(rep, show_diffs=True, out=sys.stdout):
    s = rep["summary"]
    w = out.write
    w("mutation report for %s\n" % rep["kernel_dir"])
    w("  mutants listed %d, built %d, stillborn (did not compile) %d, unreachable %d, not built %d\n" %
      (s["listed"], s["built"], s["stillborn"], s["unreachable"], s["not_built"]))
    w("  tested %d: killed %d, survived %d (of which declared equivalent %d); could not test (125) %d; not run %d\n" %
      (s["tested"], s["killed"], s["survived"], s["equivalent"], s["untestable"], s["not_run"]))
    if s["score"] is None:
        w("  score: n/a (nothing tested)\n")
    else:
        w("  score = killed / (tested - equivalent) = %d / %d = %.1f%%\n" %
          (s["killed"], s["tested"] - s["equivalent"], 100.0 * s["score"]))
    w("  per operator (killed / survived / equivalent / not scored):\n")
    for op in sorted(rep["per_op"]):
        c = rep["per_op"][op]
        w("    %-7s %4d %4d %4d %4d\n" % (op, c["killed"], c["survived"], c["equivalent"], c["other"]))
    if rep["declared_equivalent_but_killed"]:
        w("  WARNING declared equivalent but killed (not equivalent): %s\n" % ", ".join(rep["declared_equivalent_but_killed"]))
    if rep["equivalent_ids_not_in_catalogue"]:
        w("  WARNING equivalent.txt names unknown ids: %s\n" % ", ".join(rep["equivalent_ids_not_in_catalogue"]))
    if rep["untestable"]:
        w("  could not test (exit 125): %s\n" % ", ".join(u["id"] for u in rep["untestable"]))
    if rep["stillborn"]:
        w("  stillborn: %s\n" % ", ".join(rep["stillborn"]))
    w("  survivors (%d):\n" % len(rep["survivors"]))
    for sv in rep["survivors"]:
        w("    %s  %s:%d  %s\n" % (sv["id"], sv["file"], sv["line"], sv["description"]))
        if show_diffs:
            for l in sv["diff"].splitlines()[2:]:
                w("        %s\n" % l)
