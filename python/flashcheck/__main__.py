"""`python -m flashcheck ARGS...`, and the `flashcheck` command pip installs: the flashcheck CLI.

This process becomes the CLI (exec), so its output, exit codes (0 pass, 1 mismatch, 125 cannot
test; `git bisect run` reads them) and signals are the CLI's own. The binary is $FLASHCHECK_BIN,
else the one an installed wheel carries (_native/, beside the example plugin the default job loads),
else the checkout's build/flashcheck.
"""
import os
import sys
from pathlib import Path


def _cannot_test(message):
    """Exits 125 as the CLI's own "cannot test", so a bisect script skips rather than blames a commit."""
    print(f"cannot test: {message}", file=sys.stderr)
    raise SystemExit(125)


def cli_path():
    env = os.environ.get("FLASHCHECK_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            _cannot_test(f"FLASHCHECK_BIN={env} is not an executable file")
        return env
    here = Path(__file__).resolve().parent
    for candidate in (here / "_native" / "flashcheck", here.parent.parent / "build" / "flashcheck"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    _cannot_test(f"no flashcheck CLI binary (FLASHCHECK_BIN unset, none in {here / '_native'} or the checkout's "
                 "build/): install the package with `pip install --no-build-isolation .` or build the checkout")


def main():
    exe = cli_path()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["flashcheck", *sys.argv[1:]])


if __name__ == "__main__":
    main()
