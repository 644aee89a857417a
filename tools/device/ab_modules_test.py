#!/usr/bin/env python3
"""ab_modules.py's promise, without CUDA: whatever ends a candidate's build (success, an error,
Ctrl-C, SIGTERM), the tree is as it was before; each candidate is built with its patch applied and
base without; a patch that does not apply, or a malformed or repeated name, is refused before
anything is built; the manifest lists what was built. The tree is a scratch git repository and the
module builder a stub that copies the patched source into the "module".

    python3 tools/device/ab_modules_test.py
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_modules as ab  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def git(root, *args):
    return subprocess.run(["git", "-C", root, "-c", "user.email=t@t", "-c", "user.name=t"] + list(args),
                          capture_output=True, text=True, check=True).stdout


def main():
    tmp = tempfile.mkdtemp(prefix="ab_modules_test_")
    root = os.path.join(tmp, "tree")
    os.makedirs(os.path.join(root, "gpu", "k"))
    src = os.path.join(root, "gpu", "k", "a.cu")
    with open(src, "w") as f:
        f.write("int x = 1;\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "tree")
    patches = {}
    for name, text in (("two", "int x = 2;\n"), ("three", "int x = 3;\n")):
        with open(src, "w") as f:
            f.write(text)
        patches[name] = os.path.join(tmp, name + ".patch")
        with open(patches[name], "w") as f:
            f.write(git(root, "diff"))
        git(root, "checkout", "-q", "--", ".")
    with open(os.path.join(tmp, "bad.patch"), "w") as f:
        f.write("--- a/gpu/k/none.cu\n+++ b/gpu/k/none.cu\n@@ -1 +1 @@\n-a\n+b\n")

    fail_on = {}  # candidate work folder name -> what the stub does there
    built = []

    def stub(r, base, kernel_dir, work, **kw):
        name = os.path.basename(work)
        built.append(name)
        what = fail_on.get(name)
        if what == "error":
            raise RuntimeError("build failed")
        if what == "interrupt":
            raise KeyboardInterrupt()
        if what == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        os.makedirs(os.path.join(work, "_module"), exist_ok=True)
        with open(os.path.join(r, kernel_dir, "a.cu")) as s, open(os.path.join(work, "_module", "k.so"), "w") as m:
            m.write(s.read())

    ab.ROOT = root
    ab.plan_plugin = stub
    clean = lambda: git(root, "status", "--porcelain") == ""  # noqa: E731

    def run(out, *cands):
        built.clear()
        return ab.main(["--kernel-dir", "gpu/k", "--base", tmp, "--out", os.path.join(tmp, out)] + list(cands))

    def module(out, name):
        with open(os.path.join(tmp, out, name + ".so")) as f:
            return f.read()

    def manifest(out):
        with open(os.path.join(tmp, out, "manifest.txt")) as f:
            return [line.split("\t")[0] for line in f]

    run("ok", "two=" + patches["two"], "three=" + patches["three"])
    check(module("ok", "base") == "int x = 1;\n" and module("ok", "two") == "int x = 2;\n"
          and module("ok", "three") == "int x = 3;\n", "each module built from its own patch, base from the tree")
    check(clean(), "the tree is as it was after a run")
    check(manifest("ok") == ["base", "two", "three"], "the manifest lists every module")

    for what, exc in (("error", RuntimeError), ("interrupt", KeyboardInterrupt), ("sigterm", ab.Stop)):
        fail_on.clear()
        fail_on["three"] = what
        try:
            run("f_" + what, "two=" + patches["two"], "three=" + patches["three"])
            raised = None
        except BaseException as e:  # noqa: B902 (the point is what escapes)
            raised = e
        check(isinstance(raised, exc), "a build ended by %s propagates it (%r)" % (what, raised))
        check(clean(), "the tree is as it was after a build ended by " + what)
        check(manifest("f_" + what) == ["base", "two"], "the manifest lists what was built before the " + what)
    fail_on.clear()

    for cands, what in ((["x=" + os.path.join(tmp, "bad.patch")], "a patch that does not apply"),
                        (["base=" + patches["two"]], "the name base"),
                        (["a b=" + patches["two"]], "a name with a space"),
                        (["two=" + patches["two"], "two=" + patches["three"]], "a repeated name"),
                        (["two=" + os.path.join(tmp, "missing.patch")], "a missing patch file"),
                        (["two"], "no '=PATCH'")):
        try:
            run("refused", *cands)
            refused = False
        except SystemExit as e:
            refused = bool(str(e).startswith("ab_modules:"))
        check(refused and built == [] and clean(), "%s is refused before anything is built" % what)

    shutil.rmtree(tmp, ignore_errors=True)
    print("ab_modules_test: %d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
