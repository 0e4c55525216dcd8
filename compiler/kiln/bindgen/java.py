"""Typed Java bindings: ``<Name>Model.java``, a class per model over the ``ai.kiln`` binding.

    try (MlpModel mlp = new MlpModel("mlp.so")) {
        float[] y = mlp.forward(x);                  // x: float[784] (row-major, length checked)
        mlp.forward(xBuffer, yBuffer);               // direct-buffer variant: native-order bytes
    }

Every dimension and the arena are constants (``FORWARD_X_DIM1``, ``FORWARD_ARENA_BYTES``). A
function with several outputs returns a ``<Function>Result`` with one typed field per output.
"""
from __future__ import annotations

from typing import List, Optional

from .cpp import class_name
from .signature import BindgenError, FunctionSig, TensorSig

_JAVA = {"float32": ("float", "Float"), "float64": ("double", "Double"), "int32": ("int", "Int"),
         "int64": ("long", "Long")}


def _jtype(t: TensorSig, fname: str):
    if t.dtype not in _JAVA:
        raise BindgenError(f"function {fname!r}: {t.name!r} has dtype {t.dtype}, which the Java "
                           f"bindings do not map (supported: {', '.join(_JAVA)})")
    return _JAVA[t.dtype]


def _camel(name: str) -> str:
    c = class_name(name)
    return c[:1].lower() + c[1:]


def _nbytes(t: TensorSig) -> int:
    return t.size * {"float32": 4, "float64": 8, "int32": 4, "int64": 8}[t.dtype]


def _function(f: FunctionSig) -> List[str]:
    m, up = _camel(f.name), f.name.upper()
    lines = [f"    public static final long {up}_ARENA_BYTES = {f.arena_bytes}L;"]
    for t in (*f.inputs, *f.outputs):
        for k, d in enumerate(t.shape):
            lines.append(f"    public static final int {up}_{t.ident.upper()}_DIM{k} = {d};")
    shape = {t.ident: "new long[] {" + ", ".join(f"{d}L" for d in t.shape) + "}" for t in f.inputs}
    in_params = ", ".join(f"{_jtype(t, f.name)[0]}[] {t.ident}" for t in f.inputs)
    several = len(f.outputs) > 1
    result = f"{class_name(f.name)}Result"
    if several:
        fields = "".join(f"        public final {_jtype(t, f.name)[0]}[] {t.ident};\n" for t in f.outputs)
        assigns = "".join(f"            this.{t.ident} = {t.ident};\n" for t in f.outputs)
        ctor_args = ", ".join(f"{_jtype(t, f.name)[0]}[] {t.ident}" for t in f.outputs)
        lines += [f"    /** The outputs of {f.name}, row-major. */",
                  f"    public static final class {result} {{",
                  fields + f"        {result}({ctor_args}) {{", assigns + "        }", "    }"]
    ret = result if several else f"{_jtype(f.outputs[0], f.name)[0]}[]"
    sig = ", ".join(f"{t.name}: {t.dtype}{list(t.shape)}" for t in f.inputs)
    lines += ["", f"    /** {f.name}({sig}); arrays are row-major and their lengths are checked. */",
              f"    public {ret} {m}({in_params}) {{"]
    for t in f.inputs:
        lines.append(f"        check(\"{t.ident}\", {t.ident}.length, {t.size});")
    opened = "; ".join(f"NDArray a_{t.ident} = NDArray.from{_jtype(t, f.name)[1]}Array({t.ident}, {shape[t.ident]})"
                       for t in f.inputs)
    args = ", ".join(f"a_{t.ident}" for t in f.inputs)
    lines += [f"        try ({opened}; Value r = {m}Function().call({args})) {{"]
    if f.tuple_output:
        outs = [f"r.asTuple().get({k}).asNDArray().to{_jtype(t, f.name)[1]}Array()" for k, t in enumerate(f.outputs)]
    else:
        outs = [f"r.asNDArray().to{_jtype(f.outputs[0], f.name)[1]}Array()"]
    lines.append(f"            return {'new ' + result + '(' + ', '.join(outs) + ')' if several else outs[0]};")
    lines += ["        }", "    }", ""]
    # The direct-buffer variant: inputs and outputs as native-order bytes, no Java arrays.
    buf_params = ", ".join(f"ByteBuffer {t.ident}" for t in (*f.inputs, *f.outputs))
    lines += [f"    /** {f.name} over buffers of native-order bytes (e.g. ByteBuffer.allocateDirect(n)"
              ".order(ByteOrder.nativeOrder())): inputs are read from their position, outputs written "
              "at theirs; positions do not move. */",
              f"    public void {m}({buf_params}) {{"]
    for t in (*f.inputs, *f.outputs):
        lines.append(f"        check(\"{t.ident}\", {t.ident}.remaining(), {_nbytes(t)});")
    empties = "; ".join(f"NDArray a_{t.ident} = NDArray.empty({shape[t.ident]}, \"{t.dtype}\")"
                        for t in f.inputs)
    lines += [f"        try ({empties}) {{"]
    for t in f.inputs:
        lines.append(f"            a_{t.ident}.asByteBuffer().put({t.ident}.duplicate());")
    lines += [f"            try (Value r = {m}Function().call({args})) {{"]
    for k, t in enumerate(f.outputs):
        src = f"r.asTuple().get({k}).asNDArray()" if f.tuple_output else "r.asNDArray()"
        lines.append(f"                {t.ident}.duplicate().put({src}.asByteBuffer());")
    lines += ["            }", "        }", "    }", "",
              f"    private Function {m}Function() {{",
              f"        return vm.getFunction(\"{f.name}\");",
              "    }", ""]
    return lines


def generate_java(name: str, sigs: List[FunctionSig], package: Optional[str] = None) -> str:
    """The text of ``<Name>Model.java`` (class ``<Name>Model``; in ``package`` when given)."""
    cls = class_name(name) + "Model"
    body = "\n".join(line for f in sigs for line in _function(f))
    pkg = f"package {package};\n\n" if package else ""
    return f"""{pkg}import ai.kiln.Device;
import ai.kiln.Function;
import ai.kiln.KilnModule;
import ai.kiln.NDArray;
import ai.kiln.Value;

import java.nio.ByteBuffer;

/**
 * Typed Java bindings of the Kiln model "{name}" (kiln.bindgen). Generated; do not edit.
 * One VM initialised for the CPU; close it (try-with-resources). Methods may be called from
 * several threads at once (each call looks its function up anew).
 */
public final class {cls} implements AutoCloseable {{
    private final KilnModule lib;
    private final KilnModule vm;

    /** Loads the exported model (e.g. {name}.so) and initialises it. */
    public {cls}(String path) {{
        KilnModule l = KilnModule.load(path);
        try {{
            KilnModule v = l.getFunction("load_executable").invoke().asModule();
            v.getFunction("init").pushArg(Device.cpu()).invoke();
            this.lib = l;
            this.vm = v;
        }} catch (RuntimeException e) {{
            l.close();
            throw e;
        }}
    }}

{body}
    private static void check(String what, long got, long want) {{
        if (got != want) {{
            throw new IllegalArgumentException(what + ": expected " + want + " elements or bytes, got " + got);
        }}
    }}

    @Override
    public void close() {{
        vm.close();
        lib.close();
    }}
}}
"""
