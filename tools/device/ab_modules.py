#!/usr/bin/env python3
"""Candidates of one kernel as plugin modules, to be timed side by side in one device call.

A tuning question ("does a third stage help D = 128?") is answered fairly only when every
candidate runs in the same call on the same card (PERF.md: runs of one build differ by 2-5% from
machine to machine). Whole flashcheck binaries are ~100 MB each; a kernel folder built as a plugin
module is 1.6 MB (wgmma_e4m3) to 8 MB (wgmma_f16), built in 10-60 s on two cores, and
`flashcheck bench --plugin M.so --kernel NAME.ab` or `run --plugin M.so --kernel NAME.ab` time and
check it on the device beside the others.

Each candidate is a patch (`git diff` against the tree). It is applied to the source tree in place
(the build's compile commands take headers from the tree itself, so a copy of the tree would not
see a patched header), the kernel folder is built as a module by tools/mutate's plugin builder, and
the patch is reversed before the next one, also when the build fails or is interrupted. `base`, the
tree as it is, is always built first.

    python3 tools/device/ab_modules.py --kernel-dir gpu/wgmma_f16 --base build-cuda --out OUT \\
        [--arch 90a] [-j 2] NAME=PATCH ...

OUT/NAME.so per candidate (OUT/base.so beside them), OUT/manifest.txt (name, patch, seconds,
bytes). The base build dir must be configured with CMAKE_EXPORT_COMPILE_COMMANDS=ON and CUDA (the
mutation tool's `build-cuda`); the tree must hold no other uncommitted change to the patched files.
Session 16 (PERF.md) ran its candidates this way.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

# The source tree the build's compile commands name (tests point it, and plan_plugin, elsewhere).
ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from mutate.plugin import plan_plugin  # noqa: E402

SUFFIX = ".ab"


class Stop(Exception):
    """SIGTERM or SIGHUP (a timeout, a closed terminal): unwinds like Ctrl-C, so the patch is reversed."""


def stop(signum, _frame):
    raise Stop("signal %d" % signum)


def git(*args, check=True):
    r = subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit("ab_modules: git %s: %s" % (" ".join(args), (r.stderr or r.stdout).strip()))
    return r


def build(name, kernel_dir, base, out, arch, jobs):
    work = os.path.join(out, ".work", name)
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.time()
    plan_plugin(ROOT, base, kernel_dir, work, arch=arch, suffix=SUFFIX, cudart="static", jobs=jobs)
    lib = os.path.join(work, "_module", os.path.basename(os.path.normpath(kernel_dir)) + ".so")
    if not os.path.exists(lib):
        raise SystemExit("ab_modules: %s: no module was built (see %s)" % (name, os.path.join(work, "_module", "build.log")))
    dest = os.path.join(out, name + ".so")
    shutil.copy(lib, dest)
    return time.time() - t0, os.path.getsize(dest)


def main(argv=None):
    ap = argparse.ArgumentParser(description="build a kernel folder's candidates (patches) as plugin modules")
    ap.add_argument("--kernel-dir", required=True, help="kernel folder relative to the source root, e.g. gpu/wgmma_f16")
    ap.add_argument("--base", required=True, help="pre-built CMake build dir with compile commands and CUDA")
    ap.add_argument("--out", required=True, help="folder for NAME.so and manifest.txt")
    ap.add_argument("--arch", default="90a", help="the one GPU architecture the modules are built for")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("candidates", nargs="*", metavar="NAME=PATCH")
    a = ap.parse_args(argv)
    cands = []
    for c in a.candidates:
        name, sep, patch = c.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_-]+", name) or name == "base":
            raise SystemExit("ab_modules: '%s' is not NAME=PATCH (NAME letters, digits, '-', '_'; not 'base')" % c)
        patch = os.path.abspath(patch)
        if not os.path.isfile(patch):
            raise SystemExit("ab_modules: %s: no patch file %s" % (name, patch))
        git("apply", "--check", patch)  # every patch must apply to the tree as it is, before any build
        cands.append((name, patch))
    if len({n for n, _ in cands}) != len(cands):
        raise SystemExit("ab_modules: a candidate name is given twice")
    os.makedirs(a.out, exist_ok=True)
    out = os.path.abspath(a.out)
    base = os.path.abspath(a.base)
    handlers = [(sig, signal.signal(sig, stop)) for sig in (signal.SIGTERM, signal.SIGHUP)]
    rows = []
    try:
        rows.append(("base", "-") + build("base", a.kernel_dir, base, out, a.arch, a.jobs))
        print("base: %.0f s, %d bytes" % rows[0][2:], flush=True)
        for name, patch in cands:
            applied = False
            try:
                git("apply", patch)
                applied = True
                secs, size = build(name, a.kernel_dir, base, out, a.arch, a.jobs)
            finally:
                # Reversed whatever ended the build (an error, Ctrl-C, SIGTERM); further signals wait.
                if applied:
                    old = [signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
                    r = git("apply", "-R", patch, check=False)
                    for sig, h in zip((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), old):
                        signal.signal(sig, h)
                    if r.returncode != 0:
                        sys.stderr.write("ab_modules: could not reverse %s; the tree still holds it: %s\n" %
                                         (patch, (r.stderr or r.stdout).strip()))
            rows.append((name, patch, secs, size))
            print("%s: %.0f s, %d bytes" % (name, secs, size), flush=True)
    finally:
        for sig, h in handlers:
            signal.signal(sig, h)
        with open(os.path.join(out, "manifest.txt"), "w") as f:  # what was built, also when a build failed
            for name, patch, secs, size in rows:
                f.write("%s\t%s\t%.0f\t%d\n" % (name, patch, secs, size))
    print("modules in %s; on the device: flashcheck bench --plugin %s/NAME.so --kernel %s%s ..." %
          (out, out, os.path.basename(os.path.normpath(a.kernel_dir)), SUFFIX))


if __name__ == "__main__":
    main()
