// kiln.hpp — C++17 bindings for the Kiln runtime, header only, over the C API
// (runtime_c/include/kiln_runtime.h) and nothing else.
//
//   kiln::Module lib = kiln::Module::Load("mlp.so");
//   kiln::Module vm = lib.GetFunction("load_executable")();
//   vm.GetFunction("init")(kiln::Device::CPU());
//   kiln::NDArray out = vm.GetFunction("forward")(x, w1, b1, w2, b2);
//
// Handles: Module, Function and Value are move-only RAII owners of one reference (or string);
// NDArray is a shared handle (copying retains, destruction releases). A moved-from handle is
// empty: destroying or reassigning it is fine, using it throws kiln::Error
// (KILN_ERR_INVALID_STATE).
// Errors: every failing runtime call throws kiln::Error with the status code (code()) and the
// runtime's message (what()), e.g. "forward: argument 0 'x' expected shape (1, 784), got (1, 785)".
// Build: g++ -std=c++17 -I<kiln>/runtime_c/include -I<kiln>/bindings/cpp app.cpp
//        <kiln>/runtime_c/build/libkiln_runtime.a -ldl -lpthread -lm
#ifndef KILN_HPP_
#define KILN_HPP_

#include <kiln_runtime.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

// ---- errors ------------------------------------------------------------------------------------

/// A failed runtime call: code() is the kiln_status_t, what() the runtime's message.
class Error : public std::runtime_error {
 public:
  Error(kiln_status_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  kiln_status_t code() const noexcept { return code_; }
  /// The short name of the code, e.g. "shape mismatch".
  const char* status_string() const noexcept { return kiln_status_string(code_); }

 private:
  kiln_status_t code_;
};

namespace detail {
/// Throws kiln::Error with the calling thread's last runtime message when `status` is an error.
inline void Check(kiln_status_t status) {
  if (status != KILN_OK) throw Error(status, kiln_last_error());
}
[[noreturn]] inline void Fail(kiln_status_t status, const std::string& message) {
  throw Error(status, message);
}
inline const char* KindName(int32_t kind) {
  static const char* const names[] = {"null",   "int",      "float", "string", "tensor",
                                      "module", "function", "tuple", "device"};
  return kind >= 0 && kind <= KILN_VALUE_DEVICE ? names[kind] : "unknown";
}
}  // namespace detail

// ---- devices and data types --------------------------------------------------------------------

/// A DLDevice. Only the CPU is served by this runtime.
struct Device {
  DLDevice dl{kDLCPU, 0};
  Device() = default;
  Device(DLDevice d) : dl(d) {}  // NOLINT: implicit, a Device is a DLDevice
  static Device CPU(int32_t id = 0) { return Device(DLDevice{kDLCPU, id}); }
  operator DLDevice() const { return dl; }  // NOLINT
  bool operator==(const Device& o) const {
    return dl.device_type == o.dl.device_type && dl.device_id == o.dl.device_id;
  }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

/// A DLDataType with names: DataType("float32"), DataType::Of<float>(), ToString() -> "float32".
struct DataType {
  DLDataType dl{kDLFloat, 32, 1};
  DataType() = default;
  DataType(DLDataType d) : dl(d) {}  // NOLINT
  DataType(uint8_t code, uint8_t bits, uint16_t lanes = 1) : dl{code, bits, lanes} {}
  DataType(const char* name) : dl(Parse(name)) {}         // NOLINT
  DataType(const std::string& name) : dl(Parse(name)) {}  // NOLINT
  operator DLDataType() const { return dl; }              // NOLINT

  static DataType Float32() { return {kDLFloat, 32}; }
  static DataType Float64() { return {kDLFloat, 64}; }
  static DataType Int32() { return {kDLInt, 32}; }
  static DataType Int64() { return {kDLInt, 64}; }
  /// A string tensor's dtype (docs/strings.md): DLPack's opaque handle, one 128-bit record per
  /// element. NDArray::FromStrings / ToStrings convert; data<T>() refuses it.
  static DataType String() { return {kDLOpaqueHandle, 128}; }

