"""The CPU features a library's code needs, recorded in the library and checked when it loads.

Code compiled for AVX-512 dies of SIGILL at its first call on an AVX2 machine. So every library
``build_library`` links (and every static bundle) carries, beside its kernel table:

- ``kiln_cpu_features``: the features its code may use, as text (``"avx,avx2,fma,...,avx512f"``;
  ``kiln inspect`` prints it), for every target;
- on x86-64, ``kiln_cpu_check`` (``KILN_CPU_CHECK_SYMBOL`` of ``kiln_kernel_abi.h``): a pointer to
  a generated function that reads the CPU (CPUID, and XGETBV for the register state the OS
  enables) and returns NULL, or the message naming the first needed feature this machine lacks
  (``missing_message``). The C runtime calls it right after dlopen, before anything else in the
  library runs, and refuses the library with that message. The check lives in each library
  rather than in the runtime, which has almost no room left in its 64 KB budget; a static
  bundle's ``kiln_model_<name>_create`` runs the same check first (``kiln.executable.static``).

Which features: those of the ``FEATURES`` table below (the SIMD and bit-manipulation extensions
LLVM selects instructions from, AVX-512 and AMX included), as LLVM enables them for the target:
the host's own list for ``"llvm"``, else the CPU's (``_CPU_FEATURES``, LLVM's X86TargetParser for
the CPUs Kiln knows) with ``-mattr`` applied on top in order, each ``+f`` adding what ``f``
implies and each ``-f`` removing what implies ``f``, as LLVM does. Other architectures record
their ``-mattr`` features but carry no check (aarch64's NEON and riscv64's RV64GC are every Linux
machine's baseline; ``+v``, ``+sve`` and friends are not checked yet).

>>> required_features("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell")
['sse3', 'ssse3', 'sse4.1', 'sse4.2', 'popcnt', 'avx', 'avx2', 'fma', 'f16c', 'bmi', 'bmi2', 'lzcnt', 'movbe']
"""
from __future__ import annotations

import functools
from typing import Dict, List, Optional, Sequence, Tuple

from .target import Target, parse_target

CHECK_SYMBOL = "kiln_cpu_check"          # kiln_kernel_abi.h's KILN_CPU_CHECK_SYMBOL
FEATURES_SYMBOL = "kiln_cpu_features"

# XCR0 bits the OS sets when it saves a register state: SSE+AVX (YMM), AVX-512 (opmask, ZMM),
# AMX (tile config and data).
_YMM, _ZMM, _TILE = 0x6, 0xE6, 0x60000
_EAX, _EBX, _ECX, _EDX = range(4)

