"""Build hooks for Kiln's wheel (the metadata is in pyproject.toml).

``pip wheel .`` / ``python -m build`` / ``pip install .`` give a platform wheel holding:

- ``kiln._ffi``: the Python binding of the C runtime, compiled by cffi's setuptools integration
  from ``runtime_c/build_ffi.py`` (the very builder ``make runtime`` uses);
- ``kiln/lib/libkiln_runtime.so`` and ``.a``: the C runtime, built by ``runtime_c/Makefile`` in a
  copy under the build directory, so a stale ``runtime_c/build`` in a working tree never leaks
  into a wheel;
- ``kiln/lib/libkiln_strings.so``: the string operators' library, for C programs running models
  with string inputs (the Python extension carries the same code);
- ``kiln/include/``: ``kiln_runtime.h``, ``kiln_kernel_abi.h``, ``dlpack.h``, ``kiln_strings.h``
  and ``kiln.hpp``;
- ``kiln/lib/pkgconfig/kiln.pc`` and ``kiln/lib/cmake/Kiln/`` (``find_package(Kiln)``), written
  with paths relative to themselves so an installed tree can be moved;
- ``kiln/java/kiln.jar`` with the JNI library inside it, when a JDK (javac, jar) is found
  (``KILN_BUILD_JAVA=0`` leaves it out).

``kiln.libinfo`` and ``kiln config`` say where these are. An editable install (``make``) builds
only the extension; ``kiln.libinfo`` then points into the checkout (``runtime_c/build``, ...).
"""
import glob
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile

from setuptools import setup
from setuptools.command.build import build
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
# Installed headers: the C runtime's public API and the C++ header-only binding.
C_HEADERS = ["runtime_c/include/kiln_runtime.h", "runtime_c/include/kiln_kernel_abi.h",
             "runtime_c/include/dlpack.h", "runtime_c/include/kiln_strings.h",
             "bindings/cpp/kiln.hpp"]
# Installed libraries (kiln/lib): the runtime, and the string library a C program loads beside
# it to run models with string operators (docs/strings.md; it finds libkiln_runtime.so next to
# itself through its $ORIGIN run path). Python has the string code in kiln._ffi already.
C_LIBRARIES = ["libkiln_runtime.so", "libkiln_runtime.a", "libkiln_strings.so"]


def _version():
    # One version, kiln.__version__; pyproject.toml reads the same attribute.
    text = open(os.path.join(ROOT, "compiler", "kiln", "__init__.py")).read()
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


PKG_CONFIG = """\
# Kiln's C runtime. Paths are relative to this file (kiln/lib/pkgconfig in site-packages).
prefix=${{pcfiledir}}/../..
includedir=${{prefix}}/include
libdir=${{prefix}}/lib

Name: kiln
Description: Kiln runtime: loads and runs models compiled by Kiln
Version: {version}
Cflags: -I${{includedir}}
Libs: -L${{libdir}} -lkiln_runtime
Libs.private: -lm -lpthread -ldl
"""

