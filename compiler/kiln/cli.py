"""The ``kiln`` command line: compile an ONNX model into one shared library, and inspect, run or
time a compiled library.

    kiln compile model.onnx -o model.so [--target llvm] [--pipeline default] [--shape x=1,3,224,224]
                                        [--tuning-db tuning.jsonl]
    kiln compile model.pt2 -o model.so   (a program saved with torch.export.save)
    kiln tune model.onnx --db tuning.jsonl [--trials N] [--time 10m] [--threads N]
              [--scheduler tcp://host:8786] [--plot curve.png]
    kiln inspect model.so [--disassemble]
    kiln run model.so --input x=x.npy [--output y.npy]      (or --random for seeded inputs)
    kiln bench model.so [--threads 1] [--repeat 20] [--profile]
    kiln export-bindings model.so --lang c,cpp,java [-o DIR] [--name mlp]
    kiln config [--cflags] [--libs [--static]] [--includedir] [--libdir] [--cmakedir] [--jar]

Results go to stdout, progress of the long steps to stderr. Exit status: 0 on success, 1 when
the work failed (the message names what: the ONNX node, the input, the file), 2 on a usage
error.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Dict, List, Optional, Sequence


class CLIError(Exception):
    """A failure reported as ``kiln <command>: error: <message>`` with exit status 1."""


# ---- helpers ---------------------------------------------------------------------------------
def _progress(quiet: bool):
    """``step(msg)``: a context manager printing ``msg ...`` and then the time it took, on stderr."""
    @contextlib.contextmanager
    def step(msg: str):
        if not quiet:
            print(f"kiln: {msg} ...", end="", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            yield
        except BaseException:
            if not quiet:
                print(" failed", file=sys.stderr, flush=True)
            raise
        if not quiet:
            print(f" done ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    return step


def _parse_shape(text: str) -> tuple:
    """``name=1,3,224,224`` -> ``("name", (1, 3, 224, 224))``."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=D0,D1,... (e.g. x=1,3,224,224), got {text!r}")
    try:
        shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"dimensions of {name!r} must be integers, got {dims!r}") from None
    if any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"dimensions of {name!r} must be >= 0, got {dims!r}")
    return name, shape


def _parse_value(text: str) -> tuple:
    """``name=16000`` or ``name=1,2,3`` -> ``("name", array)`` (ints if every item is one)."""
    import numpy as np
    name, sep, items = text.partition("=")
    if not sep or not name or not items.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE or NAME=V0,V1,... (e.g. sr=16000), got {text!r}")
    parts = [p.strip() for p in items.split(",") if p.strip()]
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        try:
            vals = [float(p) for p in parts]
        except ValueError:
            raise argparse.ArgumentTypeError(f"values of {name!r} must be numbers, got {items!r}") from None
    return name, np.array(vals[0] if len(vals) == 1 and "," not in items else vals)


