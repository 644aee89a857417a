#!/usr/bin/env python3
"""A sharded campaign under a real Slurm merges to the unsharded run (README, "Shards and GPUs").

Starts a single-node cluster from Debian's slurm-wlm in a temporary directory (munged with its own
key and socket, slurmctld and slurmd on free ports, state and spool there; as root), then:

1. tools/slurm/campaign.sh, as shipped (each array task asks for --gres=gpu:1; the node offers four
   stand-in GPU devices, /dev/null and co., so every task is given its own), runs a 4-shard campaign
   of the CPU replica and the example plugin through sbatch, with the merge as a dependent job; its
   merged JSON and JUnit report equal the unsharded run's: the same cases, the same verdicts, the
   same counts, kept failures and coverage (timings and the list of shards aside), the same bytes
   of JUnit;
2. `--gres none` (a cluster without GPUs) runs a 2-shard campaign the same way;
3. campaign.sh refuses run options it sets itself, before submitting anything.

Where Slurm cannot start (not root, packages missing, a daemon that will not come up: a container
without the privileges it needs) the test is SKIPPED (exit 77) with the reason, never passed.

    slurm_campaign_test.py FLASHCHECK CAMPAIGN_SH

The campaign seed is drawn fresh each run and printed; FLASHCHECK_SEED=<s> repeats a run.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

FC, CAMPAIGN = (os.path.abspath(a) for a in sys.argv[1:3])
SEED = int(os.environ.get("FLASHCHECK_SEED") or int.from_bytes(os.urandom(4), "little"))
print(f"FLASHCHECK_SEED={SEED}", flush=True)
SKIP = 77  # CTest's SKIP_RETURN_CODE for this test
T0 = time.time()
failures = []
RUN = ["--seed", str(SEED % 1000000), "--max-seq", "40", "--max-work", "2e5"]
# Same bits only at the same OpenMP thread count: every run here, sharded or not, uses one thread.
ENV = dict(os.environ, OMP_NUM_THREADS="1")
for k in ("FLASHCHECK_HOSTILE_SET", "FLASHCHECK_TEST_FAKE_GPUS", "CUDA_VISIBLE_DEVICES"):
    ENV.pop(k, None)


def mark(what):
    print(f"{time.time() - T0:6.1f} s  {what}", flush=True)


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def skip(why):
    print(f"SKIPPED: {why}", flush=True)
    sys.exit(SKIP)


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"({path}: {e})"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """munged, slurmctld and slurmd of one node, everything under `root`; stopped by stop()."""

    NODE = "fcnode"
    # Character devices every Linux has, standing in for GPUs: Slurm only needs device files to
    # count and hand out (it sets CUDA_VISIBLE_DEVICES from their order); nothing opens them.
    GPUS = ["/dev/null", "/dev/zero", "/dev/full", "/dev/urandom"]

    def __init__(self, root):
        self.root = root
        self.conf = os.path.join(root, "slurm.conf")
        self.env = dict(ENV, SLURM_CONF=self.conf)
        self.started = []  # pid files of what we started, for stop()

    def path(self, *p):
        return os.path.join(self.root, *p)

    def start(self):
        """Returns None when up, else why it could not start (the test is then skipped)."""
        for tool in ("mungekey", "munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel"):
            if not shutil.which(tool):
                return f"{tool} not found (Debian: apt-get install slurm-wlm; .ci/run installs it)"
        if os.geteuid() != 0:
            return "not root: slurmd must run as root to start jobs"
        p = subprocess.run(["mungekey", "--create", "--keyfile", self.path("munge.key")], capture_output=True, text=True)
        if p.returncode != 0:
            return f"mungekey failed: {p.stderr.strip()}"
        # --force: munged otherwise refuses a socket directory others cannot traverse (ours is 0700).
        p = subprocess.run(["munged", "--force", "--key-file", self.path("munge.key"), "--socket", self.path("munge.sock"),
                            "--pid-file", self.path("munged.pid"), "--log-file", self.path("munged.log"),
                            "--seed-file", self.path("munged.seed")], capture_output=True, text=True)
        self.started.append(self.path("munged.pid"))
        if p.returncode != 0:
            return f"munged did not start: {p.stderr.strip()} {tail(self.path('munged.log'), 5)}"
        for d in ("state", "spool"):
            os.makedirs(self.path(d))
        host = socket.gethostname().split(".")[0]
        with open(self.conf, "w") as f:
            f.write(f"""# A one-node cluster for flashcheck's test, all of it under {self.root}.
