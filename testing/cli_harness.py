"""What every end-to-end CLI test (runner/*_cli_test.py, tools/*_cli_test.py) needs, written once:
running flashcheck with the exit-code contract checked on every call, collecting failures with the
process's output beside them, the seed drawn fresh and printed, and the small hand-written files.

A test script puts this folder on sys.path and does:

    cli = CliTest("junit_cli", FC, seeded=True)
    p = cli.run("run", "--cases", "3")
    cli.check(p.returncode == 0, "a campaign of 3 cases did not pass", p)
    ...
    cli.finish()  # prints every failure with the seed, exits 1 if any
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

# Variables a test's own environment may carry that would change what flashcheck does (a hostile
# plugin's behaviour set, a fake GPU count): every run starts without them unless it passes them.
_SCRUBBED = ("FLASHCHECK_HOSTILE_SET", "FLASHCHECK_TEST_FAKE_GPUS")


class CliTest:
    def __init__(self, name, fc, seeded=False, timeout=300, scrub=()):
        """scrub: more variables every run starts without (CUDA_VISIBLE_DEVICES for a test of how
        flashcheck itself sets it)."""
        self.name, self.fc, self.failures, self.timeout = name, fc, [], timeout
        self.scrub = _SCRUBBED + tuple(scrub)
        # FLASHCHECK_SEED repeats a run; otherwise a fresh seed, printed before anything can fail.
        self.seed = int(os.environ.get("FLASHCHECK_SEED") or int.from_bytes(os.urandom(4), "little")) if seeded else None
        if seeded:
            print(f"FLASHCHECK_SEED={self.seed}", flush=True)
        self.tmp = tempfile.mkdtemp(prefix=f"fc-{name}-")

    def run(self, *args, env=None, cwd=None, timeout=None):
        """flashcheck ARGS (text output, invalid bytes replaced); any exit but 0, 1 or 125 is a
        failure whatever the caller expects, since the contract allows no other."""
        e = {k: v for k, v in os.environ.items() if k not in self.scrub}
        e.update(env or {})
        p = subprocess.run([self.fc, *args], capture_output=True, text=True, env=e, cwd=cwd,
                           timeout=timeout or self.timeout, errors="replace")
        self.contract(p, args)
        return p

    def run_bytes(self, *args, timeout=None):
        """flashcheck with arguments that are bytes (paths that are not UTF-8); the output decoded
        with invalid bytes replaced, as a reader of the report would."""
        p = subprocess.run([os.fsencode(self.fc), *(os.fsencode(a) for a in args)], capture_output=True,
                           timeout=timeout or self.timeout)
        p.stdout, p.stderr = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        self.contract(p, [os.fsdecode(a) for a in args])
        return p

    def contract(self, p, args):
        if p.returncode not in (0, 1, 125):
            self.failures.append(f"exit {p.returncode} (not 0, 1 or 125) from flashcheck {' '.join(args)}\n"
                                 f"{p.stderr[-2000:]}")

    def check(self, cond, what, p=None):
        if not cond:
            extra = f"\n--- exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}" if p else ""
            self.failures.append(what + extra)
        return cond

    def json_file(self, path, what, p=None):
        """The JSON document at path, or {} with a failure recorded (missing, empty or not JSON)."""
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            self.check(False, f"{what}: {path} is not a JSON document ({e})", p)
            return {}

    def finish(self, passed_line=None):
        """Prints every failure (with the seed that repeats the run) and exits 1, or removes the
        temporary folder and exits 0. The folder is kept on failure, for the files it names."""
        if self.failures:
            seed = f", FLASHCHECK_SEED={self.seed}" if self.seed is not None else ""
            print(f"{self.name}: {len(self.failures)} failure(s){seed}; files in {self.tmp}\n")
            for f in self.failures:
                print("FAILED:", f, "\n")
            sys.exit(1)
        shutil.rmtree(self.tmp, ignore_errors=True)
        print(passed_line or f"{self.name}: all checks passed")
        sys.exit(0)


def write_small_safetensors(path, seed, o_zero, shape=(1, 2, 9, 8), metadata=None):
    """q, k, v, o of `shape` in f32 from a Gaussian of `seed`, written byte by byte (no torch or
    numpy needed); o all zero when o_zero (an output that must fail). path may be bytes."""
    rnd = random.Random(seed)
    n = 1
    for s in shape:
        n *= s
    blobs = {t: struct.pack(f"<{n}f", *[0.0 if (t == "o" and o_zero) else rnd.gauss(0, 1) for _ in range(n)])
             for t in "kqov"}
    header, off = {"__metadata__": metadata or {"causal": "none"}}, 0
    for t in sorted(blobs):
        header[t] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(blobs[t])]}
        off += len(blobs[t])
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs[t] for t in sorted(blobs)))
