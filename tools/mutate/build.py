"""Building a mutant from a pre-built base build dir: the kernel's translation units recompiled
from a mutated copy of its folder, then the target relinked with those objects ahead of the base's
archives. Nothing else is rebuilt: the base build dir must be configured with
-DCMAKE_EXPORT_COMPILE_COMMANDS=ON and have built the target."""
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field

from .sources import apply_mutant, is_test_file
from .store import write_json


DEP_FLAGS_WITH_ARG = ("-MT", "-MF", "-MQ")


def tu_args(entry):
    if "arguments" in entry:
        return list(entry["arguments"])
    return shlex.split(entry["command"])


def include_closure(path, root, cache):
    """Every file `path` includes with quotes, transitively, resolved like the compiler does for
    the project's own headers (the includer's folder, then the source root)."""
    if path in cache:
        return cache[path]
    cache[path] = set()
    found = set()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return found
    for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M):
        for base in (os.path.dirname(path), root):
            cand = os.path.realpath(os.path.join(base, inc))
            if os.path.isfile(cand):
                found.add(cand)
                found |= include_closure(cand, root, cache)
                break
    cache[path] = found
    return found


@dataclass
class BuildPlan:
    root: str
    base: str
    target: str
    tus: list  # [{file, directory, args, output}]
    link_cwd: str
    link_args: list
    closure: dict = field(default_factory=dict)  # tu file -> set of included files


def plan_build_tus(root, base, kernel_dir):
    root = os.path.realpath(root)
    base = os.path.realpath(base)
    cc_path = os.path.join(base, "compile_commands.json")
    if not os.path.isfile(cc_path):
        raise SystemExit("mutate: %s not found: configure the base build with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "
                         "and build the kernel first" % cc_path)
    with open(cc_path) as f:
        entries = json.load(f)
    kd = os.path.realpath(os.path.join(root, kernel_dir)) + os.sep
    tus = []
    seen = set()
    for e in entries:
        src = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if src.startswith(kd) and not is_test_file(src):
            args = tu_args(e)
            # A base configured with -DFLASHCHECK_PERTURB=ON compiles the kernel twice: the normal
            # objects are the kernel's (--perturb adds the define to them itself).
            if any(a.startswith("-DFLASHCHECK_PERTURB") for a in args) or src in seen:
                continue
            seen.add(src)
            out = e.get("output")
            if not out:
                out = args[args.index("-o") + 1]
            tus.append({"file": src, "rel": os.path.relpath(src, root), "directory": e["directory"], "args": args,
                        "output": os.path.normpath(os.path.join(e["directory"], out))})
    if not tus:
        raise SystemExit("mutate: no translation unit of %s in %s (is the kernel built in this configuration? "
                         "CUDA kernels need nvcc at configure time)" % (kernel_dir, cc_path))
    return tus


def plan_build(root, base, target, kernel_dir):
    root = os.path.realpath(root)
    base = os.path.realpath(base)
    tus = plan_build_tus(root, base, kernel_dir)
    link_cwd, link_args = find_link_command(base, target)
    # A folder may hold sources of several targets (gpu/plugin: one .c in three libraries): when the
    # link line names objects of the folder, only those are the target's own.
    named = {os.path.realpath(os.path.join(link_cwd, a)) for a in link_args}
    own = [t for t in tus if os.path.realpath(t["output"]) in named]
    if own:
        tus = own
    cache = {}
    closure = {t["file"]: include_closure(t["file"], root, cache) for t in tus}
    return BuildPlan(root, base, target, tus, link_cwd, link_args, closure)


def find_link_command(base, target):
    for dirpath, dirnames, names in os.walk(base):
        if os.path.basename(dirpath) == target + ".dir" and "link.txt" in names:
            with open(os.path.join(dirpath, "link.txt")) as f:
                lines = [l for l in f.read().splitlines() if l.strip()]
            cwd = os.path.dirname(os.path.dirname(dirpath))  # <subdir>/CMakeFiles/<target>.dir
            return cwd, shlex.split(lines[-1])
        dirnames[:] = [d for d in dirnames if not d.startswith("mutant")]
    if os.path.isfile(os.path.join(base, "build.ninja")):
        out = subprocess.run(["ninja", "-C", base, "-t", "commands", target], capture_output=True, text=True)
        cmds = [l for l in out.stdout.splitlines() if l.strip()]
        if out.returncode == 0 and cmds:
            last = cmds[-1]
            if last.startswith("cd ") and " && " in last:
                cd, last = last.split(" && ", 1)
                return os.path.join(base, shlex.split(cd)[1]), shlex.split(last)
            return base, shlex.split(last)
    raise SystemExit("mutate: no link command for target %s under %s (Makefile link.txt or ninja)" % (target, base))