# feature -> (CPUID leaf, subleaf, register, bit, XCR0 mask); in the order the check tests them
# (older extensions first, so a CPU without AVX is told "avx", not "avx512f"). AVX10 is a
# version number in leaf 0x24 (``_AVX10``).
FEATURES: Dict[str, Tuple[int, int, int, int, int]] = {
    "sse3": (1, 0, _ECX, 0, 0), "ssse3": (1, 0, _ECX, 9, 0), "sse4.1": (1, 0, _ECX, 19, 0),
    "sse4.2": (1, 0, _ECX, 20, 0), "popcnt": (1, 0, _ECX, 23, 0),
    "sse4a": (0x80000001, 0, _ECX, 6, 0),
    "avx": (1, 0, _ECX, 28, _YMM), "avx2": (7, 0, _EBX, 5, _YMM), "fma": (1, 0, _ECX, 12, _YMM),
    "f16c": (1, 0, _ECX, 29, _YMM), "fma4": (0x80000001, 0, _ECX, 16, _YMM),
    "xop": (0x80000001, 0, _ECX, 11, _YMM),
    "bmi": (7, 0, _EBX, 3, 0), "bmi2": (7, 0, _EBX, 8, 0), "lzcnt": (0x80000001, 0, _ECX, 5, 0),
    "movbe": (1, 0, _ECX, 22, 0),
    "gfni": (7, 0, _ECX, 8, 0), "vaes": (7, 0, _ECX, 9, _YMM), "vpclmulqdq": (7, 0, _ECX, 10, _YMM),
    "avxvnni": (7, 1, _EAX, 4, _YMM), "avxifma": (7, 1, _EAX, 23, _YMM),
    "avxvnniint8": (7, 1, _EDX, 4, _YMM), "avxneconvert": (7, 1, _EDX, 5, _YMM),
    "avxvnniint16": (7, 1, _EDX, 10, _YMM),
    "avx512f": (7, 0, _EBX, 16, _ZMM), "avx512cd": (7, 0, _EBX, 28, _ZMM),
    "avx512dq": (7, 0, _EBX, 17, _ZMM), "avx512bw": (7, 0, _EBX, 30, _ZMM),
    "avx512vl": (7, 0, _EBX, 31, _ZMM), "avx512ifma": (7, 0, _EBX, 21, _ZMM),
    "avx512vbmi": (7, 0, _ECX, 1, _ZMM), "avx512vbmi2": (7, 0, _ECX, 6, _ZMM),
    "avx512vnni": (7, 0, _ECX, 11, _ZMM), "avx512bitalg": (7, 0, _ECX, 12, _ZMM),
    "avx512vpopcntdq": (7, 0, _ECX, 14, _ZMM), "avx512bf16": (7, 1, _EAX, 5, _ZMM),
    "avx512fp16": (7, 0, _EDX, 23, _ZMM), "avx512vp2intersect": (7, 0, _EDX, 8, _ZMM),
    "avx10.1": (7, 1, _EDX, 19, _ZMM), "avx10.2": (7, 1, _EDX, 19, _ZMM),
    "amx-tile": (7, 0, _EDX, 24, _TILE), "amx-int8": (7, 0, _EDX, 25, _TILE),
    "amx-bf16": (7, 0, _EDX, 22, _TILE), "amx-fp16": (7, 1, _EAX, 21, _TILE),
    "amx-complex": (7, 1, _EDX, 8, _TILE),
}
_AVX10 = {"avx10.1": 1, "avx10.2": 2}   # minimum AVX10 version (leaf 0x24 EBX[7:0])

# What a feature implies (LLVM's X86.td), for "+f" on top of a CPU and "-f" taking out what
# needs it. Only features of FEATURES appear.
_AVX512_SPR = ["avx512f", "avx512cd", "avx512dq", "avx512bw", "avx512vl", "avx512ifma",
               "avx512vbmi", "avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq",
               "avx512bf16", "avx512fp16"]
_IMPLIES: Dict[str, List[str]] = {
    "ssse3": ["sse3"], "sse4.1": ["ssse3"], "sse4.2": ["sse4.1"], "sse4a": ["sse3"],
    "avx": ["sse4.2"], "avx2": ["avx"], "fma": ["avx"], "f16c": ["avx"],
    "fma4": ["avx", "sse4a"], "xop": ["fma4"], "vaes": ["avx2"], "vpclmulqdq": ["avx"],
    "avxvnni": ["avx2"], "avxifma": ["avx2"], "avxvnniint8": ["avx2"],
    "avxneconvert": ["avx2"], "avxvnniint16": ["avx2"],
    "avx512f": ["avx2", "fma", "f16c"],
    **{f: ["avx512f"] for f in ("avx512cd", "avx512dq", "avx512bw", "avx512vl", "avx512ifma",
                                "avx512vnni", "avx512vpopcntdq", "avx512vp2intersect")},
    "avx512vbmi": ["avx512bw"], "avx512vbmi2": ["avx512bw"], "avx512bitalg": ["avx512bw"],
    "avx512bf16": ["avx512bw"], "avx512fp16": ["avx512bw", "avx512dq", "avx512vl"],
    "avx10.1": _AVX512_SPR, "avx10.2": ["avx10.1"],
    "amx-int8": ["amx-tile"], "amx-bf16": ["amx-tile"], "amx-fp16": ["amx-tile"],
    "amx-complex": ["amx-tile"],
}


