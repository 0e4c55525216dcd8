"""Where Kiln keeps its C runtime, headers and Java binding: what a C, C++ or Java program
builds against.

An installed Kiln (a wheel) carries them inside the package::

    kiln/include/       kiln_runtime.h, kiln_kernel_abi.h, dlpack.h, kiln.hpp
    kiln/lib/           libkiln_runtime.so, libkiln_runtime.a
    kiln/lib/pkgconfig/ kiln.pc
    kiln/lib/cmake/Kiln/ KilnConfig.cmake (find_package(Kiln))
    kiln/java/          kiln.jar (the JNI library inside), when built with a JDK

In a source checkout (an editable install, ``make``) they are where the checkout builds them:
``runtime_c/include``, ``bindings/cpp``, ``runtime_c/build``, ``bindings/java/build``.

``kiln config`` prints the same from the command line (``kiln config --cflags --libs``).
"""
from __future__ import annotations

import os
import sys
from typing import List

__all__ = ["include_dir", "include_dirs", "lib_dir", "runtime_library", "jar_path", "cmake_dir",
           "pkgconfig_dir", "cflags", "libs", "installed"]

_PKG = os.path.dirname(os.path.abspath(__file__))
# Libraries a program linking the static runtime needs besides libc (dl: kiln_module_load_library).
_SYSTEM_LIBS = ["-lm", "-lpthread", "-ldl"]


def installed() -> bool:
    """True when this Kiln carries its own runtime and headers (a wheel install); False in a
    source checkout, whose build folders are used instead."""
    return os.path.isfile(os.path.join(_PKG, "include", "kiln_runtime.h"))


def _checkout() -> str:
    # compiler/kiln/ -> the repository root, recognised by the runtime's sources.
    root = os.path.dirname(os.path.dirname(_PKG))
    if not os.path.isfile(os.path.join(root, "runtime_c", "include", "kiln_runtime.h")):
        raise FileNotFoundError(
            f"this Kiln ({_PKG}) has neither installed headers and libraries (kiln/include, "
            "kiln/lib) nor a source checkout around it; reinstall it from a wheel")
    return root


def include_dir() -> str:
    """The folder holding ``kiln_runtime.h`` (and, in an installed Kiln, ``kiln.hpp``)."""
    if installed():
        return os.path.join(_PKG, "include")
    return os.path.join(_checkout(), "runtime_c", "include")


def include_dirs() -> List[str]:
    """Every folder a C or C++ program needs on its include path: ``kiln_runtime.h`` and its
    headers, and the C++ header ``kiln.hpp`` (one folder when installed, two in a checkout)."""
    if installed():
        return [include_dir()]
    return [include_dir(), os.path.join(_checkout(), "bindings", "cpp")]


def lib_dir() -> str:
    """The folder holding ``libkiln_runtime.so`` and ``libkiln_runtime.a``."""
    if installed():
        return os.path.join(_PKG, "lib")
    return os.path.join(_checkout(), "runtime_c", "build")


def runtime_library(kind: str = "shared") -> str:
    """The path of the C runtime library: ``kind`` is ``"shared"`` (``libkiln_runtime.so``) or
    ``"static"`` (``libkiln_runtime.a``). Raises FileNotFoundError when it is not built (in a
    checkout: ``make -C runtime_c``)."""
    names = {"shared": "libkiln_runtime.so", "static": "libkiln_runtime.a"}
    if kind not in names:
        raise ValueError(f"runtime_library: kind must be 'shared' or 'static', got {kind!r}")
    path = os.path.join(lib_dir(), names[kind])
    if not os.path.isfile(path):
        hint = "" if installed() else " (build it with `make -C runtime_c` in the checkout)"
        raise FileNotFoundError(f"the Kiln runtime library {path} does not exist{hint}")
    return path


def jar_path() -> str:
    """The path of ``kiln.jar``, the Java binding (its JNI library is inside it when installed).
    Raises FileNotFoundError when Kiln was built without a JDK."""
    if installed():
        path = os.path.join(_PKG, "java", "kiln.jar")
        hint = " (this Kiln was built where no JDK, javac and jar, was found)"
    else:
        path = os.path.join(_checkout(), "bindings", "java", "build", "kiln.jar")
        hint = " (build it with `make java` in the checkout)"
    if not os.path.isfile(path):
        raise FileNotFoundError(f"the Kiln Java binding {path} does not exist{hint}")
    return path