def _parse_input(text: str) -> tuple:
    """``name=file.npy`` -> ``("name", "file.npy")``."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE.npy, got {text!r}")
    return name, path


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _parse_bound(text: str) -> tuple:
    name, _, value = text.partition("=")
    try:
        n = int(value)
    except ValueError:
        n = -1
    if not name or n < 0:
        raise argparse.ArgumentTypeError(f"expected DIM=N with N a non-negative integer, got {text!r}")
    return name, n


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _check_library(path: str):
    """The ``ExecutableSpec`` of the compiled library at ``path``, or a CLIError saying why not."""
    from .executable import FormatError, load_spec
    if not os.path.isfile(path):
        raise CLIError(f"{path}: no such file")
    try:
        return load_spec(os.path.abspath(path))
    except OSError as e:
        raise CLIError(f"{path}: cannot load as a shared library: {e}") from None
    except (ValueError, FormatError) as e:
        raise CLIError(f"{path}: {e}") from None


def _function(spec, name: Optional[str]):
    public = [f for f in spec.functions if not f.private]
    names = [f.name for f in public]
    if name is None:
        if len(names) != 1:
            raise CLIError(f"the library has functions {names}; pick one with --function")
        return public[0]
    if name not in names:
        raise CLIError(f"no function {name!r}; the library has {names}")
    return spec.function(name)


def _inputs(fn, given: Dict[str, str], random: bool, seed: int, shapes: Dict[str, tuple]) -> List:
    """The arguments of graph function ``fn``: arrays loaded from .npy files, or seeded random
    ones (``--random``) with symbolic dims taken from ``--shape``."""
    import numpy as np
    unknown = set(given) - {p.name for p in fn.params}
    if unknown:
        raise CLIError(f"{fn.name} has no input(s) {sorted(unknown)}; its inputs are "
                       f"{[p.name for p in fn.params]}")
    rng = np.random.default_rng(seed)
    args = []
    for p in fn.params:
        if p.name in given:
            try:
                a = np.load(given[p.name], allow_pickle=False)
            except (OSError, ValueError) as e:
                raise CLIError(f"input {p.name!r}: cannot read {given[p.name]!r}: {e}") from None
            args.append(a)
            continue
        if not random:
            raise CLIError(f"input {p.name!r} ({p.dtype}{_fmt_shape(p.shape)}) is not given; pass "
                           f"--input {p.name}=FILE.npy or --random")
        shape = shapes.get(p.name)
        if shape is None:
            if any(isinstance(d, str) for d in p.shape):
                raise CLIError(f"input {p.name!r} has symbolic shape {_fmt_shape(p.shape)}; pin it "
                               f"with --shape {p.name}=D0,D1,...")
            shape = tuple(p.shape)
        if p.dtype.startswith("float"):
            a = rng.standard_normal(shape).astype(p.dtype)
        elif p.dtype == "bool":
            a = rng.integers(0, 2, size=shape).astype(bool)
        else:
            a = rng.integers(0, 2, size=shape).astype(p.dtype)
        args.append(a)
    return args


def _vm(path: str):
    import kiln
    return kiln.VirtualMachine(os.path.abspath(path), kiln.cpu())


# ---- commands --------------------------------------------------------------------------------
def _import_model(args, step):
    """The ONNX model (``--shape``, ``--const-input``) or torch.export program ``args.model``
    imported with its weights bound (``--bound`` applied): an IRModule ready for a pipeline."""
    if not os.path.isfile(args.model):
        raise CLIError(f"{args.model}: no such file")
    if args.model.endswith(".pt2"):
        mod = _import_torch_program(args, step)
    elif not args.model.endswith(".onnx"):
        raise CLIError(f"{args.model}: only ONNX models (.onnx) and torch.export programs (.pt2) can be "
                       f"{args.command}d from the command line")
    else:
        mod = _import_onnx(args, step)
    if getattr(args, "bound", None):
        from .ir.derived_dims import with_bounds
        try:
            mod = with_bounds(mod, dict(args.bound))
        except ValueError as e:
            raise CLIError(f"--bound: {e}") from None
    return mod


def _import_torch_program(args, step):
    """A program saved with ``torch.export.save``, its weights bound (the Dims' bounds come with
    it, and their names when saved with ``kiln.frontend.torch.save``; --shape and --const-input
    do not apply)."""
    import kiln
    if args.shape or getattr(args, "const_input", None):
        raise CLIError(f"{args.model}: --shape and --const-input apply to ONNX models; a torch.export "
                       "program fixes its shapes (and dynamic dims) when exported")
    try:
        from .frontend.torch import TorchImportError
    except ImportError as e:
        raise CLIError(f"{args.model}: importing a torch.export program needs torch ({e})") from None
    with step(f"loading and importing {args.model}"):
        try:
            mod, params = kiln.frontend.torch.load(args.model)
        except TorchImportError as e:
            msg = str(e)
            raise CLIError(msg if msg.startswith(args.model) else f"{args.model}: {msg}") from None
    with step(f"binding {len(params)} weights"):
        return kiln.transform.bind_params("main", params)(mod)


def _import_onnx(args, step):
    import kiln
    from .frontend.onnx.common import ONNXImportError
    from .frontend.onnx.external_data import load_model
    with step(f"loading {args.model}"):
        try:
            # Weights in external files are memory-mapped, not read (external_data.py).
            model, mapped = load_model(args.model)
        except ONNXImportError as e:
            raise CLIError(f"{args.model}: {e}") from None
        except Exception as e:  # protobuf's DecodeError and friends
            raise CLIError(f"{args.model}: not a readable ONNX model: {e}") from None
    shapes = dict(args.shape or [])
    with step("importing"):
        try:
            mod, params = kiln.frontend.from_onnx(model, shape_dict=shapes or None,
                                                  const_inputs=dict(args.const_input or []) or None,
                                                  mapped_initializers=mapped)
        except ONNXImportError as e:
            raise CLIError(f"{args.model}: {e}") from None
    with step(f"binding {len(params)} weights"):
        return kiln.transform.bind_params("main", params)(mod)


def cmd_compile(args) -> int:
    import kiln
    from .codegen import BuildOptions
    from .transform import PassContext
    step = _progress(args.quiet)
    mod = _import_model(args, step)
    out = args.output or os.path.splitext(os.path.basename(args.model))[0] + ".so"
    if args.tuning_db and not os.path.isfile(args.tuning_db):
        raise CLIError(f"--tuning-db {args.tuning_db}: no such file")
    with step(f"running pipeline {args.pipeline!r}"):
        try:
            ctx = PassContext(tuning_db=args.tuning_db, cache_dir=args.cache_dir)
            pipeline = kiln.get_pipeline(args.pipeline, ctx, target=args.target)
        except ValueError as e:
            raise CLIError(str(e)) from None
        except Exception as e:
            if type(e).__name__ == "CodegenError":   # a bad --target
                raise CLIError(str(e)) from None
            raise
        mod = pipeline(mod)
    if args.tuning_db and not args.quiet:
        from .tune.apply import describe_applied
        print(f"kiln: {describe_applied(mod)}", file=sys.stderr)
    options = BuildOptions(cache_dir=args.cache_dir) if args.cache_dir else None
    with step(f"compiling for {args.target!r}"):
        try:
            ex = kiln.compile(mod, target=args.target, options=options, tuning_db=args.tuning_db)
        except Exception as e:
            if type(e).__name__ == "CodegenError":
                raise CLIError(str(e)) from None
            raise
    ex.export_library(out)
    s = ex.stats
    print(f"wrote {out}: {s.num_kernels} kernels, constants {_fmt_bytes(s.constant_bytes)}, "
          f"arena {_fmt_bytes(s.arena_size)}, target {ex.target!r}")
    return 0


def _parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1.5h`` -> seconds."""
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}
    try:
        if t and t[-1] in mult:
            v = float(t[:-1]) * mult[t[-1]]
        else:
            v = float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 90s, 10m or 1h, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"the duration must be positive, got {text!r}")
    return v