CMAKE_CONFIG = """\
# find_package(Kiln): the Kiln C runtime and headers of an installed Kiln {version}.
#   cmake -DKiln_DIR="$(kiln config --cmakedir)" ...
#   target_link_libraries(app PRIVATE Kiln::runtime)          # libkiln_runtime.so
#   target_link_libraries(app PRIVATE Kiln::runtime_static)   # libkiln_runtime.a
# Both carry the include directory (kiln_runtime.h, kiln.hpp). Paths are relative to this file,
# which lies in kiln/lib/cmake/Kiln of site-packages.
get_filename_component(_kiln_prefix "${{CMAKE_CURRENT_LIST_DIR}}/../../.." ABSOLUTE)
set(Kiln_VERSION {version})
set(Kiln_INCLUDE_DIRS "${{_kiln_prefix}}/include")
set(Kiln_LIBRARY "${{_kiln_prefix}}/lib/libkiln_runtime.so")
set(Kiln_STATIC_LIBRARY "${{_kiln_prefix}}/lib/libkiln_runtime.a")
include(CMakeFindDependencyMacro)
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_dependency(Threads)
if(NOT TARGET Kiln::runtime)
  add_library(Kiln::runtime SHARED IMPORTED)
  set_target_properties(Kiln::runtime PROPERTIES
    IMPORTED_LOCATION "${{Kiln_LIBRARY}}"
    INTERFACE_INCLUDE_DIRECTORIES "${{Kiln_INCLUDE_DIRS}}")
endif()
if(NOT TARGET Kiln::runtime_static)
  add_library(Kiln::runtime_static STATIC IMPORTED)
  set_target_properties(Kiln::runtime_static PROPERTIES
    IMPORTED_LOCATION "${{Kiln_STATIC_LIBRARY}}"
    INTERFACE_INCLUDE_DIRECTORIES "${{Kiln_INCLUDE_DIRS}}"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;m;${{CMAKE_DL_LIBS}}")
endif()
set(Kiln_FOUND TRUE)
unset(_kiln_prefix)
"""

# Same major version and at least the requested one (0.x: same minor too, as semver says).
CMAKE_CONFIG_VERSION = """\
set(PACKAGE_VERSION {version})
set(PACKAGE_VERSION_COMPATIBLE FALSE)
if(NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION
   AND PACKAGE_FIND_VERSION_MAJOR EQUAL {major}
   AND (NOT {major} EQUAL 0 OR PACKAGE_FIND_VERSION_MINOR EQUAL {minor}))
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
  set(PACKAGE_VERSION_EXACT TRUE)
endif()
"""


def _run(cmd, what):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building Kiln's {what} failed: {' '.join(cmd)}\n"
                           f"{proc.stdout}{proc.stderr}")


def _copy_tree(rel_dirs, files, dest):
    """Copies the named source folders and files of the repository into ``dest`` (the sources
    only: build outputs of a working tree are left behind)."""
    for d in rel_dirs:
        shutil.copytree(os.path.join(ROOT, d), os.path.join(dest, d),
                        ignore=shutil.ignore_patterns("build", "__pycache__", "*.o", "*.so", "*.a"))
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, f), os.path.join(dest, f))


class KilnBuild(build):
    """``build`` starting from an empty build/lib, so files of an earlier build (a module since
    removed, another platform's extension) never reach the wheel."""

    def run(self):
        if not getattr(self, "editable_mode", False) and os.path.isdir(self.build_lib):
            shutil.rmtree(self.build_lib)
        super().run()


