"""The wheel's native part (pyproject.toml; docs/pytorch.md, "Install"): build_ext runs the repository's
CMake for two targets, fsdp_torch_extension (fsdp_runtime._C, which links the project's libraries
statically, so it needs nothing beside it but system libraries and torch's) and fsdp-run (the launcher
that serves the rendezvous, installed to <prefix>/bin). The build needs the repository around python/:
pip builds in place (pip >= 21.3), an sdist alone cannot build.

Environment:
  FSDP_BUILD_DIR   a configured build of this repository to reuse (make's `build`; an absolute path: pip
                   runs this file from python/, not from where it was called): only the two targets
                   are brought up to date there (a no-op once make has built them), and setuptools' own
                   build files go to $FSDP_BUILD_DIR/python-wheel instead of python/build
  FSDP_BUILD_JOBS  parallel compile jobs (default: CMake's generator default)
Without FSDP_BUILD_DIR the project is configured once in build-python/ at the repository root
(RelWithDebInfo as make's build, no tests) and built there: beside make's build/, at the same depth, so
the compile commands match make's and a warm ccache (base_dir above the repository) serves them; from
nothing, minutes on two cores. The copies in the wheel leave the debug sections out.
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REUSED_BUILD = os.environ.get("FSDP_BUILD_DIR")
if REUSED_BUILD and not os.path.isabs(REUSED_BUILD):
    sys.exit(f"fsdp_runtime: FSDP_BUILD_DIR={REUSED_BUILD} must be an absolute path (pip builds from {HERE})")
BUILD_BASE = Path(REUSED_BUILD, "python-wheel").resolve() if REUSED_BUILD else HERE / "build"
LAUNCHER = BUILD_BASE / "bin" / "fsdp-run"  # staged by build_ext, installed by data_files


def project_version():
    cmake_lists = ROOT / "CMakeLists.txt"
    if not cmake_lists.exists():
        sys.exit(f"fsdp_runtime: {cmake_lists} not found: build from the repository (pip install ./python), "
                 "not from an sdist")
    return re.search(r"project\(fsdp_runtime VERSION ([0-9.]+)", cmake_lists.read_text()).group(1)


def run(cmd):
    print("fsdp_runtime:", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


def copy_binary(src, dst):
    """Copies without debug sections (a RelWithDebInfo _C is ~100 MB, ~5 MB without)."""
    if not src.exists():
        sys.exit(f"fsdp_runtime: {src} was not built")
    dst.parent.mkdir(parents=True, exist_ok=True)
    strip = shutil.which("strip")
    if strip:
        run([strip, "--strip-debug", "-o", dst, src])
    else:
        shutil.copy2(src, dst)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = self.cmake_build_dir()
        jobs = ["-j", os.environ["FSDP_BUILD_JOBS"]] if os.environ.get("FSDP_BUILD_JOBS") else []
        run(["cmake", "--build", build, "--target", "fsdp_torch_extension", "fsdp-run"] + jobs)
        # The name this Python imports; a build configured for another Python (FSDP_TORCH_PYTHON) lacks it.
        built = build / "python" / "fsdp_runtime" / f"_C{sysconfig.get_config_var('EXT_SUFFIX')}"
        copy_binary(built, Path(self.get_ext_fullpath(ext.name)))
        copy_binary(build / "launch" / "fsdp-run", LAUNCHER)

    def cmake_build_dir(self):
        if REUSED_BUILD:
            build = Path(REUSED_BUILD).resolve()
            if not (build / "CMakeCache.txt").exists():
                sys.exit(f"fsdp_runtime: FSDP_BUILD_DIR={build} is not a configured build (cmake -S . -B {build})")
            return build
        build = ROOT / "build-python"
        cache = build / "CMakeCache.txt"
        python = f"FSDP_TORCH_PYTHON:FILEPATH={sys.executable}\n"
        # Configured again when pip runs under another Python (a new venv): the cached one may be gone.
        if not cache.exists() or python not in cache.read_text():
            generator = [] if cache.exists() or not shutil.which("ninja") else ["-G", "Ninja"]
            run(["cmake", "-S", ROOT, "-B", build, *generator, "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DBUILD_TESTING=OFF",
                 f"-DFSDP_TORCH_PYTHON={sys.executable}", "-DFSDP_REQUIRE_TORCH=ON"])
        return build


BUILD_BASE.mkdir(parents=True, exist_ok=True)  # egg_info needs its folder
setup(
    version=project_version(),
    packages=["fsdp_runtime", "fsdp_runtime.models"],  # not csrc/ (compiled by CMake) nor bench/
    ext_modules=[Extension("fsdp_runtime._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    data_files=[("bin", [str(LAUNCHER)])],
    options={"build": {"build_base": str(BUILD_BASE)}, "egg_info": {"egg_base": str(BUILD_BASE)}},
)