def cmd_tune(args) -> int:
    import kiln
    from .transform import PassContext
    step = _progress(args.quiet)
    mod = _import_model(args, step)
    if args.trials is not None and args.trials < 1:
        raise CLIError(f"--trials must be at least 1, got {args.trials}")
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be at least 1, got {args.threads}")
    executor = None
    try:
        if args.scheduler:
            from .tune.dask_executor import DaskExecutor
            try:
                executor = DaskExecutor(args.scheduler)
            except (ImportError, OSError) as e:
                raise CLIError(f"--scheduler {args.scheduler}: {e}") from None
        report = kiln.tune(mod, target=args.target, db=args.db, trials=args.trials,
                           time_budget_s=args.time, num_threads=args.threads,
                           ctx=PassContext(), progress=not args.quiet, executor=executor)
    except Exception as e:
        if type(e).__name__ in ("CodegenError", "NoWorkerError"):   # a bad --target, no worker
            raise CLIError(str(e)) from None
        raise
    finally:
        if executor is not None:
            executor.close()
    print(report)
    print(f"records in {args.db}; compile with: kiln compile {args.model} --tuning-db {args.db}"
          + (f" --target '{args.target}'" if args.target != "llvm" else ""))
    if args.plot:
        try:
            print(f"tuning curve in {report.plot(args.plot)}")
        except (ImportError, ValueError) as e:
            raise CLIError(f"--plot {args.plot}: {e}") from None
    return 130 if report.interrupted else 0


