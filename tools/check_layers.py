#!/usr/bin/env python3
"""Fails on any include or CMake link edge between folders that the architecture forbids.

The layers, one way only (README, "Architecture"):
    tools (CLI) -> runner (campaign, harness, registry, plugin loader) -> {verify, gpu (kernels), fuzz, reference}
    verify -> reference        gpu -> reference/problem.h only        reference -> nothing
A checker that shares a kernel's code repeats its bugs, and a verifier that depends on the runner
cannot be reused by another caller: these edges are kept out by this script, run by ctest.
Scripts keep the same direction: one that runs the flashcheck CLI or imports the Python package
(python/) sits above both, in tools/ (device scripts, the mutation tool, Slurm) or bench/ and
data/, or is a test; a script in the kernels layer or below that drives them is an edge upward.

    check_layers.py [ROOT]      exit 0 when clean, 1 naming every forbidden edge
    check_layers.py --self-test proves the check fails on planted violations
"""
import os
import re
import sys
import tempfile

# Folder -> folders (or single headers) it may include. `testing` (the test main) is open to tests.
ALLOWED = {
    "reference": {"reference"},
    "verify": {"verify", "reference"},
    "fuzz": {"fuzz", "reference", "verify"},
    "gpu": {"gpu", "reference/problem.h", "reference/conventions.h", "reference/dtype.h"},
    "runner": {"runner", "verify", "gpu", "fuzz", "reference"},
    "capi": {"capi", "runner", "verify", "gpu", "fuzz", "reference"},
    "tools": {"tools", "runner", "verify", "gpu", "fuzz", "reference", "capi"},
    "bench": {"bench", "reference", "verify", "runner"},
    "testing": {"testing"},
}
# Folder -> project libraries its CMakeLists.txt may link.
LINKS = {
    "reference": {"fc_reference"},  # reference's own libraries (the GPU oracle builds on the problem model)
    # verify's own libraries (the element pass's kernels, and its twin on reference's emulation of
    # CUDA, which links the GPU oracle's emulated twin) beside the layers below it
    "verify": {"fc_reference", "fc_gpu_oracle", "fc_gpu_oracle_emu", "fc_verify_kernels", "fc_element_pass_emu"},
    "fuzz": {"fc_reference", "fc_verify"},
    "gpu": {"fc_reference"},
    "runner": {"fc_reference", "fc_gpu_oracle", "fc_verify", "fc_fuzz", "fc_kernels"},
    "capi": {"fc_runner"},
}
# Folders whose scripts may drive the CLI or import the Python package: the layers above the library.
SCRIPT_DRIVERS = {"tools", "python", "bench", "data"}
SCRIPT = re.compile(r"\.(py|sh)$")
# What makes a script a driver of the layers above: each pattern with how the edge is named.
SUBCOMMAND = r"(?:run|check|list|merge|bench|determinism|golden|oracle|calibrate)"
DRIVES = [
    (re.compile(r"^\s*(?:import|from)\s+flashcheck\b", re.M), "imports the flashcheck Python package"),
    (re.compile(r"\bPYTHONPATH=\S*\bpython\b|\bpython/flashcheck\b"), "uses python/"),
    (re.compile(r"\bflashcheck\s+" + SUBCOMMAND + r"\b|\bbuild[\w-]*/flashcheck\b"), "runs the flashcheck CLI"),
    # The binary held in a variable: `"$fc" run --kernel ...` in a shell, [fc, "check", path] in Python.
    (re.compile(r"\$\{?\w+\}?\"?\s+" + SUBCOMMAND + r"\s+[-\"$]"), "runs the flashcheck CLI"),
    (re.compile(r"\[\s*(?:\w+|[\"'][^\"']*flashcheck[\"'])\s*,\s*[\"']" + SUBCOMMAND + r"[\"']"), "runs the flashcheck CLI"),
    (re.compile(r"\b(?:run|check)\s+--(?:kernel|plugin|problem|cases)\b"), "runs the flashcheck CLI"),
    (re.compile(r"\bmutate(?:_device)?\.py\b|\btools/(?:device|mutate|slurm)\b"), "runs a script of the tools layer"),
]
SOURCE = re.compile(r"\.(h|hpp|cpp|cc|cu|cuh|c)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LINK = re.compile(r"target_link_libraries\s*\(([^)]*)\)", re.S)


def allowed(folder, target, is_test):
    rules = ALLOWED.get(folder)
    if rules is None:
        return True
    if is_test and target.split("/")[0] in ("testing", "reference", "verify", "fuzz"):
        return True  # a test may use the oracles, the checker and the generators to check its code
    return any(target == r or target.startswith(r + "/") for r in rules)