def _cpu_table() -> Dict[str, List[str]]:
    """CPU name -> its features of FEATURES (LLVM's X86TargetParser.cpp, written as there: each
    generation is the previous one plus what it added)."""
    t: Dict[str, List[str]] = {}
    core2 = ["sse3", "ssse3"]
    nehalem = core2 + ["sse4.1", "sse4.2", "popcnt"]
    snb = nehalem + ["avx"]
    ivb = snb + ["f16c"]
    hsw = ivb + ["avx2", "bmi", "bmi2", "fma", "lzcnt", "movbe"]
    skx = hsw + ["avx512f", "avx512cd", "avx512dq", "avx512bw", "avx512vl"]
    cnl = skx + ["avx512ifma", "avx512vbmi"]
    icl = cnl + ["avx512bitalg", "avx512vbmi2", "avx512vnni", "avx512vpopcntdq", "gfni", "vaes",
                 "vpclmulqdq"]
    spr = icl + ["amx-bf16", "amx-int8", "amx-tile", "avx512bf16", "avx512fp16", "avxvnni"]
    gnr = spr + ["amx-fp16"]
    tremont = nehalem + ["movbe", "gfni"]
    adl = tremont + ["avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "vaes", "vpclmulqdq",
                     "avxvnni"]
    srf = adl + ["avxifma", "avxneconvert", "avxvnniint8"]
    arl_s = srf + ["avxvnniint16"]
    zn1 = hsw + []
    zn3 = zn1 + ["vaes", "vpclmulqdq"]
    zn4 = zn3 + ["avx512f", "avx512cd", "avx512dq", "avx512bw", "avx512vl", "avx512ifma",
                 "avx512vbmi", "avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq",
                 "avx512bf16", "gfni"]
    bdver1 = nehalem + ["sse4a", "avx", "fma4", "xop", "lzcnt"]
    bdver2 = bdver1 + ["bmi", "fma", "f16c"]
    for names, feats in (
            (("x86-64", "generic", "k8", "nocona", "prescott"), []),
            (("x86-64-v2",), nehalem), (("x86-64-v3",), hsw), (("x86-64-v4",), skx),
            (("core2",), core2), (("penryn",), core2 + ["sse4.1"]),
            (("nehalem", "corei7", "westmere"), nehalem),
            (("sandybridge", "corei7-avx"), snb), (("ivybridge", "core-avx-i"), ivb),
            (("haswell", "core-avx2", "broadwell", "skylake"), hsw),
            (("skylake-avx512", "skx"), skx), (("cascadelake",), skx + ["avx512vnni"]),
            (("cooperlake",), skx + ["avx512vnni", "avx512bf16"]), (("cannonlake",), cnl),
            (("icelake-client", "icelake-server", "rocketlake"), icl),
            (("tigerlake",), icl + ["avx512vp2intersect"]),
            (("sapphirerapids", "emeraldrapids"), spr), (("graniterapids",), gnr),
            (("graniterapids-d",), gnr + ["amx-complex"]),
            (("diamondrapids",), gnr + ["amx-complex", "avx10.2", "avxifma", "avxneconvert",
                                        "avxvnniint8", "avxvnniint16"]),
            (("knl",), hsw + ["avx512f", "avx512cd"]),
            (("knm",), hsw + ["avx512f", "avx512cd", "avx512vpopcntdq"]),
            (("silvermont", "slm", "goldmont", "goldmont-plus"), nehalem + ["movbe"]),
            (("tremont",), tremont), (("alderlake", "raptorlake", "meteorlake", "gracemont"), adl),
            (("sierraforest", "grandridge", "arrowlake"), srf),
            (("arrowlake-s", "lunarlake", "pantherlake", "clearwaterforest"), arl_s),
            (("amdfam10", "barcelona"), ["sse3", "sse4a", "popcnt", "lzcnt"]),
            (("btver1",), core2 + ["sse4a", "popcnt", "lzcnt"]),
            (("btver2",), core2 + ["sse4a", "popcnt", "lzcnt", "sse4.1", "sse4.2", "avx", "bmi",
                                   "f16c", "movbe"]),
            (("bdver1",), bdver1), (("bdver2", "bdver3"), bdver2),
            (("bdver4",), bdver2 + ["avx2", "bmi2", "movbe"]),
            (("znver1", "znver2"), zn1 + ["sse4a"]), (("znver3",), zn3 + ["sse4a"]),
            (("znver4",), zn4 + ["sse4a"]),
            (("znver5",), zn4 + ["sse4a", "avxvnni", "avx512vp2intersect"])):
        for n in names:
            t[n] = feats
    return t