def cmd_inspect(args) -> int:
    from .executable.format import tensor_nbytes
    from .ir import dtype as dt
    spec = _check_library(args.library)
    const_bytes = sum(tensor_nbytes(dt.from_numpy(c.dtype), c.shape) for c in spec.constants)
    print(f"library:   {args.library} ({_fmt_bytes(os.path.getsize(args.library))})")
    print(f"target:    {spec.target}")
    print(f"writer:    {spec.writer or 'not recorded (written before kiln 0.1.0 recorded it)'}")
    from .codegen.cpu_features import read_library_features
    features = read_library_features(args.library)
    print("cpu:       " + ("not recorded (built before Kiln recorded CPU features)" if features is None
                            else ", ".join(features) or "the architecture's baseline only"))
    if spec.cuda is not None:   # a model compiled for target="cuda" (docs/cuda.md)
        print(f"gpu:       {spec.cuda.description.get('target', 'cuda')}: {len(spec.cuda.entries)} "
              f"kernel entries, {_fmt_bytes(len(spec.cuda.ptx))} of PTX")
    print(f"constants: {len(spec.constants)} ({_fmt_bytes(const_bytes)})")
    print(f"arena:     {_fmt_bytes(sum(f.arena_size for f in spec.functions))}")
    print(f"functions: {len(spec.functions)}")
    for f in spec.functions:
        branch = " (private: a branch of an IF)" if f.private else ""
        print(f"  {f.name}{branch}: arena {_fmt_bytes(f.arena_size)}, {f.num_registers} registers, "
              f"{len(f.code)} instructions")
        for i, p in enumerate(f.params):
            nbytes = ""
            if all(isinstance(d, int) for d in p.shape):
                nbytes = f"  ({_fmt_bytes(tensor_nbytes(p.dtype, p.shape))})"
            print(f"    input {i}: {p.name}  {p.dtype}{_fmt_shape(p.shape)}{nbytes}")
    print(f"kernels:   {len(spec.kernels)}")
    for k in spec.kernels:
        print(f"  {k}")
    if spec.externs:
        print(f"externs:   {len(spec.externs)}")
        for e in spec.externs:
            print(f"  {e}")
    if args.disassemble:
        from .executable.format import disassemble
        print(disassemble(spec))
    return 0


def cmd_run(args) -> int:
    import numpy as np
    spec = _check_library(args.library)
    fn = _function(spec, args.function)
    inputs = _inputs(fn, dict(args.input or []), args.random, args.seed, dict(args.shape or []))
    import kiln
    from .executable.foreign import ForeignRunError, library_triple, run_foreign
    if library_triple(args.library):   # another CPU's library: its runner, under qemu-user
        try:
            outs = run_foreign(args.library, fn.name, inputs)
        except ForeignRunError as e:
            raise CLIError(str(e)) from None
    else:
        vm = _vm(args.library)
        try:
            out = vm[fn.name](*inputs)
        except kiln.KilnError as e:
            raise CLIError(str(e)) from None
        outs = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
    for i, o in enumerate(outs):
        flat = o.reshape(-1)
        head = np.array2string(flat[:8], precision=5, separator=", ")
        print(f"output {i}: {o.dtype}{_fmt_shape(o.shape)} {head}{' ...' if flat.size > 8 else ''}")
    if args.output:
        if len(outs) == 1:
            np.save(args.output, outs[0])
        else:
            np.savez(args.output, *outs)
        print(f"wrote {args.output}")
    return 0