ClusterName=flashcheck
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.path("munge.sock")}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.path("state")}
SlurmdSpoolDir={self.path("spool")}
SlurmctldPidFile={self.path("slurmctld.pid")}
SlurmdPidFile={self.path("slurmd.pid")}
SlurmctldLogFile={self.path("slurmctld.log")}
SlurmdLogFile={self.path("slurmd.log")}
# No cgroups, accounting or MPI: the jobs are single processes, and a test machine may lack them.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
GresTypes=gpu
# Four CPUs whatever the machine has (config_overrides): the four shards run at once.
SlurmdParameters=config_overrides
NodeName={self.NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs=4 Gres=gpu:{len(self.GPUS)} State=UNKNOWN
PartitionName=test Nodes={self.NODE} Default=YES MaxTime=INFINITE State=UP
""")
        with open(self.path("gres.conf"), "w") as f:
            for dev in self.GPUS:
                f.write(f"NodeName={self.NODE} Name=gpu File={dev}\n")
        for cmd, pid in ((["slurmctld", "-f", self.conf], "slurmctld.pid"), (["slurmd", "-f", self.conf, "-N", self.NODE], "slurmd.pid")):
            p = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=60)
            self.started.append(self.path(pid))
            if p.returncode != 0:
                return f"{cmd[0]} did not start (exit {p.returncode}): {p.stderr.strip()}\n{tail(self.path(cmd[0] + '.log'))}"
        deadline = time.time() + 60
        state = ""
        while time.time() < deadline:
            p = subprocess.run(["sinfo", "-h", "-n", self.NODE, "-o", "%T"], capture_output=True, text=True, env=self.env)
            state = p.stdout.strip()
            if state == "idle":
                return None
            time.sleep(0.5)
        return (f"node {self.NODE} not idle after 60 s (state '{state}'):\n--- slurmctld.log\n{tail(self.path('slurmctld.log'))}"
                f"--- slurmd.log\n{tail(self.path('slurmd.log'))}")

    def stop(self):
        if any(p.endswith("slurmctld.pid") for p in self.started):  # a controller to ask: jobs ended, daemons stopped
            for cmd in (["scancel", "--full", "--user", "root"], ["scontrol", "shutdown"]):
                try:
                    subprocess.run(cmd, capture_output=True, env=self.env, timeout=30)
                except (OSError, subprocess.TimeoutExpired):
                    pass  # the pid files below still stop what we started
        # Whatever is still running of what we started (by its pid file), then stopped for good.
        deadline = time.time() + 15
        for pid_file in reversed(self.started):
            try:
                with open(pid_file) as f:
                    pid = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            while time.time() < deadline and alive(pid):
                if pid_file.endswith("munged.pid"):
                    os.kill(pid, signal.SIGTERM)
                time.sleep(0.2)
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def comparable(doc):
    """The report without what differs between equal campaigns: timings, the merge's shards list."""
    if isinstance(doc, dict):
        return {k: comparable(v) for k, v in doc.items() if k not in ("timings_s", "shards", "html_page")}
    if isinstance(doc, list):
        return [comparable(v) for v in doc]
    return doc


def first_difference(a, b, path="$"):
    if type(a) is not type(b):
        return f"{path}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'the merged' if k in a else 'the unsharded'}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
    elif isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
    elif a != b:
        return f"{path}: {a!r} vs {b!r}"
    return None


def read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"{what}: {path}: {e}")
        return {}


def verdicts(doc):
    """kernel -> [(case, verdict)]: the cases run and how each ended."""
    return {v.get("name"): [(c.get("case"), c.get("verdict")) for c in v.get("verdicts", [])] for v in doc.get("variants", [])}