  template <typename T>
  static DataType Of() {
    static_assert(std::is_arithmetic<T>::value, "kiln::DataType::Of: arithmetic types only");
    if (std::is_same<T, bool>::value) return {kDLBool, 8};
    if (std::is_floating_point<T>::value) return {kDLFloat, uint8_t(8 * sizeof(T))};
    return {uint8_t(std::is_signed<T>::value ? kDLInt : kDLUInt), uint8_t(8 * sizeof(T))};
  }

  bool operator==(const DataType& o) const {
    return dl.code == o.dl.code && dl.bits == o.dl.bits && dl.lanes == o.dl.lanes;
  }
  bool operator!=(const DataType& o) const { return !(*this == o); }

  std::string ToString() const {
    if (dl.code == kDLBool && dl.bits == 8 && dl.lanes == 1) return "bool";
    // A string tensor (docs/strings.md): opaque 128-bit records into a block of text.
    if (*this == String()) return "string";
    const char* base = dl.code == kDLInt     ? "int"
                       : dl.code == kDLUInt  ? "uint"
                       : dl.code == kDLFloat ? "float"
                       : dl.code == kDLBfloat ? "bfloat"
                                              : nullptr;
    std::string s = base ? std::string(base) : "code" + std::to_string(dl.code) + "_";
    s += std::to_string(dl.bits);
    if (dl.lanes != 1) s += "x" + std::to_string(dl.lanes);
    return s;
  }

 private:
  static DLDataType Parse(const std::string& name) {
    if (name == "bool") return {kDLBool, 8, 1};
    static const std::pair<const char*, uint8_t> prefixes[] = {
        {"uint", kDLUInt}, {"int", kDLInt}, {"bfloat", kDLBfloat}, {"float", kDLFloat}};
    for (const auto& p : prefixes) {
      size_t n = std::strlen(p.first);
      if (name.compare(0, n, p.first) != 0 || name.size() == n || name.size() > n + 3) continue;
      int bits = 0;
      bool digits = true;
      for (size_t i = n; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') digits = false;
        else bits = bits * 10 + (name[i] - '0');
      }
      if (digits && bits > 0 && bits <= 128) return {p.second, uint8_t(bits), 1};
    }
    detail::Fail(KILN_ERR_INVALID_ARGUMENT, "kiln::DataType: unknown dtype '" + name + "'");
  }
};

// ---- NDArray -----------------------------------------------------------------------------------

/// A shared handle to a kiln_tensor_t (a DLTensor plus its memory). Copies share the tensor.
class NDArray {
 public:
  NDArray() = default;
  /// Takes over one reference to `tensor` (retains it first when `retain`).
  explicit NDArray(kiln_tensor_t* tensor, bool retain = false) : t_(tensor) {
    if (retain) kiln_tensor_retain(t_);
  }
  NDArray(const NDArray& o) : t_(o.t_) { kiln_tensor_retain(t_); }
  NDArray(NDArray&& o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
  NDArray& operator=(NDArray o) noexcept {
    std::swap(t_, o.t_);
    return *this;
  }
  ~NDArray() { kiln_tensor_release(t_); }

  /// A new tensor with uninitialised, 64-byte-aligned memory.
  static NDArray Empty(const std::vector<int64_t>& shape, DataType dtype = DataType::Float32(),
                       Device device = Device::CPU()) {
    if (shape.size() > KILN_MAX_NDIM)
      detail::Fail(KILN_ERR_INVALID_ARGUMENT, "kiln::NDArray::Empty: too many dimensions");
    kiln_tensor_t* t = nullptr;
    detail::Check(kiln_tensor_create(shape.data(), int32_t(shape.size()), dtype, device, &t));
    return NDArray(t);
  }

  /// A new tensor of `shape` holding a copy of `data` (data.size() must equal the element count).
  template <typename T>
  static NDArray FromVector(const std::vector<T>& data, const std::vector<int64_t>& shape) {
    NDArray a = Empty(shape, DataType::Of<T>());
    if (uint64_t(a.numel()) != data.size())
      detail::Fail(KILN_ERR_SHAPE_MISMATCH,
                   "kiln::NDArray::FromVector: " + std::to_string(data.size()) +
                       " values for shape " + ShapeString(shape));
    if (!data.empty()) std::memcpy(a.data<T>(), data.data(), data.size() * sizeof(T));
    return a;
  }
  template <typename T>
  static NDArray FromVector(const std::vector<T>& data) {
    return FromVector(data, {int64_t(data.size())});
  }

  /// A new string tensor of `shape` holding copies of `values` (UTF-8; a model's string
  /// operators refuse text that is not): one block of {offset, length} records, one per
  /// element, then the bytes they point into (docs/strings.md), owned by the tensor.
  static NDArray FromStrings(const std::vector<std::string>& values,
                             const std::vector<int64_t>& shape) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    if (shape.size() > KILN_MAX_NDIM || uint64_t(count) != values.size())
      detail::Fail(KILN_ERR_SHAPE_MISMATCH, "kiln::NDArray::FromStrings: " +
                                                std::to_string(values.size()) +
                                                " strings for shape " + ShapeString(shape));
    const size_t records = values.size() * 2 * sizeof(uint64_t);
    size_t total = records;
    for (const std::string& v : values) total += v.size();
    char* block = static_cast<char*>(std::malloc(total ? total : 1));
    if (!block) throw std::bad_alloc();
    uint64_t offset = records;
    for (size_t i = 0; i < values.size(); ++i) {
      const uint64_t record[2] = {offset, uint64_t(values[i].size())};
      std::memcpy(block + i * sizeof record, record, sizeof record);
      if (!values[i].empty()) std::memcpy(block + offset, values[i].data(), values[i].size());
      offset += values[i].size();
    }
    DLTensor dl{};
    dl.data = block;
    dl.device = Device::CPU();
    dl.ndim = int32_t(shape.size());
    dl.dtype = DataType::String();
    dl.shape = const_cast<int64_t*>(shape.data());
    kiln_tensor_t* t = nullptr;
    kiln_status_t st = kiln_tensor_wrap(&dl, FreeBlock, block, &t);
    if (st != KILN_OK) std::free(block);
    detail::Check(st);
    return NDArray(t);
  }
  static NDArray FromStrings(const std::vector<std::string>& values) {
    return FromStrings(values, {int64_t(values.size())});
  }
  static void FreeBlock(void* block) { std::free(block); }