def cmd_bench(args) -> int:
    import kiln
    spec = _check_library(args.library)
    fn = _function(spec, args.function)
    inputs = _inputs(fn, dict(args.input or []), True, args.seed, dict(args.shape or []))
    vm = _vm(args.library)
    kiln.set_num_threads(args.threads)
    f = vm[fn.name]
    try:
        for _ in range(args.warmup):
            f(*inputs)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            f(*inputs)
            times.append(time.perf_counter() - t0)
    except kiln.KilnError as e:
        raise CLIError(str(e)) from None
    times.sort()
    print(f"{fn.name}: best {times[0] * 1e3:.3f} ms, median {times[len(times) // 2] * 1e3:.3f} ms "
          f"over {args.repeat} runs, {kiln.get_num_threads()} thread(s)")
    if args.profile:
        print(vm.profile(fn.name, *inputs))
    return 0


def cmd_cache(args) -> int:
    from .codegen import cache_limit
    from .codegen.emit import default_cache_dir
    folder = args.dir or default_cache_dir()
    try:
        limit = cache_limit.default_cache_limit()
        size_to = cache_limit.parse_size(args.trim) if args.trim is not None else None
    except ValueError as e:
        raise CLIError(str(e)) from None
    if size_to == 0:
        raise CLIError("--trim needs a size above 0 (e.g. 500M); --clear empties the cache")
    if args.clear or size_to is not None:
        report = cache_limit.clear(folder) if args.clear else cache_limit.trim(folder, size_to)
        print(f"removed {len(report.removed)} files, {_mb(report.size_before - report.size_after)}"
              f" (files used in the last {cache_limit.GRACE_S:.0f} s stay)")
    files, size = cache_limit.usage(folder)
    print(f"{folder}: {files} files, {_mb(size)} (limit {_mb(limit) if limit else 'none'})")
    return 0


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB"