_CPU_FEATURES = _cpu_table()


def _closure(feature: str) -> List[str]:
    out, todo = [], [feature]
    while todo:
        f = todo.pop()
        if f not in out:
            out.append(f)
            todo.extend(_IMPLIES.get(f, []))
    return out


def _apply(enabled: set, entries: Sequence[str]) -> None:
    """Apply ``+f`` / ``-f`` entries in order, as LLVM does (with implications)."""
    for item in entries:
        name, on = item[1:], item[0] == "+"
        if name not in FEATURES:
            continue
        if on:
            enabled.update(_closure(name))
        else:
            enabled.difference_update({f for f in FEATURES if name in _closure(f)})


def is_x86_64(target: Target) -> bool:
    """Whether ``target`` is 64-bit x86 (the architecture whose libraries carry a check)."""
    return target.arch in ("x86_64", "amd64")


def can_check(target: Target) -> bool:
    """Whether libraries for ``target`` get the check: x86-64 targets, compiled on an x86-64
    machine (the check's CPUID is inline asm, which only the native assembler LLVM initialises
    can parse; x86-64 libraries are linked on x86-64 machines only anyway)."""
    import platform
    return is_x86_64(target) and platform.machine().lower() in ("x86_64", "amd64")


def known_cpu(cpu: str) -> bool:
    """Whether the feature table knows the x86 CPU ``cpu`` (an unknown one records its -mattr
    features only)."""
    return cpu in _CPU_FEATURES


def required_features(target) -> List[str]:
    """The CPU features code compiled for ``target`` may use, in ``FEATURES`` order (x86-64),
    or the target's ``+`` features in its order (other architectures)."""
    t = parse_target(target)
    return list(_required_features(t))


# Every compile asks for its target's features (and its check's IR) once or twice: ~10 ms of
# feature closures and IR text each time, for the few targets a process uses. Targets are
# frozen dataclasses, so they key the caches.
@functools.lru_cache(maxsize=64)
def _required_features(t: Target) -> Tuple[str, ...]:
    entries = [e.strip() for e in t.features.split(",") if e.strip()]
    if not is_x86_64(t):
        return tuple(e[1:] for e in entries if e[0] == "+")
    enabled: set = set()
    _apply(enabled, ["+" + f for f in _CPU_FEATURES.get(t.cpu, [])])
    _apply(enabled, entries)
    return tuple(f for f in FEATURES if f in enabled)


# ---- the generated check ------------------------------------------------------------------------

_CPUID = ('asm "cpuid", "={ax},={bx},={cx},={dx},{ax},{cx},~{dirflag},~{fpsr},~{flags}"')
# XGETBV as bytes: the assembler need not know the instruction under the baseline features.
_XGETBV = 'asm sideeffect ".byte 0x0f, 0x01, 0xd0", "={ax},={dx},{cx},~{dirflag},~{fpsr},~{flags}"'
# The check itself must run on any x86-64, whatever the library's target.
_BASELINE_ATTRS = '"target-cpu"="x86-64" "target-features"="+sse2"'


