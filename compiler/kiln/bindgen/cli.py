"""``kiln export-bindings model.so --lang c,cpp,java [-o DIR] [--name NAME]``: the typed
bindings of a shipped library (``kiln.bindgen.write_bindings`` on the executable it holds)."""
from __future__ import annotations

import os


def add_export_bindings_command(sub) -> None:
    """Adds ``kiln export-bindings`` to the CLI's subcommands ``sub`` (argparse subparsers)."""
    e = sub.add_parser("export-bindings", help="write typed C, C++ and Java bindings for a compiled library",
                       description="Write, for each function of the model, a typed wrapper: "
                       "NAME_bindings.h (C), NAME.hpp (C++, over the C one and kiln.hpp), "
                       "NameModel.java (Java, over ai.kiln).")
    e.add_argument("library", help="the model.so written by kiln compile / export_library")
    e.add_argument("--lang", default="c,cpp,java", help="comma-separated: c, cpp, java (default all)")
    e.add_argument("-o", "--output", default=".", help="directory to write into (default .)")
    e.add_argument("--name", help="model name, a C identifier (default: the library's file name)")
    e.add_argument("--java-package", help="package of the Java class (default: none)")
    e.set_defaults(func=cmd_export_bindings)


def cmd_export_bindings(args) -> int:
    from ..cli import CLIError, _check_library
    from . import BindgenError, write_bindings
    spec = _check_library(args.library)
    name = args.name or os.path.splitext(os.path.basename(args.library))[0].replace("-", "_")
    langs = [lang.strip() for lang in args.lang.split(",") if lang.strip()]
    try:
        paths = write_bindings(spec, args.output, name, langs, java_package=args.java_package)
    except BindgenError as e:
        raise CLIError(f"{args.library}: {e}") from None
    for lang, path in paths.items():
        print(f"{lang}: {path}")
    return 0
