// errors_cpp.cpp — the catalogue of bad inputs (error_catalogue.py, docs/errors.md) through the
// C++ binding (bindings/cpp/kiln.hpp): `errors_cpp DIR` provokes every case on the artifacts in
// DIR and prints NAME<TAB>STATUS<TAB>MESSAGE per case (kiln::Error's status_string() and what()),
// or NAME<TAB>n/a<TAB>WHY.
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "kiln.hpp"

namespace {

std::string g_dir;

std::string P(const std::string& name) { return g_dir + "/" + name; }

void Case(const char* name, const std::function<void()>& body) {
  try {
    body();
    std::printf("%s\tok\t\n", name);
  } catch (const kiln::Error& e) {
    std::printf("%s\t%s\t%s\n", name, e.status_string(), e.what());
  } catch (const std::exception& e) {
    std::printf("%s\tstd::exception\t%s\n", name, e.what());
  }
}

void NA(const char* name, const char* why) { std::printf("%s\tn/a\t%s\n", name, why); }

kiln::Module Vm(const std::string& file) {
  kiln::Module lib = kiln::Module::Load(P(file));
  return lib.GetFunction("load_executable")();
}

kiln::Module Ready(const std::string& file) {
  kiln::Module vm = Vm(file);
  vm.GetFunction("init")(kiln::Device::CPU());
  return vm;
}

kiln::NDArray Zeros(const std::vector<int64_t>& shape, kiln::DataType dtype = kiln::DataType::Float32()) {
  kiln::NDArray a = kiln::NDArray::Empty(shape, dtype);
  std::memset(a.raw_data(), 0, a.nbytes());
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  using kiln::Module;
  using kiln::NDArray;
  Case("missing_file", [] { Module::Load(P("missing.so")); });
  Case("not_elf", [] { Module::Load(P("not_elf.so")); });
  Case("truncated_library", [] { Module::Load(P("truncated.so")); });
  Case("not_a_kiln_library", [] { Module::Load(P("not_kiln.so")); });
  Case("foreign_isa", [] { Module::Load(P("foreign_isa.so")); });
  Case("missing_cpu_feature", [] { Module::Load(P("cpu_feature.so")); });
  Case("kernel_abi_version", [] { Module::Load(P("bad_abi.so")); });
  Case("newer_format", [] { Vm("newer_format.so"); });
  Case("corrupt_blob", [] { Vm("corrupt_blob.so"); });
  Case("no_executable", [] { Module::Load(P("kernels.so")).GetFunction("load_executable"); });
  Case("load_executable_args", [] { Module::Load(P("mlp.so")).GetFunction("load_executable")(1); });
  Case("misaligned_static_blob", [] {
    // mlp.so's blob as a static bundle over the fixture kernels' table, one byte off alignment
    void* kernels = dlopen(P("kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!kernels) throw std::runtime_error("cannot dlopen kernels.so");
    auto* info = static_cast<const kiln_library_info_t*>(dlsym(kernels, "kiln_library_info"));
    std::ifstream f(P("mlp_blob.bin"), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    NDArray buf = NDArray::Empty({int64_t(bytes.size() + 64)}, kiln::DataType::Of<uint8_t>());
    uint8_t* at = static_cast<uint8_t*>(buf.raw_data()) + 1;
    std::memcpy(at, bytes.data(), bytes.size());
    Module m = Module::FromStatic(info, at, bytes.size());
    m.GetFunction("load_executable")();
  });
  Module mlp = Ready("mlp.so");
  NDArray x = Zeros({1, 64});
  Case("unknown_function", [&] { mlp.GetFunction("nope"); });
  Case("call_before_init", [&] { Vm("mlp.so").GetFunction("forward")(x); });
  Case("init_on_gpu", [] { Vm("mlp.so").GetFunction("init")(DLDevice{kDLCUDA, 0}); });
  Case("init_bad_argument", [] { Vm("mlp.so").GetFunction("init")(3); });
  Case("missing_external", [] { Vm("extern.so").GetFunction("init")(kiln::Device::CPU()); });
  Case("profile_unknown", [&] { mlp.GetFunction("profile")("nope", x); });
  Case("profile_not_a_name", [&] { mlp.GetFunction("profile")(3); });
  kiln::Function forward = mlp.GetFunction("forward");
  Case("wrong_shape", [&] { forward(Zeros({1, 65})); });
  Case("wrong_ndim", [&] { forward(Zeros({64})); });
  Case("wrong_dtype", [&] { forward(Zeros({1, 64}, kiln::DataType::Int32())); });
  Case("too_few_arguments", [&] { forward(); });
  Case("too_many_arguments", [&] { forward(x, x); });
  Case("null_argument", [&] { forward(nullptr); });
  Case("int_argument", [&] { forward(3); });
  Case("string_argument", [&] { forward("x"); });
  NDArray wide = Zeros({1, 128});
  Case("non_contiguous", [&] {
    DLTensor dl = wide.dltensor();
    int64_t shape[2] = {1, 64}, strides[2] = {128, 2};
    dl.shape = shape;
    dl.strides = strides;
    forward(NDArray::Wrap(dl));
  });
  Case("argument_on_gpu", [&] {
    DLTensor dl = x.dltensor();
    dl.device = DLDevice{kDLCUDA, 0};
    forward(NDArray::Wrap(dl));
  });
  Module sym = Ready("sym.so");
  Case("symbolic_over_bound", [&] { sym.GetFunction("forward")(Zeros({17, 64})); });
  Case("symbolic_wrong_static_dim", [&] { sym.GetFunction("forward")(Zeros({5, 63})); });
  Case("condition_dtype", [] { Ready("if.so").GetFunction("main")(Zeros({}), Zeros({2, 4})); });
  Case("aliased_output", [] {
    NDArray a = Zeros({8});
    Module::Load(P("kernels.so")).GetFunction("main")(a, a);
  });
  Case("tensor_negative_extent", [] { NDArray::Empty({-1}); });
  Case("tensor_size_overflow", [] { NDArray::Empty({int64_t(1) << 40, int64_t(1) << 40}); });
  Case("tensor_on_gpu", [] { NDArray::Empty({4}, kiln::DataType::Float32(), kiln::Device(DLDevice{kDLCUDA, 0})); });
  auto noop = kiln::Function::FromCallable("noop", [](const std::vector<kiln::Value>&) {});
  Case("register_empty_name", [&] { kiln::RegisterFunction("", noop); });
  kiln::RegisterFunction("test.taken", noop, true);
  Case("register_taken_name", [&] { kiln::RegisterFunction("test.taken", noop); });
  kiln::UnregisterFunction("test.taken");
  Case("unregister_unknown", [] { kiln::UnregisterFunction("test.never"); });
  Case("use_after_close", [&] {
    kiln::Function f = mlp.GetFunction("forward");
    kiln::Function g = std::move(f);
    f(x);  // NOLINT(bugprone-use-after-move): the moved-from handle is what is tested
  });
  NA("malformed_onnx", "ONNX models are imported by the compiler, in Python");
  return 0;
}