def is_test_script(name):
    return name.endswith("_test.py") or name.startswith("test_") or name == "conftest.py"


def script_violations(root):
    """Scripts outside SCRIPT_DRIVERS (tests aside) that drive the CLI or import the Python package."""
    bad = []
    for folder in sorted(set(ALLOWED) - SCRIPT_DRIVERS):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in files:
                if not SCRIPT.search(name) or is_test_script(name):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for pattern, what in DRIVES:
                    if pattern.search(text):
                        bad.append(f"{os.path.relpath(path, root)}: {what} (only scripts in {sorted(SCRIPT_DRIVERS)} or tests may)")
                        break
    return bad


def violations(root):
    bad = script_violations(root)
    for folder in ALLOWED:
        base = os.path.join(root, folder)
        for dirpath, _, files in os.walk(base):
            for name in files:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if SOURCE.search(name):
                    is_test = name.endswith("_test.cpp") or name.endswith("_test.cu")
                    with open(path, encoding="utf-8", errors="replace") as f:
                        text = f.read()
                    for inc in INCLUDE.findall(text):
                        if "/" not in inc:
                            continue  # a header beside the file (C plugins include their ABI so)
                        if not allowed(folder, inc, is_test):
                            bad.append(f"{rel}: includes {inc} ({folder} may include {sorted(ALLOWED[folder])})")
                elif name == "CMakeLists.txt" and folder in LINKS:
                    with open(path, encoding="utf-8") as f:
                        text = f.read()
                    for args in LINK.findall(text):
                        words = args.replace("\n", " ").split()
                        target = words[0] if words else ""
                        if target.endswith("_test"):
                            continue  # a test binary links what it tests
                        for w in words[1:]:
                            for lib in re.findall(r"\bfc_[a-z_]+\b", w):
                                if lib != target and lib not in LINKS[folder] and lib != "fc_test_main" \
                                        and not lib.startswith("fc_kernel_"):
                                    bad.append(f"{rel}: {target} links {lib} ({folder} may link {sorted(LINKS[folder])})")
    return bad


def self_test():
    planted = {
        "reference/a.cpp": '#include "verify/report.h"\n',
        "verify/b.cpp": '#include "runner/registry.h"\n',
        "gpu/k/c.cu": '#include "verify/criteria.h"\n',
        "gpu/k/d.cu": '#include "reference/naive.h"\n',
        "verify/CMakeLists.txt": "target_link_libraries(fc_verify PUBLIC fc_reference fc_fuzz)\n",
        "reference/ok_test.cpp": '#include "testing/test_seed.h"\n#include "reference/naive.h"\n',
        "gpu/k/ok.cu": '#include "reference/problem.h"\n#include "gpu/common/mask.cuh"\n',
        # Scripts: the kernels layer driving the CLI or the Python package, and the allowed places.
        "gpu/scripts/dev.sh": 'fc=build/flashcheck\n"$fc" list --json -\n',
        "gpu/scripts/mut.py": 'import subprocess\nsubprocess.run(["flashcheck", "run", "--plugin", "m.so"])\n',
        "runner/tool.py": "from flashcheck import fuzz\n",
        "gpu/k/mutants.sh": "python3 tools/mutate list --kernel-dir gpu/k\n",
        "tools/device/ok.sh": "build/flashcheck run --kernel all\n",
        "runner/ok_cli_test.py": "import subprocess\nsubprocess.run(['build/flashcheck', 'check', 'x'])\n",
        "gpu/k/gen_ok.py": "print('// generated: no CLI, no package')\n",
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in planted.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        found = violations(root)
    expect = ["reference/a.cpp", "verify/b.cpp", "gpu/k/c.cu", "gpu/k/d.cu", "verify/CMakeLists.txt", "gpu/scripts/dev.sh",
              "gpu/scripts/mut.py", "runner/tool.py", "gpu/k/mutants.sh"]
    missed = [e for e in expect if not any(v.startswith(e) for v in found)]
    wrong = [v for v in found if v.split(":")[0] not in expect]
    for v in found:
        print("  planted:", v)
    if missed or wrong:
        print("self-test FAILED: missed", missed, "wrongly flagged", wrong)
        return 1
    print(f"self-test: all {len(expect)} planted violations found, {len(planted) - len(expect)} allowed edges passed")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    bad = violations(root)
    for b in bad:
        print("forbidden edge:", b)
    print(f"check_layers: {len(bad)} forbidden edge(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