class KilnBuildPy(build_py):
    """``build_py`` plus the C runtime, headers, pkg-config / CMake files and the jar under
    kiln/ in the build tree (not in an editable install: it uses the checkout's own)."""

    def run(self):
        super().run()
        if self.editable_mode:
            return
        pkg = os.path.join(self.build_lib, "kiln")
        with tempfile.TemporaryDirectory(prefix="kiln-native-") as tmp:
            self._build_runtime(tmp, pkg)
            self._build_java(tmp, pkg)

    def _build_runtime(self, tmp, pkg):
        _copy_tree(["runtime_c/include", "runtime_c/src", "runtime_c/tools", "runtime_c/cuda",
                    "runtime_c/strings"],
                   ["runtime_c/Makefile"], tmp)
        make = os.environ.get("MAKE", "make")
        if shutil.which(make) is None:
            raise RuntimeError("building Kiln needs `make` and a C compiler (cc) for its C runtime")
        _run([make, "-s", "-C", os.path.join(tmp, "runtime_c"), "all"], "C runtime")
        lib, inc = os.path.join(pkg, "lib"), os.path.join(pkg, "include")
        os.makedirs(lib, exist_ok=True)
        os.makedirs(inc, exist_ok=True)
        for name in C_LIBRARIES:
            shutil.copyfile(os.path.join(tmp, "runtime_c", "build", name), os.path.join(lib, name))
        for h in C_HEADERS:
            shutil.copyfile(os.path.join(ROOT, h), os.path.join(inc, os.path.basename(h)))
        version = _version()
        major, minor = version.split(".")[:2]
        for rel, text in (("pkgconfig/kiln.pc", PKG_CONFIG),
                          ("cmake/Kiln/KilnConfig.cmake", CMAKE_CONFIG),
                          ("cmake/Kiln/KilnConfigVersion.cmake", CMAKE_CONFIG_VERSION)):
            path = os.path.join(lib, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text.format(version=version, major=major, minor=minor))

    def _build_java(self, tmp, pkg):
        # The jar is optional: a machine without a JDK still gets a working wheel.
        if os.environ.get("KILN_BUILD_JAVA", "1") == "0" or not (shutil.which("javac") and shutil.which("jar")):
            self.announce("no JDK (javac, jar): the wheel carries no kiln.jar", level=3)
            return
        _copy_tree(["bindings/java/src"], ["bindings/java/Makefile"], tmp)
        java = os.path.join(tmp, "bindings", "java")
        # bindings/java's make builds the platform jar (kiln-VERSION-OS-ARCH.jar): the classes
        # and libkiln_jni.so as a resource, which ai.kiln.Native loads when it is not on
        # java.library.path, so the jar alone is the Java binding.
        _run([os.environ.get("MAKE", "make"), "-s", "-C", java, "all", f"VERSION={_version()}"],
             "Java binding")
        jars = glob.glob(os.path.join(java, "build", "kiln-*-*.jar"))
        if len(jars) != 1:
            raise RuntimeError(f"building Kiln's Java binding: expected one platform jar, got {jars}")
        os.makedirs(os.path.join(pkg, "java"), exist_ok=True)
        shutil.copyfile(jars[0], os.path.join(pkg, "java", "kiln.jar"))


class KilnBuildExt(build_ext):
    """cffi's ``build_ext``, with two changes: no debug info (it would record the build
    directory's paths in the installed extension), and an in-place copy (editable install)
    that replaces the file atomically, because running interpreters have the old one mapped
    and truncating it under them would crash them."""

    def finalize_options(self):
        super().finalize_options()
        # build_ffi.py names the runtime's C files by absolute path; setuptools takes only paths
        # relative to setup.py (it lists them in the sdist's manifest).
        for ext in self.extensions:
            ext.sources = [os.path.relpath(s, ROOT) if os.path.isabs(s) and s.startswith(ROOT + os.sep)
                           else s for s in ext.sources]
            ext.include_dirs = [os.path.relpath(d, ROOT) if d.startswith(ROOT + os.sep) else d
                                for d in ext.include_dirs]

    def build_extension(self, ext):
        ext.extra_compile_args = list(ext.extra_compile_args or []) + ["-g0"]
        super().build_extension(ext)

    def copy_extensions_to_source(self):
        build_py_cmd = self.get_finalized_command("build_py")
        for ext in self.extensions:
            inplace_file, regular_file = self._get_inplace_equivalent(build_py_cmd, ext)
            # The name `python runtime_c/build_ffi.py` (make runtime) writes, so a checkout holds
            # one extension whichever built it last (the import system would prefer this
            # interpreter-specific name over a separate .abi3.so).
            inplace_file = os.path.join(os.path.dirname(inplace_file),
                                        "_ffi" + sysconfig.get_config_var("EXT_SUFFIX"))
            staged = f"{inplace_file}.{os.getpid()}.tmp"
            shutil.copyfile(regular_file, staged)
            os.replace(staged, inplace_file)


setup(
    # cffi compiles the extension against the stable ABI (kiln/_ffi.abi3.so), so one wheel
    # serves every CPython >= 3.10 on its platform: tag it so (cp310-abi3-<platform>).
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
    cffi_modules=["runtime_c/build_ffi.py:make_ffibuilder"],
    cmdclass={"build": KilnBuild, "build_py": KilnBuildPy, "build_ext": KilnBuildExt},
)
