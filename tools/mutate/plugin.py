"""Plugin mode (`build --plugin`): each mutant becomes a small shared library (the kernel's
translation units plus the gpu/plugin/kernel_module.cpp adapter) that an unmutated flashcheck loads
with --plugin, instead of a whole flashcheck binary. The adapter exports the kernel's Capabilities as
the plugin ABI 2 declared space (and the plain part as ABI 1.1's), so a campaign on the module draws
the same problems, variants included, and tiles as on the built-in."""
import concurrent.futures
import os
import shutil
import time

from .build import BuildPlan, compile_out, include_closure, plan_build_tus, sh
from .store import read_json, write_json


# Compiled once per work folder and linked into every module: the adapter and what it needs from
# the kernels layer (the registrar, the variant launches' VarParams) and the problem model
# (Problem::softmax_scale).
MODULE_SOURCES = ("gpu/plugin/kernel_module.cpp", "gpu/kernel.cpp", "gpu/common/var_params_host.cpp",
                  "reference/problem.cpp", "reference/dtype.cpp")
ARCH_FLAGS = ("--generate-code", "-gencode", "--gpu-architecture", "-arch", "--gpu-code", "-code")


def is_nvcc(args):
    return os.path.basename(args[0]).startswith("nvcc")


def plugin_args(args, arch):
    """A TU's compile command for a module: position-independent, and CUDA code for `arch` alone
    (a module is built for the one GPU it is checked on; half or less of the compile), without line
    tables: -lineinfo changes no instruction but triples the cubins (the variant instantiations
    made a wgmma_f16 module 26 MB with them, 8 MB without), and a pack holds a module per mutant."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if is_nvcc(args) and (a in ARCH_FLAGS or a.split("=", 1)[0] in ARCH_FLAGS):
            skip = "=" not in a
            continue
        if is_nvcc(args) and a in ("-lineinfo", "--generate-line-info"):
            continue
        out.append(a)
    if is_nvcc(args):
        out.insert(1, "-gencode=arch=compute_%s,code=sm_%s" % (arch, arch))
        if not any("fPIC" in a for a in out):
            out.insert(1, "-Xcompiler=-fPIC")
    elif "-fPIC" not in out:
        out.insert(1, "-fPIC")
    return out


def cuda_dir(tus, subs):
    """The first of `subs` under the CUDA toolkit of the plan's nvcc that exists, or None."""
    for t in tus:
        if is_nvcc(t["args"]):
            nvcc = t["args"][0]
            nvcc = nvcc if os.path.isabs(nvcc) else (shutil.which(nvcc) or nvcc)
            top = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
            for sub in subs:
                if os.path.isdir(os.path.join(top, sub)):
                    return os.path.join(top, sub)
    return None


def cuda_lib_dir(tus):
    return cuda_dir(tus, ("lib64", "targets/x86_64-linux/lib", "lib"))