def rewrite_compile(args, output, source=None):
    """A compile command with dependency-file flags dropped, its output set to `output` and, when
    `source` is given as (real path of the original source, replacement), that source replaced."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in DEP_FLAGS_WITH_ARG:
            skip = True
            continue
        if a in ("-MD", "-MMD"):
            continue
        if a == "-o":
            out += ["-o", output]
            skip = True
            continue
        if source and not a.startswith("-") and os.path.realpath(a) == source[0]:
            out.append(source[1])
            continue
        out.append(a)
    return out


def compile_out(t):
    """t's own compile command with its output redirected to t['output'] (dependency files dropped)."""
    return rewrite_compile(t["args"], t["output"])


def compile_args_for(tu, mutant_src, obj):
    args = tu["args"]
    # Source paths in the command are relative to the TU's directory: compare them resolved there.
    resolved = [a if a.startswith("-") else os.path.join(tu["directory"], a) for a in args[1:]]
    original = dict(zip(resolved, args[1:]))
    rewritten = rewrite_compile(resolved, obj, (os.path.realpath(tu["file"]), os.path.join(mutant_src, tu["rel"])))
    return [args[0], "-I" + mutant_src] + [original.get(a, a) for a in rewritten]


def link_args_for(plan, objs, exe):
    args = list(plan.link_args)
    originals = {os.path.realpath(t["output"]): o for t, o in objs}
    replaced = set()
    for i, a in enumerate(args):
        r = os.path.realpath(os.path.join(plan.link_cwd, a))
        if r in originals:
            args[i] = originals[r]
            replaced.add(r)
    extra = [o for r, o in originals.items() if r not in replaced]
    args = [args[0]] + extra + args[1:]  # ahead of the archives: their copies are never pulled in
    i = args.index("-o")
    args[i + 1] = exe
    return args


def sh(args, cwd, log):
    t = subprocess.run(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write("$ (cd %s && %s)\n%s" % (cwd, " ".join(shlex.quote(a) for a in args), t.stdout))
    return t.returncode


def build_one(plan, m, work, kernel_dir, also, keep=False, dry_run=False):
    d = os.path.join(work, m.id)
    os.makedirs(d, exist_ok=True)
    src = os.path.join(d, "src")
    mutated = os.path.realpath(os.path.join(plan.root, m.file))
    affected = [t for t in plan.tus if t["file"] == mutated or mutated in plan.closure[t["file"]]]
    t0 = time.time()
    result = {"id": m.id, "seconds": 0.0, "tus": [os.path.relpath(t["file"], plan.root) for t in affected]}
    if not affected:
        result.update(status="unreachable", why="no translation unit of the kernel includes " + m.file)
        write_json(os.path.join(d, "build.json"), result)
        return result
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(os.path.join(plan.root, kernel_dir), os.path.join(src, kernel_dir))
    for a in also or []:
        os.makedirs(os.path.dirname(os.path.join(src, a)), exist_ok=True)
        shutil.copy2(os.path.join(plan.root, a), os.path.join(src, a))
    with open(os.path.join(plan.root, m.file), encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(src, m.file), "w", encoding="utf-8") as f:
        f.write(apply_mutant(text, m))
    with open(os.path.join(d, "diff.patch"), "w") as f:
        f.write(m.diff)
    exe = os.path.join(d, os.path.basename(plan.target))
    objs = []
    status = "built"
    with open(os.path.join(d, "build.log"), "w") as log:
        cmds = []
        for k, t in enumerate(affected):
            obj = os.path.join(d, "obj%d_%s.o" % (k, os.path.basename(t["file"])))
            cmds.append((compile_args_for(t, src, obj), t["directory"]))
            objs.append((t, obj))
        cmds.append((link_args_for(plan, objs, exe), plan.link_cwd))
        if dry_run:
            for a, cwd in cmds:
                print("(cd %s && %s)" % (cwd, " ".join(shlex.quote(x) for x in a)))
            return result
        for a, cwd in cmds:
            if sh(a, cwd, log) != 0:
                status = "build_failed"
                break
    result["seconds"] = round(time.time() - t0, 2)
    result["status"] = status
    result["binary"] = os.path.basename(exe)
    if status != "built":
        with open(os.path.join(d, "build.log")) as f:
            result["why"] = f.read()[-2000:]
    if not keep:
        shutil.rmtree(src, ignore_errors=True)
        for _, o in objs:
            if os.path.exists(o):
                os.remove(o)
    write_json(os.path.join(d, "build.json"), result)
    return result