def _c_string(text: str) -> Tuple[int, str]:
    """(length with the NUL, the LLVM ``c"..."`` body) of ``text``."""
    data = text.encode() + b"\0"
    return len(data), "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:02X}"
                              for b in data)


def _string(name: str, text: str) -> str:
    n, body = _c_string(text)
    return f'@{name} = private unnamed_addr constant [{n} x i8] c"{body}"\n'


def missing_message(feature: str, cpu: str, os_disabled: bool = False, what: str = "library") -> str:
    """The load error for a ``what`` compiled for ``cpu`` on a machine without ``feature``
    (``os_disabled``: the CPU has it, but the operating system does not save its registers)."""
    lacks = ("which the operating system has not enabled" if os_disabled
             else "which this CPU lacks")
    return (f"this {what} needs the CPU feature {feature}, {lacks} (it was compiled for "
            f"-mcpu={cpu}); compile it for this machine (target 'llvm')")


def check_function_ir(features: Sequence[str], fn_name: str, message=None) -> str:
    """LLVM IR text (x86-64) of ``define internal ptr @fn_name()``: the check described in the
    module docstring for ``features`` (names of ``FEATURES``), returning ``message(feature,
    os_disabled)`` for the first one missing (``os_disabled`` when the CPU has it but XCR0
    lacks its registers; the default message is the feature's name), or null."""
    message = message or (lambda f, os_disabled: f + (" (disabled by the OS)" if os_disabled else ""))
    unknown = [f for f in features if f not in FEATURES]
    if unknown:
        raise ValueError(f"no CPUID check for the features {unknown}")
    features = [f for f in FEATURES if f in features]
    g = f"{fn_name}.msg"
    out = []
    for i, f in enumerate(features):
        out.append(_string(f"{g}.{i}", message(f, False)))
        if FEATURES[f][4]:
            out.append(_string(f"{g}.{i}.os", message(f, True)))
    body = [f"define internal ptr @{fn_name}() noinline nounwind {_BASELINE_ATTRS} {{",
            "entry:"]

    def cpuid(var, leaf, sub):
        body.append(f"  %{var} = call {{ i32, i32, i32, i32 }} {_CPUID}(i32 {leaf}, i32 {sub})")
        for r in range(4):
            body.append(f"  %{var}.r{r} = extractvalue {{ i32, i32, i32, i32 }} %{var}, {r}")

    def valid_regs(var, cond):
        for r in range(4):
            body.append(f"  %{var}.v{r} = select i1 {cond}, i32 %{var}.r{r}, i32 0")

    # A leaf above the CPU's maximum returns another leaf's data: read as zeros instead.
    cpuid("l0", 0, 0)
    cpuid("e0", 0x80000000, 0)
    body.append("  %ok1 = icmp uge i32 %l0.r0, 1")
    cpuid("l1", 1, 0)
    valid_regs("l1", "%ok1")
    body.append("  %ok7 = icmp uge i32 %l0.r0, 7")
    cpuid("l7", 7, 0)
    valid_regs("l7", "%ok7")
    body.append("  %has71 = icmp uge i32 %l7.v0, 1")
    body.append("  %ok71 = and i1 %ok7, %has71")
    cpuid("l71", 7, 1)
    valid_regs("l71", "%ok71")
    body += ["  %avx10.bit = and i32 %l71.v3, 524288", "  %avx10.on = icmp ne i32 %avx10.bit, 0",
             "  %max24 = icmp uge i32 %l0.r0, 36", "  %ok24 = and i1 %avx10.on, %max24"]
    cpuid("l24", 0x24, 0)
    valid_regs("l24", "%ok24")
    body.append("  %okx = icmp uge i32 %e0.r0, 2147483649")
    cpuid("lx", 0x80000001, 0)
    valid_regs("lx", "%okx")
    # XGETBV only where CPUID says the OS enabled it (OSXSAVE), else it faults.
    body += ["  %osx.bit = and i32 %l1.v2, 134217728", "  %osx = icmp ne i32 %osx.bit, 0",
             "  br i1 %osx, label %xgetbv, label %features", "xgetbv:",
             f"  %xcr = call {{ i32, i32 }} {_XGETBV}(i32 0)",
             "  %xcr.lo = extractvalue { i32, i32 } %xcr, 0", "  br label %features",
             "features:", "  %xcr0 = phi i32 [ %xcr.lo, %xgetbv ], [ 0, %entry ]"]
    leaf_var = {(1, 0): "l1", (7, 0): "l7", (7, 1): "l71", (0x80000001, 0): "lx"}
    for i, f in enumerate(features):
        leaf, sub, reg, bit, xmask = FEATURES[f]
        body.append(f"  %f{i}.bits = and i32 %{leaf_var[(leaf, sub)]}.v{reg}, {1 << bit}")
        body.append(f"  %f{i}.cpu = icmp ne i32 %f{i}.bits, 0")
        cond = f"%f{i}.cpu"
        if f in _AVX10:
            body += [f"  %f{i}.ver = and i32 %l24.v1, 255",
                     f"  %f{i}.vok = icmp uge i32 %f{i}.ver, {_AVX10[f]}",
                     f"  %f{i}.both = and i1 %f{i}.cpu, %f{i}.vok"]
            cond = f"%f{i}.both"
        nxt = f"f{i + 1}" if i + 1 < len(features) else "none"
        if xmask:
            body += [f"  br i1 {cond}, label %f{i}.xcr, label %f{i}.missing", f"f{i}.xcr:",
                     f"  %f{i}.xm = and i32 %xcr0, {xmask}",
                     f"  %f{i}.os = icmp eq i32 %f{i}.xm, {xmask}",
                     f"  br i1 %f{i}.os, label %{nxt}, label %f{i}.noos",
                     f"f{i}.noos:", f"  ret ptr @{g}.{i}.os"]
        else:
            body.append(f"  br i1 {cond}, label %{nxt}, label %f{i}.missing")
        body += [f"f{i}.missing:", f"  ret ptr @{g}.{i}", f"{nxt}:"]
    if not features:
        body += ["  br label %none", "none:"]
    body += ["  ret ptr null", "}", ""]
    return "".join(out) + "\n".join(body)