  /// The elements of a string tensor in row-major order (its records must lie in its block,
  /// as those the string library makes do).
  std::vector<std::string> ToStrings() const {
    if (dtype() != DataType::String())
      detail::Fail(KILN_ERR_DTYPE_MISMATCH, "kiln::NDArray::ToStrings: tensor has dtype " +
                                                dtype().ToString() + ", not string");
    RequireContiguous("ToStrings");
    const char* block = static_cast<const char*>(raw_data());
    std::vector<std::string> out(static_cast<size_t>(numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      uint64_t record[2];
      std::memcpy(record, block + i * sizeof record, sizeof record);
      out[i].assign(block + record[0], size_t(record[1]));
    }
    return out;
  }

  /// Wraps memory owned by someone else without copying; deleter(ctx) runs at the last release.
  static NDArray Wrap(const DLTensor& dl, kiln_deleter_fn deleter = nullptr, void* ctx = nullptr) {
    kiln_tensor_t* t = nullptr;
    detail::Check(kiln_tensor_wrap(&dl, deleter, ctx, &t));
    return NDArray(t);
  }

  /// Imports a DLPack tensor without copying; on success the NDArray owns `managed` (its deleter
  /// runs at the last release), on failure (kiln::Error) the caller still does.
  static NDArray FromDLPack(DLManagedTensorVersioned* managed) {
    kiln_tensor_t* t = nullptr;
    detail::Check(kiln_tensor_from_dlpack(managed, &t));
    return NDArray(t);
  }
  /// Exports without copying; the consumer calls result->deleter(result) exactly once.
  DLManagedTensorVersioned* ToDLPack() const {
    DLManagedTensorVersioned* m = nullptr;
    detail::Check(kiln_tensor_to_dlpack(checked(), &m));
    return m;
  }

  bool defined() const noexcept { return t_ != nullptr; }
  explicit operator bool() const noexcept { return defined(); }
  kiln_tensor_t* get() const noexcept { return t_; }
  /// Gives up ownership of the reference without releasing it.
  kiln_tensor_t* release() noexcept { return std::exchange(t_, nullptr); }

  /// The DLTensor, valid while this handle (or a copy) lives. Do not change its fields.
  const DLTensor& dltensor() const { return *kiln_tensor_dltensor(checked()); }
  const DLTensor* operator->() const { return &dltensor(); }

  int32_t ndim() const { return dltensor().ndim; }
  std::vector<int64_t> shape() const {
    const DLTensor& d = dltensor();
    return std::vector<int64_t>(d.shape, d.shape + d.ndim);
  }
  DataType dtype() const { return dltensor().dtype; }
  Device device() const { return dltensor().device; }
  int64_t numel() const {
    const DLTensor& d = dltensor();
    int64_t n = 1;
    for (int32_t i = 0; i < d.ndim; ++i) n *= d.shape[i];
    return n;
  }
  size_t nbytes() const { return kiln_tensor_nbytes(checked()); }
  bool read_only() const { return kiln_tensor_is_read_only(checked()) != 0; }

  /// Raw data (data + byte_offset).
  void* raw_data() const {
    const DLTensor& d = dltensor();
    return static_cast<char*>(d.data) + d.byte_offset;
  }
  /// Typed data; throws KILN_ERR_DTYPE_MISMATCH when T is not the tensor's dtype.
  template <typename T>
  T* data() const {
    DataType want = DataType::Of<std::remove_cv_t<T>>();
    if (dtype() != want)
      detail::Fail(KILN_ERR_DTYPE_MISMATCH, "kiln::NDArray::data: tensor has dtype " +
                                                dtype().ToString() + ", asked for " +
                                                want.ToString() +
                                                (dtype() == DataType::String()
                                                     ? " (a string tensor: use ToStrings())"
                                                     : ""));
    return static_cast<T*>(raw_data());
  }
  /// A copy of the elements in row-major order (the tensor must be contiguous).
  template <typename T>
  std::vector<T> ToVector() const {
    const T* p = data<const T>();
    RequireContiguous("ToVector");
    return std::vector<T>(p, p + numel());
  }
  /// Copies `values` into the tensor (same element count and dtype).
  template <typename T>
  void CopyFrom(const std::vector<T>& values) {
    T* p = data<T>();
    RequireContiguous("CopyFrom");
    if (uint64_t(numel()) != values.size())
      detail::Fail(KILN_ERR_SHAPE_MISMATCH, "kiln::NDArray::CopyFrom: " +
                                                std::to_string(values.size()) +
                                                " values for shape " + ShapeString(shape()));
    if (!values.empty()) std::memcpy(p, values.data(), values.size() * sizeof(T));
  }

  static std::string ShapeString(const std::vector<int64_t>& shape) {
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
  }

 private:
  kiln_tensor_t* checked() const {
    if (!t_) detail::Fail(KILN_ERR_INVALID_STATE, "kiln::NDArray: empty (moved-from) handle");
    return t_;
  }
  void RequireContiguous(const char* what) const {
    const DLTensor& d = dltensor();
    int64_t expect = 1;
    for (int32_t i = d.ndim - 1; i >= 0; --i) {
      if (d.shape[i] != 1 && d.strides[i] != expect)
        detail::Fail(KILN_ERR_INVALID_ARGUMENT,
                     std::string("kiln::NDArray::") + what + ": tensor is not contiguous");
      expect *= d.shape[i];
    }
  }

  kiln_tensor_t* t_ = nullptr;
};

// ---- Module, Function, Value -------------------------------------------------------------------

class Function;
class Value;

/// A module (a kernel library or a VM): a move-only owner of one kiln_module_t reference.
class Module {
 public:
  Module() = default;
  explicit Module(kiln_module_t* m, bool retain = false) : m_(m) {
    if (retain) kiln_module_retain(m_);
  }
  Module(Module&& o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
  Module& operator=(Module&& o) noexcept {
    if (this != &o) {
      kiln_module_release(m_);
      m_ = std::exchange(o.m_, nullptr);
    }
    return *this;
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module() { kiln_module_release(m_); }

  /// Loads a kernel library / exported model (a path; one without '/' is relative to the cwd).
  static Module Load(const std::string& path) {
    kiln_module_t* m = nullptr;
    detail::Check(kiln_module_load_library(path.c_str(), &m));
    return Module(m);
  }
  /// A model linked into the program: its library table plus executable blob (may be null/0).
  static Module FromStatic(const kiln_library_info_t* info, const uint8_t* blob = nullptr,
                           uint64_t blob_size = 0) {
    kiln_module_t* m = nullptr;
    detail::Check(kiln_module_from_static(info, blob, blob_size, &m));
    return Module(m);
  }

  inline Function GetFunction(const std::string& name) const;
  inline Function operator[](const std::string& name) const;

  /// Another owner of the same module (one more reference).
  Module Share() const { return Module(checked(), true); }
  /// "library" or "vm".
  std::string kind() const { return kiln_module_kind(checked()); }
  std::vector<std::string> FunctionNames() const {
    std::vector<std::string> names;
    int32_t n = kiln_module_num_functions(checked());
    for (int32_t i = 0; i < n; ++i) names.emplace_back(kiln_module_function_name(m_, i));
    return names;
  }

  bool defined() const noexcept { return m_ != nullptr; }
  explicit operator bool() const noexcept { return defined(); }
  kiln_module_t* get() const noexcept { return m_; }
  kiln_module_t* release() noexcept { return std::exchange(m_, nullptr); }

 private:
  kiln_module_t* checked() const {
    if (!m_) detail::Fail(KILN_ERR_INVALID_STATE, "kiln::Module: empty (moved-from) handle");
    return m_;
  }
  kiln_module_t* m_ = nullptr;
};

/// One value returned by a call: a move-only owner of a kiln_value_t. Converts implicitly to
/// Module, NDArray, Function, arithmetic types, std::string and std::vector<Value> (a tuple);
/// a conversion to the wrong kind throws kiln::Error (KILN_ERR_INVALID_ARGUMENT).
class Value {
 public:
  Value() noexcept { v_.kind = KILN_VALUE_NULL; }
  /// Takes over an owned kiln_value_t (e.g. one written by kiln_function_call).
  explicit Value(const kiln_value_t& owned) noexcept : v_(owned) {}
  Value(Value&& o) noexcept : v_(o.v_) { o.v_.kind = KILN_VALUE_NULL; }
  Value& operator=(Value&& o) noexcept {
    if (this != &o) {
      kiln_value_release(&v_);
      v_ = o.v_;
      o.v_.kind = KILN_VALUE_NULL;
    }
    return *this;
  }
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  ~Value() { kiln_value_release(&v_); }

  /// An owned value holding a copy of (or a reference to) `x`: anything a Function accepts.
  template <typename T>
  static Value From(const T& x);
  /// A tuple of owned copies of `items` / of the arguments (converted as Function arguments).
  static inline Value Tuple(const std::vector<Value>& items);
  template <typename... Args>
  static Value TupleOf(const Args&... items);
  /// Hands the owned kiln_value_t to the caller (who releases it); this Value becomes null.
  kiln_value_t Release() noexcept {
    kiln_value_t v = v_;
    v_.kind = KILN_VALUE_NULL;
    return v;
  }

  int32_t kind() const noexcept { return v_.kind; }
  const char* kind_name() const noexcept { return detail::KindName(v_.kind); }
  bool is_null() const noexcept { return v_.kind == KILN_VALUE_NULL; }
  /// The underlying value, borrowed (owned by this Value).
  const kiln_value_t& raw() const noexcept { return v_; }

  NDArray AsNDArray() const { return NDArray(Expect(KILN_VALUE_TENSOR).u.tensor, true); }
  Module AsModule() const { return Module(Expect(KILN_VALUE_MODULE).u.module, true); }
  inline Function AsFunction() const;
  int64_t AsInt() const { return Expect(KILN_VALUE_INT).u.i; }
  double AsFloat() const {
    return v_.kind == KILN_VALUE_INT ? double(v_.u.i) : Expect(KILN_VALUE_FLOAT).u.f;
  }
  std::string AsString() const { return Expect(KILN_VALUE_STRING).u.s; }
  Device AsDevice() const { return Expect(KILN_VALUE_DEVICE).u.device; }
  /// Tuple items (owned copies).
  std::vector<Value> AsTuple() const {
    kiln_tuple_t* t = Expect(KILN_VALUE_TUPLE).u.tuple;
    std::vector<Value> items;
    int32_t n = kiln_tuple_size(t);
    items.reserve(size_t(n));
    for (int32_t i = 0; i < n; ++i) items.push_back((*this)[i]);
    return items;
  }
  /// Number of items of a tuple.
  int32_t size() const { return kiln_tuple_size(Expect(KILN_VALUE_TUPLE).u.tuple); }
  /// Item `index` of a tuple (an owned copy).
  Value operator[](int32_t index) const {
    kiln_value_t item;
    item.kind = KILN_VALUE_NULL;
    detail::Check(kiln_tuple_get_item(Expect(KILN_VALUE_TUPLE).u.tuple, index, &item));
    return Value(item);
  }

  operator NDArray() const { return AsNDArray(); }               // NOLINT
  operator Module() const { return AsModule(); }                 // NOLINT
  inline operator Function() const;                              // NOLINT
  operator std::string() const { return AsString(); }            // NOLINT
  operator std::vector<Value>() const { return AsTuple(); }      // NOLINT
  operator Device() const { return AsDevice(); }                 // NOLINT
  template <typename T, typename = std::enable_if_t<std::is_arithmetic<T>::value>>
  operator T() const {  // NOLINT
    if (std::is_floating_point<T>::value) return static_cast<T>(AsFloat());
    return static_cast<T>(AsInt());
  }

 private:
  const kiln_value_t& Expect(int32_t kind) const {
    if (v_.kind != kind)
      detail::Fail(KILN_ERR_INVALID_ARGUMENT, std::string("kiln::Value: expected a ") +
                                                  detail::KindName(kind) + ", got " +
                                                  kind_name());
    return v_;
  }
  kiln_value_t v_;
};

namespace detail {
// Borrowed kiln_value_t views of C++ arguments (valid for the duration of the call).
inline kiln_value_t Arg(const NDArray& a) {
  kiln_value_t v;
  v.kind = KILN_VALUE_TENSOR;
  v.u.tensor = a.get();
  if (!v.u.tensor) Fail(KILN_ERR_INVALID_STATE, "kiln::Function: argument is an empty NDArray");
  return v;
}
inline kiln_value_t Arg(const Module& m) {
  kiln_value_t v;
  v.kind = KILN_VALUE_MODULE;
  v.u.module = m.get();
  if (!v.u.module) Fail(KILN_ERR_INVALID_STATE, "kiln::Function: argument is an empty Module");
  return v;
}
inline kiln_value_t Arg(const Function& f);
inline kiln_value_t Arg(const Value& x) { return x.raw(); }
inline kiln_value_t Arg(Device d) {
  kiln_value_t v;
  v.kind = KILN_VALUE_DEVICE;
  v.u.device = d.dl;
  return v;
}
inline kiln_value_t Arg(DLDevice d) { return Arg(Device(d)); }
inline kiln_value_t Arg(const char* s) {
  kiln_value_t v;
  v.kind = KILN_VALUE_STRING;
  v.u.s = s;
  if (!s) v.kind = KILN_VALUE_NULL;
  return v;
}
inline kiln_value_t Arg(const std::string& s) { return Arg(s.c_str()); }
inline kiln_value_t Arg(std::nullptr_t) {
  kiln_value_t v;
  v.kind = KILN_VALUE_NULL;
  return v;
}
template <typename T, typename = std::enable_if_t<std::is_arithmetic<T>::value>>
inline kiln_value_t Arg(T x) {
  kiln_value_t v;
  if (std::is_floating_point<T>::value) {
    v.kind = KILN_VALUE_FLOAT;
    v.u.f = double(x);
  } else {
    v.kind = KILN_VALUE_INT;
    v.u.i = int64_t(x);
  }
  return v;
}
}  // namespace detail

/// A callable function: a move-only owner of one kiln_function_t reference.
class Function {
 public:
  Function() = default;
  explicit Function(kiln_function_t* f, bool retain = false) : f_(f) {
    if (retain) kiln_function_retain(f_);
  }
  Function(Function&& o) noexcept : f_(std::exchange(o.f_, nullptr)) {}
  Function& operator=(Function&& o) noexcept {
    if (this != &o) {
      kiln_function_release(f_);
      f_ = std::exchange(o.f_, nullptr);
    }
    return *this;
  }
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;
  ~Function() { kiln_function_release(f_); }

  /// Calls the function. Arguments: NDArray, Module, Function, Value, Device/DLDevice, integers,
  /// floating point, strings, nullptr. Returns the result (null for functions returning nothing).
  template <typename... Args>
  Value operator()(Args&&... args) const {
    std::array<kiln_value_t, sizeof...(Args) == 0 ? 1 : sizeof...(Args)> packed{
        {detail::Arg(std::forward<Args>(args))...}};
    return CallPacked(packed.data(), int32_t(sizeof...(Args)));
  }
  /// Calls with borrowed values already packed.
  Value CallPacked(const kiln_value_t* args, int32_t num_args) const {
    kiln_value_t out;
    out.kind = KILN_VALUE_NULL;
    detail::Check(kiln_function_call(checked(), num_args ? args : nullptr, num_args, &out));
    return Value(out);
  }
  Value CallPacked(const std::vector<Value>& args) const {
    std::vector<kiln_value_t> raw;
    raw.reserve(args.size());
    for (const Value& a : args) raw.push_back(a.raw());
    return CallPacked(raw.data(), int32_t(raw.size()));
  }

  /// A function implemented in C++, e.g. an external function for kiln::RegisterFunction.
  /// `f(const std::vector<Value>& args)` gets owned copies of the arguments and returns a Value,
  /// anything Value::From accepts, or void (null). A kiln::Error it throws reaches the caller
  /// with its code and message; another std::exception as KILN_ERR_RUNTIME.
  template <typename F>
  static Function FromCallable(const std::string& name, F f) {
    using Fn = std::function<Value(const std::vector<Value>&)>;
    auto* ctx = new Fn([f = std::move(f)](const std::vector<Value>& args) mutable -> Value {
      using R = std::invoke_result_t<F&, const std::vector<Value>&>;
      if constexpr (std::is_void<R>::value) {
        f(args);
        return Value();
      } else if constexpr (std::is_same<std::decay_t<R>, Value>::value) {
        return f(args);
      } else {
        return Value::From(f(args));
      }
    });
    kiln_callback_fn trampoline = [](void* c, const kiln_value_t* args, int32_t num_args,
                                     kiln_value_t* out) -> kiln_status_t {
      try {
        std::vector<Value> owned;
        owned.reserve(size_t(num_args > 0 ? num_args : 0));
        for (int32_t i = 0; i < num_args; ++i) {
          kiln_value_t copy;
          copy.kind = KILN_VALUE_NULL;
          detail::Check(kiln_value_copy(&args[i], &copy));
          owned.emplace_back(copy);
        }
        Value result = (*static_cast<Fn*>(c))(owned);
        if (out) *out = result.Release();
        return KILN_OK;
      } catch (const Error& e) {
        return kiln_set_last_error(e.code(), e.what());
      } catch (const std::bad_alloc&) {
        return kiln_set_last_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
      } catch (const std::exception& e) {
        return kiln_set_last_error(KILN_ERR_RUNTIME, e.what());
      } catch (...) {
        return kiln_set_last_error(KILN_ERR_RUNTIME, "unknown C++ exception");
      }
    };
    kiln_function_t* fn = nullptr;
    kiln_status_t status = kiln_function_create(
        name.c_str(), trampoline, ctx, [](void* c) { delete static_cast<Fn*>(c); }, &fn);
    if (status != KILN_OK) {
      delete ctx;  // not called on failure
      detail::Check(status);
    }
    return Function(fn);
  }

  std::string name() const { return kiln_function_name(checked()); }
  Function Share() const { return Function(checked(), true); }
  bool defined() const noexcept { return f_ != nullptr; }
  explicit operator bool() const noexcept { return defined(); }
  kiln_function_t* get() const noexcept { return f_; }
  kiln_function_t* release() noexcept { return std::exchange(f_, nullptr); }

 private:
  kiln_function_t* checked() const {
    if (!f_) detail::Fail(KILN_ERR_INVALID_STATE, "kiln::Function: empty (moved-from) handle");
    return f_;
  }
  kiln_function_t* f_ = nullptr;
};

inline Function Module::GetFunction(const std::string& name) const {
  kiln_function_t* f = nullptr;
  detail::Check(kiln_module_get_function(checked(), name.c_str(), &f));
  return Function(f);
}
inline Function Module::operator[](const std::string& name) const { return GetFunction(name); }
inline Function Value::AsFunction() const {
  return Function(Expect(KILN_VALUE_FUNCTION).u.function, true);
}
inline Value::operator Function() const { return AsFunction(); }
inline kiln_value_t detail::Arg(const Function& f) {
  kiln_value_t v;
  v.kind = KILN_VALUE_FUNCTION;
  v.u.function = f.get();
  if (!v.u.function) Fail(KILN_ERR_INVALID_STATE, "kiln::Function: argument is an empty Function");
  return v;
}

template <typename T>
Value Value::From(const T& x) {
  kiln_value_t borrowed = detail::Arg(x), owned;
  owned.kind = KILN_VALUE_NULL;
  detail::Check(kiln_value_copy(&borrowed, &owned));
  return Value(owned);
}
inline Value Value::Tuple(const std::vector<Value>& items) {
  std::vector<kiln_value_t> raw;
  raw.reserve(items.size());
  for (const Value& v : items) raw.push_back(v.raw());
  kiln_tuple_t* t = nullptr;
  detail::Check(kiln_tuple_create(raw.data(), int32_t(raw.size()), &t));
  kiln_value_t v;
  v.kind = KILN_VALUE_TUPLE;
  v.u.tuple = t;
  return Value(v);
}
template <typename... Args>
Value Value::TupleOf(const Args&... items) {
  std::array<kiln_value_t, sizeof...(Args) == 0 ? 1 : sizeof...(Args)> raw{{detail::Arg(items)...}};
  kiln_tuple_t* t = nullptr;
  detail::Check(kiln_tuple_create(raw.data(), int32_t(sizeof...(Args)), &t));
  kiln_value_t v;
  v.kind = KILN_VALUE_TUPLE;
  v.u.tuple = t;
  return Value(v);
}

/// The process-wide registry of external functions that executables call ("env.relu", ...).
inline void RegisterFunction(const std::string& name, const Function& f, bool override = false) {
  detail::Check(kiln_register_function(name.c_str(), f.get(), override ? 1 : 0));
}
inline Function GetRegisteredFunction(const std::string& name) {
  kiln_function_t* f = nullptr;
  detail::Check(kiln_get_registered_function(name.c_str(), &f));
  return Function(f);
}
inline void UnregisterFunction(const std::string& name) {
  detail::Check(kiln_unregister_function(name.c_str()));
}

/// Sets / reads the number of threads the runtime's parallel loops use (0: one per core).
inline void SetNumThreads(int32_t n) { detail::Check(kiln_set_num_threads(n)); }
inline int32_t GetNumThreads() { return kiln_get_num_threads(); }

}  // namespace kiln

#endif  // KILN_HPP_
