#!/usr/bin/env python3
"""`cmake --install` as a user outside the tree meets it: installs this build into a temporary
prefix, checks the files are where packaging/CMakeLists.txt says, then builds the two consumers in
packaging/consumers/ against the prefix alone and runs them:

  plugin  find_package(flashcheck) + flashcheck::plugin; the installed CLI runs it: the correct
          kernel passes, the broken one fails (exit 1) with a reproduce line; its own ctest runs
          flashcheck::cli on it
  capi    find_package(flashcheck) + flashcheck::capi, and again with pkg-config alone; fuzzes C
          kernels and judges random inputs through the installed libflashcheck.so

    install_test.py --build-dir BUILD [--cmake CMAKE]     exit 0 when every step behaves
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONSUMERS = HERE / "consumers"


def run(cmd, expect=0, env=None, cwd=None, quiet=False):
    """Runs cmd, echoing it and its output (quiet: only on failure); fails the test on any exit code
    but `expect`."""
    print("$", " ".join(map(str, cmd)), flush=True)
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    out = "" if quiet and r.returncode == expect else r.stdout + r.stderr
    print(out, end="" if out.endswith("\n") or not out else "\n", flush=True)
    if r.returncode != expect:
        sys.exit(f"FAIL: exit {r.returncode}, expected {expect}: {' '.join(map(str, cmd))}")
    return r


def require(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
    print(f"ok: {what}", flush=True)


def check_layout(prefix):
    """The installed files, and a bin/ link that resolves to the CLI with its plugin beside it."""
    libdirs = [d for d in ("lib", "lib64") if (prefix / d / "libflashcheck.so").is_file()] + \
        [str(p.parent.relative_to(prefix)) for p in prefix.glob("lib/*/libflashcheck.so")]
    require(libdirs, "lib*/libflashcheck.so installed")
    lib = prefix / libdirs[0]
    for f in ("include/flashcheck.h", "include/flashcheck_plugin.h", "libexec/flashcheck/flashcheck",
              "libexec/flashcheck/example_cpu_plugin.so", f"{libdirs[0]}/cmake/flashcheck/flashcheckConfig.cmake",
              f"{libdirs[0]}/cmake/flashcheck/flashcheckConfigVersion.cmake", f"{libdirs[0]}/pkgconfig/flashcheck.pc"):
        require((prefix / f).is_file(), f"{f} installed")
    cli = prefix / "bin" / "flashcheck"
    require(cli.is_symlink() and not os.path.isabs(os.readlink(cli)), "bin/flashcheck is a relative link")
    require(cli.resolve() == (prefix / "libexec/flashcheck/flashcheck").resolve(), "bin/flashcheck resolves to libexec")
    return cli, lib


def build(src, build_dir, cmake, prefix):
    """Configures and builds one consumer with nothing but the prefix to find flashcheck by."""
    run([cmake, "-S", src, "-B", build_dir, f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release",
         "--no-warn-unused-cli"])
    run([cmake, "--build", build_dir])


def plugin(cli, cmake, prefix, work, seed):
    out = work / "plugin"
    build(CONSUMERS / "plugin", out, cmake, prefix)
    so = out / "libtiny_plugin.so"
    require(so.is_file(), "libtiny_plugin.so built against the installed flashcheck_plugin.h")
    listed = json.loads(run([cli, "list", "--plugin", so, "--json", "-"], quiet=True).stdout)
    names = {k["name"] for k in listed}
    require({"tiny_naive", "tiny_unscaled"} <= names, "the installed CLI lists the plugin's two kernels")
    run([cli, "run", "--plugin", so, "--kernel", "tiny_naive", "--cases", 25, "--seed", seed])
    bad = run([cli, "run", "--plugin", so, "--kernel", "tiny_unscaled", "--cases", 25, "--seed", seed], expect=1)
    require("reproduce" in bad.stdout + bad.stderr, "the broken kernel fails with a reproduce line")
    # The CLI's default job finds the example plugin beside itself, through the bin/ link.
    default = run([cli, "run", "--cases", 3, "--seed", seed])
    require("example_cpu_plugin" in default.stdout + default.stderr, "the default job runs the installed example plugin")
    ctest = shutil.which("ctest", path=str(Path(cmake).parent)) or "ctest"
    run([ctest, "--test-dir", out, "--output-on-failure"])  # flashcheck::cli, the imported executable


def capi(cmake, prefix, lib, work, seed):
    out = work / "capi"
    build(CONSUMERS / "capi", out, cmake, prefix)
    run([out / "capi_consumer", seed])
    # The same program with pkg-config alone (no CMake), as a Makefile would build it.
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "flashcheck"], capture_output=True, text=True,
                        env=dict(os.environ, PKG_CONFIG_PATH=str(lib / "pkgconfig")))
    require(pc.returncode == 0, f"pkg-config finds flashcheck.pc ({pc.stderr.strip()})")
    exe = work / "capi_consumer_pc"
    cc = os.environ.get("CC", "cc")
    run([cc, "-std=c11", "-O1", "-I", CONSUMERS, CONSUMERS / "capi" / "capi_consumer.c", *pc.stdout.split(), "-lm",
         "-o", exe])
    run([exe, seed], env=dict(os.environ, LD_LIBRARY_PATH=str(lib)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", required=True, type=Path)
    ap.add_argument("--cmake", default="cmake")
    a = ap.parse_args()
    seed = int(os.environ.get("FLASHCHECK_SEED") or str(random.getrandbits(31)), 0)
    print(f"seed {seed} (FLASHCHECK_SEED={seed} repeats it)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="flashcheck-install-"))
    try:
        prefix = work / "prefix"
        run([a.cmake, "--install", a.build_dir, "--prefix", prefix])
        cli, lib = check_layout(prefix)
        plugin(cli, a.cmake, prefix, work, seed)
        capi(a.cmake, prefix, lib, work, seed)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS: the installed package builds and runs a plugin and a C API consumer")


if __name__ == "__main__":
    main()