def plan_plugin(root, base, kernel_dir, work, arch="90a", suffix=".mutant", cudart="shared", jobs=2, defines=(),
                backward=False):
    """A BuildPlan whose 'link' makes WORK/_module/<kernel>.so from base objects compiled here (the
    unmutated module, also the baseline), so build_one swaps in a mutant's objects exactly as it
    does for a flashcheck binary. `defines` (NAME or NAME=VALUE) are added to every compile: the
    perturbed build is `FLASHCHECK_PERTURB=1` (gpu/common/perturb.h). `backward`: the adapter is
    compiled with FC_MODULE_BACKWARD, so the module exports the kernel's backward pass with the
    backward's declared space (gpu/plugin/kernel_module.cpp), for `run --backward --plugin`."""
    root = os.path.realpath(root)
    work = os.path.realpath(work)
    kplan = plan_build_tus(root, base, kernel_dir)
    for t in kplan:
        t["args"] = t["args"][:1] + ["-D" + d for d in defines] + t["args"][1:]
    cxx = next((t for t in kplan if not is_nvcc(t["args"])), None)
    if cxx is None:
        raise SystemExit("mutate: --plugin needs a C++ translation unit in %s (its register.cpp) to take the "
                         "compiler and flags from" % kernel_dir)
    mod = os.path.join(work, "_module")
    os.makedirs(mod, exist_ok=True)
    tus = []
    for t in kplan:
        t = dict(t, args=plugin_args(t["args"], arch), output=os.path.join(mod, "k_" + os.path.basename(t["file"]) + ".o"))
        tus.append(t)
    extra = []
    for rel in MODULE_SOURCES:
        src = os.path.join(root, rel)
        args = [a if os.path.realpath(os.path.join(cxx["directory"], a)) != cxx["file"] else src
                for a in plugin_args(cxx["args"], arch)]
        if rel.endswith("kernel_module.cpp"):
            args.insert(1, '-DFC_MODULE_SUFFIX="%s"' % suffix)
            if backward:
                args.insert(1, "-DFC_MODULE_BACKWARD=1")
            # The adapter reads a device kernel's cu_seqlens and seqused through host copies
            # (cudaMemcpy): without FC_MODULE_CUDA a module refuses every packed or seqused problem,
            # and a variant campaign on it scores nothing (CMake builds flashcheck_perturbed so too).
            inc = cuda_dir(kplan, ("include", "targets/x86_64-linux/include"))
            if any(is_nvcc(t["args"]) for t in kplan):
                args[1:1] = ["-DFC_MODULE_CUDA=1"] + (["-isystem", inc] if inc else [])
        extra.append({"file": src, "rel": rel, "directory": cxx["directory"], "args": args,
                      "output": os.path.join(mod, "m_" + os.path.basename(rel) + ".o")})
    # The tree's version script (the one CMake links flashcheck_perturbed.so and host_kernel_module
    # with): both ABI entries, flashcheck_get_kernel2 (problem model 2: a campaign's --variants
    # draws only from a module exporting it) and flashcheck_get_kernel; the module's registrar and
    # kernel list bind inside the module.
    exports = os.path.join(root, "gpu", "plugin", "kernel_module.map")
    libdir = cuda_lib_dir(tus)
    link = [cxx["args"][0], "-shared", "-o", "PLACEHOLDER"] + [t["output"] for t in tus + extra] + \
        ["-Wl,--version-script=" + exports, "-Wl,-z,defs", "-Wl,-rpath,$ORIGIN"]
    if libdir:
        link += ["-L" + libdir, "-lcudart" if cudart == "shared" else "-l:libcudart_static.a"]
        link += ["-ldl", "-lrt", "-lpthread"]
    link += ["-lm"]
    # A unit compiled with OpenMP (reference/dtype.cpp's conversions are) needs its runtime at link
    # time: -z defs refuses the module otherwise.
    if any("-fopenmp" in t["args"] for t in tus + extra):
        link += ["-fopenmp"]
    name = os.path.basename(os.path.normpath(kernel_dir)) + ".so"
    cache = {}
    # The module's own sources are units of the plan like the kernel's: a mutant of one (`--also
    # gpu/common/var_params_host.cpp`, the variant launches' host half) or of a header it includes
    # recompiles it, and its object replaces the unmutated one in the link.
    closure = {t["file"]: include_closure(t["file"], root, cache) for t in tus + extra}
    plan = BuildPlan(root, base, name, tus + extra, mod, link, closure)
    lib = os.path.join(mod, name)
    stamp = os.path.join(mod, "module.json")
    key = {"arch": arch, "suffix": suffix, "cudart": cudart, "backward": backward, "link": link,
           "compile": [t["args"] for t in tus + extra]}
    if (read_json(stamp) or {}).get("key") != key or not os.path.exists(lib):
        t0 = time.time()
        with open(os.path.join(mod, "build.log"), "w") as log:
            def compile_once(t):
                # An object compiled by the same command after its sources last changed is reused
                # (a failed link must not cost the ~40 s kernel compile again).
                cmd = compile_out(t)
                stamp_o = t["output"] + ".cmd"
                srcs = [t["file"]] + sorted(include_closure(t["file"], root, cache))
                if os.path.exists(t["output"]) and os.path.exists(stamp_o) and open(stamp_o).read() == repr(cmd) and \
                        os.path.getmtime(t["output"]) > max(os.path.getmtime(x) for x in srcs):
                    return 0
                rc = sh(cmd, t["directory"], log)
                if rc == 0:
                    with open(stamp_o, "w") as f:
                        f.write(repr(cmd))
                return rc
            with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as ex:
                rcs = list(ex.map(compile_once, tus + extra))
            if any(rcs) or sh([lib if a == "PLACEHOLDER" else a for a in link], mod, log):
                raise SystemExit("mutate: the unmutated module does not build; see %s" % os.path.join(mod, "build.log"))
        write_json(stamp, {"key": key, "seconds": round(time.time() - t0, 1), "library": name, "backward": backward})
        print("built the unmutated module %s in %.0fs" % (lib, time.time() - t0), flush=True)
    return plan