def cmake_dir() -> str:
    """The folder holding ``KilnConfig.cmake``: pass it as ``-DKiln_DIR=...`` (or its prefix,
    ``kiln/``, in ``CMAKE_PREFIX_PATH``) for ``find_package(Kiln)``. Installed Kiln only."""
    path = os.path.join(_PKG, "lib", "cmake", "Kiln")
    if not os.path.isfile(os.path.join(path, "KilnConfig.cmake")):
        raise FileNotFoundError("KilnConfig.cmake is installed with a Kiln wheel only; in a "
                                "checkout use `kiln config --cflags --libs`")
    return path


def pkgconfig_dir() -> str:
    """The folder holding ``kiln.pc``: add it to ``PKG_CONFIG_PATH`` for ``pkg-config kiln``.
    Installed Kiln only."""
    path = os.path.join(_PKG, "lib", "pkgconfig")
    if not os.path.isfile(os.path.join(path, "kiln.pc")):
        raise FileNotFoundError("kiln.pc is installed with a Kiln wheel only; in a checkout use "
                                "`kiln config --cflags --libs`")
    return path


def cflags() -> List[str]:
    """Compiler flags for a program using ``kiln_runtime.h`` or ``kiln.hpp`` (``-I...``)."""
    return ["-I" + d for d in include_dirs()]


def libs(static: bool = False) -> List[str]:
    """Linker flags for the runtime. Shared: ``-L<dir> -lkiln_runtime`` plus an rpath to that
    folder, so the program finds the library where Kiln is installed without LD_LIBRARY_PATH.
    Static: the archive itself and the system libraries it needs; the program then depends on
    nothing of Kiln at run time."""
    if static:
        return [runtime_library("static")] + _SYSTEM_LIBS
    d = lib_dir()
    return ["-L" + d, "-Wl,-rpath," + d, "-lkiln_runtime"] + _SYSTEM_LIBS


# ---- `kiln config` ----------------------------------------------------------------------------
# (option, help, what it prints); printed in this order, one line each, whatever order they came.
_CONFIG_DIRS = [
    ("includedir", "the folder of kiln_runtime.h and kiln.hpp", include_dir),
    ("libdir", "the folder of libkiln_runtime.so and .a", lib_dir),
    ("cmakedir", "the folder of KilnConfig.cmake (cmake -DKiln_DIR=...)", cmake_dir),
    ("pkgconfigdir", "the folder of kiln.pc (PKG_CONFIG_PATH)", pkgconfig_dir),
    ("jar", "the path of kiln.jar", jar_path),
]


def add_config_command(sub) -> None:
    """Adds ``kiln config`` to the CLI's subcommands ``sub`` (an argparse subparsers object)."""
    c = sub.add_parser("config", help="print flags and paths for building C, C++ and Java programs "
                       "against the Kiln runtime",
                       description="Print what a program needs to build against this Kiln's C "
                       "runtime, pkg-config style: `cc app.c $(kiln config --cflags --libs)`, "
                       "or with the static runtime `kiln config --cflags --libs --static`. "
                       "Without options: every path and flag, one per line.")
    c.add_argument("--cflags", action="store_true", help="compiler flags (-I...)")
    c.add_argument("--libs", action="store_true", help="linker flags for the runtime")
    c.add_argument("--static", action="store_true", help="with --libs: link libkiln_runtime.a "
                   "(the program then needs nothing of Kiln at run time)")
    for opt, text, _ in _CONFIG_DIRS:
        c.add_argument("--" + opt, action="store_true", help=text)
    c.set_defaults(func=cmd_config)


def cmd_config(args) -> int:
    """``kiln config``: prints the requested flags (on one line) and paths (one per line)."""
    flags = (cflags() if args.cflags else []) + (libs(static=args.static) if args.libs else [])
    wanted = [(opt, fn) for opt, _, fn in _CONFIG_DIRS if getattr(args, opt)]
    try:
        if not flags and not wanted:   # a summary: what exists here, and what does not
            from . import __version__
            print(f"version: {__version__}")
            print(f"installed: {'yes' if installed() else 'no (source checkout)'}")
            for opt, _, fn in _CONFIG_DIRS:
                try:
                    print(f"{opt}: {fn()}")
                except FileNotFoundError as e:
                    print(f"{opt}: (none: {e})")
            print(f"cflags: {' '.join(cflags())}")
            print(f"libs: {' '.join(libs())}")
            print(f"libs --static: {' '.join(libs(static=True))}")
            return 0
        if flags:
            print(" ".join(flags))
        for _, fn in wanted:
            print(fn())
    except FileNotFoundError as e:
        print(f"kiln config: error: {e}", file=sys.stderr)
        return 1
    return 0
