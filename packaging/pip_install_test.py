#!/usr/bin/env python3
"""`pip install --no-build-isolation .` as a newcomer runs it, offline, on a copy of this checkout:

  1. a fresh venv (`python3 -m venv --system-site-packages`: numpy, setuptools, wheel and build come
     from Debian, nothing from an index);
  2. the sdist (`python -m build --sdist --no-isolation`) holds every file of the checkout, so the
     wheel `python3 -m build` builds from it has the whole CMake project;
  3. pip builds the package from scratch: CMake on the copy, the native targets only, CPU only
     (FLASHCHECK_CMAKE_ARGS=-DFLASHCHECK_CUDA=OFF keeps it to what CI builds);
  4. from another directory, with no FLASHCHECK_* or PYTHONPATH: `import flashcheck` judges real
     outputs with the bundled library, `python -m flashcheck` and the `flashcheck` command run the
     bundled CLI, and pytest loads the plugin from its entry point.

Exit 0 when all of that holds, 77 (ctest: skipped) only when this machine cannot make a venv with
pip at all (the reason is printed), 1 otherwise.

    pip_install_test.py --source CHECKOUT [--python /usr/bin/python3]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

SKIP = 77
NOT_SHIPPED = (".gitignore", ".ci/")  # checkout files the sdist leaves out on purpose


def run(cmd, env=None, cwd=None, expect=0, quiet=False):
    print("$", " ".join("<script>" if "\n" in str(c) else str(c) for c in cmd), flush=True)
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=env, cwd=cwd, timeout=1400)
    out = r.stdout + r.stderr
    if quiet and r.returncode == expect:
        out = "\n".join(out.splitlines()[-5:]) + "\n"  # a build log's tail
    print(out, end="" if out.endswith("\n") or not out else "\n", flush=True)
    if expect is not None and r.returncode != expect:
        sys.exit(f"FAIL: exit {r.returncode}, expected {expect}: {' '.join(map(str, cmd))}")
    return r


def checkout_files(source):
    """The checkout's files, relative: git's tracked and untracked-not-ignored ones (what a commit
    would hold), else every file outside build directories."""
    git = subprocess.run(["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True)
    if git.returncode == 0:
        return sorted(f for f in git.stdout.decode().split("\0") if f and (source / f).is_file())
    skip = ("build", ".git", "dist", "__pycache__")
    return sorted(str(p.relative_to(source)) for p in source.rglob("*")
                  if p.is_file() and not any(part.startswith(skip) or part.endswith(".egg-info")
                                             for part in p.relative_to(source).parts))


def copy_checkout(source, files, dest):
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / f, dest / f)


def clean_env(**extra):
    """The caller's environment without anything that would point flashcheck at a build."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHCHECK_", "PYTHON", "PIP_"))}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def make_venv(python, where):
    r = subprocess.run([python, "-m", "venv", "--system-site-packages", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"SKIP: `{python} -m venv` cannot make a venv here (Debian: apt-get install python3-venv):\n"
              f"{r.stdout}{r.stderr}")
        sys.exit(SKIP)
    py = where / "bin" / "python"
    r = subprocess.run([py, "-m", "pip", "--version"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"SKIP: the venv has no working pip:\n{r.stdout}{r.stderr}")
        sys.exit(SKIP)
    print(f"venv {where}: {r.stdout.strip()}", flush=True)
    return py


def check_sdist(py, src, files, out):
    run([py, "-m", "build", "--sdist", "--no-isolation", "--outdir", out, src], env=clean_env(), quiet=True)
    (sdist,) = out.glob("flashcheck-*.tar.gz")
    with tarfile.open(sdist) as t:
        shipped = {m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile() and "/" in m.name}
    missing = [f for f in files if f not in shipped and not f.startswith(NOT_SHIPPED)]
    if missing:
        sys.exit(f"FAIL: the sdist lacks {len(missing)} file(s) of the checkout (MANIFEST.in): {missing[:20]}")
    print(f"ok: the sdist {sdist.name} holds all {len(files)} files of the checkout", flush=True)


# Run by the venv's python in an empty directory: the package must come from the venv alone.
USE = r'''
import sys, numpy as np, flashcheck
from flashcheck import _lib
venv = sys.argv[1]
assert flashcheck.__file__.startswith(venv), flashcheck.__file__
assert _lib._find().startswith(venv), _lib._find()
p = flashcheck.Problem.parse("b=1 hq=4 hkv=2 sq=45 skv=70 dqk=32 dv=32 causal=bottom_right dtype=f32")
q, k, v = flashcheck.make_inputs(p, "normal", 7)
o, lse = flashcheck.reference(q, k, v, causal="bottom_right")
o32, lse32 = o.astype(np.float32), lse.astype(np.float32)
assert flashcheck.check(q, k, v, o32, lse32, causal="bottom_right")
o32[0, 1, 30] += 0.25
assert not flashcheck.check(q, k, v, o32, lse32, causal="bottom_right")
print("ok: import flashcheck judges with", _lib._find())
'''

PYTEST_USE = r'''
import numpy as np

def attention(q, k, v, p):
    g = p.heads_q // p.heads_kv
    K, V = (np.repeat(x.astype(np.float64), g, axis=1) for x in (k, v))
    s = q.astype(np.float64) @ K.transpose(0, 1, 3, 2) * p.scale
    d = {"none": None, "top_left": 0, "bottom_right": p.seq_kv - p.seq_q}[p.causal]
    if d is not None:
        s = np.where(np.arange(p.seq_kv)[None, :] <= np.arange(p.seq_q)[:, None] + d, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    l = e.sum(-1, keepdims=True)
    return np.where(l > 0, (e @ V) / np.where(l > 0, l, 1.0), 0.0).astype(np.float32)

# A user's numpy kernel that maps a row of NaN to 0 rather than propagating it, as many do: it
# declares finite inputs (nonfinite=False), or one case in ten would carry a NaN it hides.
def test_attention(flashcheck_fuzz):
    assert flashcheck_fuzz(attention, dtypes=["f32"], max_seq=64, nonfinite=False).cases == 6
'''


def use(py, venv, elsewhere):
    env = clean_env()
    run([py, "-c", USE, venv], env=env, cwd=elsewhere)
    r = run([py, "-m", "flashcheck", "run", "--cases", 3], env=env, cwd=elsewhere)
    if "example_cpu_plugin" not in r.stdout + r.stderr:
        sys.exit("FAIL: `python -m flashcheck run` did not load the bundled example plugin")
    run([venv / "bin" / "flashcheck", "check", "--help"], env=env, cwd=elsewhere, quiet=True)
    (elsewhere / "test_mine.py").write_text(PYTEST_USE)
    r = run([py, "-m", "pytest", "-p", "no:cacheprovider", "--flashcheck-cases=6", "test_mine.py"], env=env,
            cwd=elsewhere)
    if "flashcheck: --flashcheck-seed=" not in r.stdout:
        sys.exit("FAIL: pytest did not load the flashcheck plugin from its entry point")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True, type=Path)
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flashcheck-pip-"))
    try:
        files = checkout_files(a.source.resolve())
        src, venv, elsewhere = work / "checkout", work / "venv", work / "elsewhere"
        copy_checkout(a.source.resolve(), files, src)
        elsewhere.mkdir()
        py = make_venv(a.python, venv)
        check_sdist(py, src, files, work / "dist")
        start = time.monotonic()
        env = clean_env(FLASHCHECK_CMAKE_ARGS="-DFLASHCHECK_CUDA=OFF",
                        CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2"))
        run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", src], env=env, quiet=True)
        print(f"ok: pip built and installed the package in {time.monotonic() - start:.0f} s", flush=True)
        use(py, venv, elsewhere)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS: pip install from a checkout, then flashcheck from a fresh venv with no environment variables")


if __name__ == "__main__":
    main()