# ---- parser ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kiln", description="Kiln: compile ONNX models ahead of time "
                                "into one shared library; inspect, run and time the result.")
    p.add_argument("--version", action="version", version=f"kiln {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    c = sub.add_parser("compile", help="compile an ONNX model into a shared library",
                       description="Import an ONNX model, bind its weights, run a pipeline and "
                       "compile it into one shared library (kernels, bytecode and weights).")
    c.add_argument("model", help="the .onnx file, or a .pt2 file from torch.export.save")
    c.add_argument("-o", "--output", help="the library to write (default: MODEL.so in the current directory)")
    c.add_argument("--target", default="llvm", help="code generation target (default: llvm, the host CPU; "
                   "e.g. 'llvm -mcpu=skylake-avx512', or a triple: aarch64-linux-gnu, "
                   "armv7-linux-gnueabihf, 'riscv64-linux-gnu -mattr=+v'; kiln run runs those "
                   "under qemu-user)")
    c.add_argument("--pipeline", default="default", help="graph pipeline: default or zero (default: default)")
    c.add_argument("--shape", type=_parse_shape, action="append", metavar="NAME=D0,D1,...",
                   help="pin the shape of graph input NAME (repeatable)")
    c.add_argument("--bound", type=_parse_bound, action="append", metavar="DIM=N",
                   help="upper bound of symbolic dimension DIM: its intermediates are planned "
                        "statically at that size, and larger inputs are refused (repeatable)")
    c.add_argument("--const-input", type=_parse_value, action="append", metavar="NAME=VALUE",
                   help="fix graph input NAME to a value at compile time, e.g. sr=16000: it leaves the "
                   "signature and an If on it keeps one branch (repeatable)")
    c.add_argument("--cache-dir", help="build cache directory (default: Kiln's user cache)")
    c.add_argument("--tuning-db", metavar="FILE.jsonl", help="schedule each kernel with its best "
                   "record in this tuning database (written by 'kiln tune'); kernels without one "
                   "get the default schedules")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")
    c.set_defaults(func=cmd_compile)

    t = sub.add_parser("tune", help="tune an ONNX model's kernels, recording every measurement",
                       description="Search the schedule decisions of each kernel of an ONNX "
                       "model, measuring candidates through the runtime, and append every "
                       "measurement to a tuning database (JSON lines); 'kiln compile "
                       "--tuning-db' applies the best records. Running it again resumes.")
    t.add_argument("model", help="the .onnx file")
    t.add_argument("--db", default="tuning.jsonl", help="the tuning database to append to "
                   "(default: tuning.jsonl)")
    t.add_argument("--trials", type=int, help="candidates per kernel to reach, earlier runs "
                   "included (default: 32 without --time, else until the time is up)")
    t.add_argument("--time", type=_parse_duration, metavar="DURATION",
                   help="stop after this long, e.g. 90s, 10m, 1h")
    t.add_argument("--threads", type=int, help="runtime threads to tune for (default: every core)")
    t.add_argument("--target", default="llvm", help="code generation target (default: llvm, the host CPU)")
    t.add_argument("--shape", type=_parse_shape, action="append", metavar="NAME=D0,D1,...",
                   help="pin the shape of graph input NAME (repeatable)")
    t.add_argument("--const-input", type=_parse_value, action="append", metavar="NAME=VALUE",
                   help="fix graph input NAME to a value at compile time (repeatable)")
    t.add_argument("--plot", metavar="PATH", help="draw the best model latency against trials "
                   "and wall time to this image (.png, .svg, .pdf; needs matplotlib)")
    t.add_argument("--scheduler", metavar="ADDRESS", help="measure on the workers of this Dask "
                   "cluster (e.g. tcp://host:8786) instead of this machine; see docs/tuning.md")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar or messages on stderr")
    t.set_defaults(func=cmd_tune)

    i = sub.add_parser("inspect", help="describe a compiled library",
                       description="Print the functions (inputs: name, shape, dtype), kernels, "
                       "arena size, target and constants of a compiled library.")
    i.add_argument("library", help="a library written by 'kiln compile' or Executable.export_library")
    i.add_argument("--disassemble", action="store_true", help="also print the bytecode")
    i.set_defaults(func=cmd_inspect)

    def common_run(sp):
        sp.add_argument("library", help="a compiled library (.so)")
        sp.add_argument("--function", help="graph function to call (default: the only one)")
        sp.add_argument("--input", type=_parse_input, action="append", metavar="NAME=FILE.npy",
                        help="an input from a .npy file (repeatable)")
        sp.add_argument("--shape", type=_parse_shape, action="append", metavar="NAME=D0,D1,...",
                        help="shape of a random input whose shape is symbolic")
        sp.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")

    r = sub.add_parser("run", help="run a compiled library on inputs from .npy files")
    common_run(r)
    r.add_argument("--random", action="store_true", help="seeded random values for inputs not given")
    r.add_argument("-o", "--output", help="write the output to this .npy (.npz for several outputs)")
    r.set_defaults(func=cmd_run)

    b = sub.add_parser("bench", help="time a compiled library (random inputs unless given)")
    common_run(b)
    b.add_argument("--threads", type=int, default=0, help="runtime threads (default 0: one per core)")
    b.add_argument("--repeat", type=int, default=20, help="timed runs (default 20)")
    b.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    b.add_argument("--profile", action="store_true", help="also print the per-kernel profile of one run")
    b.set_defaults(func=cmd_bench)

    k = sub.add_parser("cache", help="show, trim or clear Kiln's build cache",
                       description="Show the build cache's size (kernels' objects, lowering "
                       "and schedule records, linked libraries) against its limit "
                       "(KILN_CACHE_LIMIT, default 2G); trim it to a size, least recently "
                       "used first, or clear it. Files used in the last minute stay.")
    k.add_argument("--dir", help="the cache folder (default: KILN_CACHE_DIR, else ~/.cache/kiln)")
    k.add_argument("--trim", metavar="SIZE", help="trim to 80%% of SIZE now, e.g. 500M, 2G")
    k.add_argument("--clear", action="store_true", help="remove every build file")
    k.set_defaults(func=cmd_cache)

    from .libinfo import add_config_command   # `kiln config`: flags and paths for C, C++, Java
    add_config_command(sub)
    from .bindgen.cli import add_export_bindings_command   # typed C, C++, Java wrappers
    add_export_bindings_command(sub)
    return p


def _version() -> str:
    from . import __version__
    return __version__


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CLIError as e:
        print(f"kiln {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"kiln {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
