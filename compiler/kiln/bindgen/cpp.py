"""Typed C++ bindings: ``<name>.hpp``, a class per model over the C bindings (``<name>_bindings.h``)
with RAII and exceptions (``kiln::Error`` from bindings/cpp/kiln.hpp).

    kiln_models::Mlp mlp("mlp.so");              // or kiln_models::Mlp::Static()
    float x[1][784] = {...}, out[1][10];
    mlp.Forward(x, out);                         // typed references: shapes checked by the compiler
    auto y = mlp.Forward(x);                     // kiln_models::Array<float, 1, 10>
    float first = y.ref()[0][0];

``Array<T, Dims...>`` owns its elements on the heap; ``ref()`` is the C array reference
``T (&)[D0][D1]...``, which every ``Forward`` overload takes as input too.
"""
from __future__ import annotations

from typing import List

from .c import c_type
from .signature import FunctionSig, TensorSig

ARRAY_TEMPLATE = """#ifndef KILN_MODELS_ARRAY_DEFINED_
#define KILN_MODELS_ARRAY_DEFINED_
namespace kiln_models {
namespace detail {
template <typename T, int64_t... D> struct CArray;
template <typename T> struct CArray<T> { using type = T; };
template <typename T, int64_t D0, int64_t... R> struct CArray<T, D0, R...> {
  using type = typename CArray<T, R...>::type[D0];
};
}  // namespace detail

/// A tensor of fixed shape Dims..., owning its elements (heap, contiguous, row-major).
template <typename T, int64_t... Dims>
class Array {
 public:
  using CArray = typename detail::CArray<T, Dims...>::type;
  static constexpr int64_t kSize = (Dims * ... * int64_t(1));
  static constexpr std::array<int64_t, sizeof...(Dims)> kShape{{Dims...}};
  Array() : data_(new T[kSize]()) {}
  T* data() noexcept { return data_.get(); }
  const T* data() const noexcept { return data_.get(); }
  /// The elements as the C array type T[D0][D1]..., e.g. y.ref()[0][3].
  CArray& ref() noexcept { return *reinterpret_cast<CArray*>(data_.get()); }
  const CArray& ref() const noexcept { return *reinterpret_cast<const CArray*>(data_.get()); }

 private:
  std::unique_ptr<T[]> data_;
};
}  // namespace kiln_models
#endif  // KILN_MODELS_ARRAY_DEFINED_
"""


def class_name(name: str) -> str:
    """``mlp`` -> ``Mlp``, ``tiny_lm`` -> ``TinyLm``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Model"


def _method(name: str) -> str:
    return class_name(name)


def _dims(t: TensorSig) -> str:
    return "".join(f"[{d}]" for d in t.shape) if t.shape else "[1]"


def _array(t: TensorSig, fname: str) -> str:
    dims = ", ".join(str(d) for d in t.shape) or "1"
    return f"Array<{c_type(t, fname)}, {dims}>"


def _methods(name: str, f: FunctionSig) -> List[str]:
    p, m = f"kiln_model_{name}", _method(f.name)
    ins = [f"const {c_type(t, f.name)} (&{t.ident}){_dims(t)}" for t in f.inputs]
    outs = [f"{c_type(t, f.name)} (&{t.ident}){_dims(t)}" for t in f.outputs]
    args = ", ".join([t.ident for t in f.inputs] + [t.ident for t in f.outputs])
    results = [_array(t, f.name) for t in f.outputs]
    ret = results[0] if len(results) == 1 else f"std::tuple<{', '.join(results)}>"
    made = "".join(f"    {r} r{k};\n" for k, r in enumerate(results))
    call_args = ", ".join([t.ident for t in f.inputs] + [f"r{k}.ref()" for k in range(len(results))])
    value = "r0" if len(results) == 1 else "std::make_tuple(" + ", ".join(
        f"std::move(r{k})" for k in range(len(results))) + ")"
    sig = ", ".join(t.name + ": " + t.dtype + str(list(t.shape)) for t in f.inputs)
    return [f"  /// {f.name}({sig}); planned arena {f.arena_bytes} bytes. Throws kiln::Error.",
            f"  static constexpr int64_t k{m}ArenaBytes = {f.arena_bytes};",
            f"  void {m}({', '.join(ins + outs)}) const {{",
            f"    kiln::detail::Check({p}_{f.name}(&m_, {args}));",
            "  }",
            f"  {ret} {m}({', '.join(ins)}) const {{",
            made + f"    {m}({call_args});",
            f"    return {value};",
            "  }", ""]


def generate_cpp(name: str, sigs: List[FunctionSig], static: bool = False) -> str:
    """The text of ``<name>.hpp`` (it includes ``<name>_bindings.h`` and ``kiln.hpp``)."""
    cls, p = class_name(name), f"kiln_model_{name}"
    guard = f"KILN_MODEL_{name.upper()}_HPP_"
    body = "\n".join(line for f in sigs for line in _methods(name, f))
    static_ctor = f"""  /// The statically linked model ({name}.a): no file, no dlopen.
  static {cls} Static() {{
    {cls} m;
    kiln::detail::Check({p}_open_static(&m.m_));
    return m;
  }}
""" if static else ""
    return f"""// {name}.hpp: typed C++ bindings of the Kiln model "{name}" (kiln.bindgen). Generated; do not
// edit. Needs kiln.hpp and {name}_bindings.h on the include path (`kiln config --cflags`).
#ifndef {guard}
#define {guard}

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "kiln.hpp"
#include "{name}_bindings.h"

{ARRAY_TEMPLATE}
namespace kiln_models {{

/// The model "{name}": one VM, initialised for the CPU. Move-only; methods are const and may be
/// called from several threads at once.
class {cls} {{
 public:
  /// Loads {name}.so. Throws kiln::Error (code and message) when it cannot.
  explicit {cls}(const std::string& path) {{ kiln::detail::Check({p}_open(&m_, path.c_str())); }}
{static_ctor}  {cls}({cls}&& o) noexcept : m_(o.m_) {{ o.m_ = {p}_t{{}}; }}
  {cls}& operator=({cls}&& o) noexcept {{
    if (this != &o) {{
      {p}_close(&m_);
      m_ = o.m_;
      o.m_ = {p}_t{{}};
    }}
    return *this;
  }}
  {cls}(const {cls}&) = delete;
  {cls}& operator=(const {cls}&) = delete;
  ~{cls}() {{ {p}_close(&m_); }}

{body}
 private:
  {cls}() = default;
  mutable {p}_t m_{{}};
}};

}}  // namespace kiln_models
#endif  // {guard}
"""