def library_ir(target) -> str:
    """LLVM IR text to add to a library's table module for ``target``: ``kiln_cpu_features``,
    and on x86-64 when any feature is needed, the check and ``kiln_cpu_check`` pointing to it."""
    return _library_ir(parse_target(target))


@functools.lru_cache(maxsize=64)
def _library_ir(t: Target) -> str:
    feats = required_features(t)
    n, body = _c_string(",".join(feats))
    out = [f'@{FEATURES_SYMBOL} = constant [{n} x i8] c"{body}"\n']
    if can_check(t) and feats:
        out.append(check_function_ir(feats, "kiln_cpu_missing",
                                     lambda f, os_disabled: missing_message(f, t.cpu, os_disabled)))
        out.append(f"@{CHECK_SYMBOL} = constant ptr @kiln_cpu_missing\n")
    return "\n".join(out)


def read_library_features(path) -> Optional[List[str]]:
    """The features recorded in a library file of any CPU (``kiln_cpu_features``), or None when
    it records none (a library built before Kiln recorded them)."""
    from ..executable.foreign import read_elf_symbols
    data = read_elf_symbols(path, [FEATURES_SYMBOL]).get(FEATURES_SYMBOL)
    if data is None:
        return None
    text = data.split(b"\0", 1)[0].decode(errors="replace")
    return [f for f in text.split(",") if f]


__all__ = ["CHECK_SYMBOL", "FEATURES_SYMBOL", "FEATURES", "required_features", "known_cpu", "can_check",
           "missing_message",
           "check_function_ir", "library_ir", "read_library_features", "is_x86_64"]