def campaign(cluster, out, shards, cases, gres=None):
    """The sharded campaign through campaign.sh and sbatch, and the unsharded run; compared."""
    args = [CAMPAIGN, "--shards", str(shards), "--out", out, "--flashcheck", FC, "--wait"]
    if gres:
        args += ["--gres", gres]
    p = subprocess.run([*args, "--", "--cases", str(cases), *RUN], capture_output=True, text=True, env=cluster.env,
                       timeout=900, errors="replace")
    mark(f"{shards} shards through sbatch (gres {gres or 'gpu:1'}): exit {p.returncode}")
    whole_json, whole_xml = out + "_whole.json", out + "_whole.xml"
    w = subprocess.run([FC, "run", "--cases", str(cases), *RUN, "--json", whole_json, "--junit", whole_xml],
                       capture_output=True, text=True, env=ENV, timeout=900, errors="replace")
    mark(f"the unsharded run: exit {w.returncode}")
    what = f"{shards} shards, gres {gres or 'gpu:1'}"
    logs = "".join(f"--- shard_{i}.log\n{tail(os.path.join(out, f'shard_{i}.log'), 8)}" for i in range(shards))
    if not check(p.returncode == w.returncode and w.returncode in (0, 1),
                 f"{what}: campaign.sh exit {p.returncode}, the unsharded run {w.returncode}\n--- campaign.sh\n{p.stdout[-3000:]}"
                 f"{p.stderr[-2000:]}\n{logs}--- merge.log\n{tail(os.path.join(out, 'merge.log'))}"
                 f"--- slurmctld.log\n{tail(cluster.path('slurmctld.log'))}"):
        return
    merged, whole = read_json(os.path.join(out, "merged.json"), what), read_json(whole_json, what)
    got, want = verdicts(merged), verdicts(whole)
    # A CUDA build on a machine without a GPU also lists its device kernels, unavailable and with no
    # case; the kernels that ran must be exactly the CPU replica and the example plugin.
    names = [n for n, v in want.items() if v]
    check(names == ["replica", "example_cpu_plugin"], f"{what}: the campaign's kernels that ran are {names}, not the CPU replica and the example plugin")
    check(got == want and all(len(want[n]) == cases for n in names),
          f"{what}: not the same cases and verdicts:\n merged    {got}\n unsharded {want}")
    d = first_difference(comparable(merged), comparable(whole))
    check(d is None, f"{what}: the merged report differs from the unsharded run's at {d}")
    check([s.get("shard") for s in merged.get("shards", [])] == [f"{i}/{shards}" for i in range(shards)],
          f"{what}: the merge did not read every shard: {merged.get('shards')}")
    try:
        with open(os.path.join(out, "merged.xml"), "rb") as a, open(whole_xml, "rb") as b:
            check(a.read() == b.read(), f"{what}: the merged JUnit report differs from the unsharded run's")
    except OSError as e:
        check(False, f"{what}: {e}")
    # Each shard ran as its own array task; with GPUs requested, each was given its own device.
    devices = []
    for i in range(shards):
        first = tail(os.path.join(out, f"shard_{i}.log"), 10_000).splitlines()[:1]
        ok = check(first and first[0].startswith(f"flashcheck shard {i}/{shards}: job "), f"{what}: shard_{i}.log: {first}")
        if ok:
            devices.append(first[0].split("CUDA_VISIBLE_DEVICES=")[1].split(",")[0])
    if gres is None:
        check(sorted(devices) == [str(i) for i in range(shards)], f"{what}: the tasks' GPUs are {devices}, not one each")


def main():
    # 3. Refusals need no cluster: nothing is submitted.
    never = os.path.join(tempfile.gettempdir(), f"fc-slurm-never-{os.getpid()}")
    p = subprocess.run([CAMPAIGN, "--flashcheck", FC, "--out", never, "--", "--shard", "0/2"], capture_output=True, text=True, env=ENV)
    check(p.returncode == 125 and "--shard" in p.stderr and not os.path.exists(never),
          f"campaign.sh took --shard among the run options: {p.returncode} {p.stderr}")
    p = subprocess.run([CAMPAIGN, "--shards", "0", "--flashcheck", FC, "--", "--cases", "1"], capture_output=True, text=True, env=ENV)
    check(p.returncode == 125 and "--shards" in p.stderr, f"campaign.sh took --shards 0: {p.returncode} {p.stderr}")

    root = tempfile.mkdtemp(prefix="fc-slurm-")
    os.chmod(root, 0o700)
    cluster = Cluster(root)
    try:
        why = cluster.start()
        if not why:
            mark("Slurm is up (munged, slurmctld, slurmd)")
            campaign(cluster, os.path.join(root, "four"), shards=4, cases=16)
            campaign(cluster, os.path.join(root, "cpu_only"), shards=2, cases=6, gres="none")
    finally:
        cluster.stop()
    if why:
        shutil.rmtree(root, ignore_errors=True)
        if failures:
            print("FAILED before Slurm was tried:", *failures, sep="\n - ")
            sys.exit(1)
        skip(f"Slurm could not start: {why}")
    if failures:
        print(f"FAILED ({len(failures)}), FLASHCHECK_SEED={SEED}; files kept in {root}:")
        for f in failures:
            print(" -", f)
        sys.exit(1)
    shutil.rmtree(root, ignore_errors=True)
    mark("slurm_campaign: all checks passed")


main()
