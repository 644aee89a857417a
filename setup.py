"""The flashcheck wheel's native parts. setuptools packages python/flashcheck (metadata: pyproject.toml)
and, as a step of `build`, runs CMake on this source tree to build what the package runs:
libflashcheck.so (the ctypes bindings load it), the flashcheck CLI (`python -m flashcheck`) and the
example plugin the CLI's default job loads from beside itself. They land in flashcheck/_native/.

Only those targets are built (no tests, no benchmarks). CUDA kernels join the CLI when nvcc is found,
as in any build. Environment: FLASHCHECK_CMAKE_ARGS (extra configure arguments, e.g.
-DFLASHCHECK_CUDA=OFF), CMAKE_BUILD_PARALLEL_LEVEL (jobs; default: every CPU), CMAKE (the cmake to run).
"""
import os
import shlex
import shutil
from pathlib import Path

from setuptools import Command, Distribution, setup
from setuptools.command.build import build

try:  # setuptools >= 70.1 has its own; Debian 12's setuptools takes it from the wheel package
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

TARGETS = ("flashcheck_capi", "flashcheck", "example_cpu_plugin")
FILES = ("libflashcheck.so", "flashcheck", "example_cpu_plugin.so")  # where CMake puts them: the build root


class build_native(Command):
    description = "build libflashcheck.so and the flashcheck CLI with CMake"
    user_options = []

    def initialize_options(self):
        self.build_lib = self.build_temp = None

    def finalize_options(self):
        self.set_undefined_options("build", ("build_lib", "build_lib"), ("build_temp", "build_temp"))

    def run(self):
        source = Path(__file__).resolve().parent
        tree = Path(self.build_temp).resolve() / "cmake"  # kept between builds: a rebuild is incremental
        cmake = os.environ.get("CMAKE", "cmake")
        self.spawn([cmake, "-S", str(source), "-B", str(tree), "-DCMAKE_BUILD_TYPE=Release",
                    *shlex.split(os.environ.get("FLASHCHECK_CMAKE_ARGS", ""))])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        self.spawn([cmake, "--build", str(tree), "--parallel", jobs, "--target", *TARGETS])
        dest = Path(self.build_lib) / "flashcheck" / "_native"
        dest.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.copy2(tree / name, dest / name)  # keeps the CLI executable


class build_with_native(build):
    sub_commands = build.sub_commands + [("build_native", None)]


class with_machine_code(Distribution):
    """The package carries machine code: installed as platform files (platlib), in a platform wheel."""

    def has_ext_modules(self):
        return True


class platform_wheel(bdist_wheel):
    """Machine code but no Python extension: any Python 3, this platform only."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


# build_base: the default, build/, is the README's CMake build directory.
setup(distclass=with_machine_code,
      cmdclass={"build": build_with_native, "build_native": build_native, "bdist_wheel": platform_wheel},
      options={"build": {"build_base": "build-python"}})
