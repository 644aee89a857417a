"""The command line: one subcommand per mode, their options, and paths made absolute (commands run in
the base build's folders)."""
import argparse
import os

from . import __doc__ as OVERVIEW
from .commands import cmd_all, cmd_apply, cmd_build, cmd_list, cmd_report, cmd_run
from .operators import OPERATORS
from .selftest import selftest
from .sources import OPT_IN


def main(argv=None):
    p = argparse.ArgumentParser(description=OVERVIEW, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)

    def selection(sp):
        sp.add_argument("--kernel-dir", required=True, help="kernel folder relative to the source root, e.g. gpu/mma_f16")
        sp.add_argument("--also", action="append", help="another file to mutate (e.g. gpu/common/mask.cuh); "
                        "only the kernel's translation units that include it see the change")
        sp.add_argument("--root", help="source root (default: two folders above this tool)")
        sp.add_argument("--ops", help="comma-separated operator codes, or `all` (default: all but %s): %s" %
                        (",".join(OPT_IN), ",".join(OPERATORS)))
        sp.add_argument("--ids", help="comma-separated mutant ids, or a file of them (first word per line)")
        sp.add_argument("--only", action="append", help="keep the mutants of this file (a kernel-folder or --also "
                        "file, relative to the source root); repeatable")
        sp.add_argument("--match", help="keep the mutants whose changed line (as it was) matches this Python regular "
                        "expression, e.g. 'sink|window' (applied before --sample)")
        sp.add_argument("--sample", type=int, help="keep N mutants chosen by a hash of their ids")
        sp.add_argument("--sample-seed", type=int, default=0)

    sp = sub.add_parser("list", help="print the mutants")
    selection(sp)
    sp.add_argument("--diff", action="store_true", help="print each mutant's diff")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_list)

    sp = sub.add_parser("apply", help="print one mutant's diff, or apply it to a copy of the tree")
    sp.add_argument("--kernel-dir", required=True)
    sp.add_argument("--also", action="append")
    sp.add_argument("--root")
    sp.add_argument("--id", required=True)
    sp.add_argument("--into", help="root of a copy of the source tree to modify in place")
    sp.set_defaults(fn=cmd_apply)

    def building(sp):
        sp.add_argument("--base", required=True, help="pre-built CMake build dir (CMAKE_EXPORT_COMPILE_COMMANDS=ON)")
        sp.add_argument("--target", default="flashcheck")
        sp.add_argument("--work", required=True, help="one folder per mutant is made here")
        sp.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel builds")
        sp.add_argument("--keep", action="store_true", help="keep the mutated sources and objects")
        sp.add_argument("--rebuild", action="store_true", help="rebuild mutants already built")
        sp.add_argument("--shard", help="i/N: this call takes mutants k with k %% N == i")
        sp.add_argument("--plugin", action="store_true",
                        help="build each mutant as a small plugin library (kernel TUs + gpu/plugin/kernel_module.cpp) "
                             "for an unmutated flashcheck to load with --plugin, instead of a whole --target binary")
        sp.add_argument("--plugin-arch", default="90a", help="with --plugin: the one CUDA arch compiled (default 90a)")
        sp.add_argument("--plugin-suffix", default=".mutant",
                        help="with --plugin: appended to the kernel's name (default .mutant: mma_f16.mutant)")
        sp.add_argument("--perturb", action="store_true",
                        help="with --plugin: build against the perturbed build (-DFLASHCHECK_PERTURB=1 on every "
                             "compile: race instrumentation, gpu/common/perturb.h); use its own --work folder")
        sp.add_argument("--plugin-backward", action="store_true",
                        help="with --plugin: modules of the backward pass (gpu/plugin/kernel_module.cpp compiled with "
                             "-DFC_MODULE_BACKWARD=1: a kernel's backward exported through ABI 2 with its own declared "
                             "space, for `run --backward --plugin` and mutate_device.py --checks backward); use its "
                             "own --work folder")
        sp.add_argument("--cudart", choices=("shared", "static"), default="shared",
                        help="with --plugin: link the CUDA runtime shared (libcudart.so beside flashcheck or on the "
                             "library path; smallest) or static (self-contained, ~1 MB more per mutant)")

    def running(sp):
        sp.add_argument("--check", action="append", required=True,
                        help="shell command; {bin} is the mutant's binary, {id} its id, {dir} its folder. "
                             "Exit 0 passes, 1 kills, 125 cannot test, anything else (crash) kills")
        sp.add_argument("--timeout", type=float, default=120, help="seconds per check; past it the mutant is killed")
        sp.add_argument("--baseline", help="the unmutated binary: every check must pass on it first")
        sp.add_argument("--rerun", action="store_true", help="run mutants that already have a result")
        sp.add_argument("--deadline", type=float, help="seconds from now after which no new work starts")

    sp = sub.add_parser("build", help="build each mutant's binary")
    selection(sp)
    building(sp)
    sp.add_argument("--dry-run", action="store_true", help="print the first mutant's commands only")
    sp.set_defaults(fn=cmd_build)

    sp = sub.add_parser("run", help="run checks on built mutants")
    sp.add_argument("--work", required=True)
    sp.add_argument("-j", "--jobs", type=int, default=4, help="mutants checked at once (they share the GPU)")
    sp.add_argument("--shard")
    running(sp)
    sp.set_defaults(fn=cmd_run)

    sp = sub.add_parser("all", help="build and run in one pipeline, then report")
    selection(sp)
    building(sp)
    running(sp)
    sp.add_argument("--run-jobs", type=int, default=4, help="mutants checked at once")
    sp.add_argument("--equivalent", help="file of `ID reason` lines")
    sp.set_defaults(fn=cmd_all)

    sp = sub.add_parser("report", help="score and survivors")
    sp.add_argument("--work", required=True)
    sp.add_argument("--equivalent", help="file of `ID reason` lines: mutants argued equivalent")
    sp.add_argument("--json", help="write the report as JSON to PATH, or - for stdout only")
    sp.add_argument("--no-diffs", action="store_true")
    sp.add_argument("--min-score", type=float, help="exit 1 if the score is below this fraction")
    sp.set_defaults(fn=cmd_report)

    sp = sub.add_parser("selftest", help="test the lexer, operators, ids, apply, build, run and report")
    sp.add_argument("--flashcheck", help="a flashcheck build dir (compile commands, flashcheck, host_kernel_module "
                                         "configured): also test --plugin on gpu/plugin/host_module")
    sp.set_defaults(fn=lambda a: selftest(a.flashcheck and os.path.abspath(a.flashcheck)))

    args = p.parse_args(argv)
    # Commands run in the base build's folders: every path handed to them must be absolute.
    for name in ("work", "base", "baseline", "equivalent"):
        if getattr(args, name, None):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    return args.fn(args)
