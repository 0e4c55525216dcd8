// Exercises bindings/cpp/kiln.hpp against an exported MLP (tests/deploy/test_cpp_binding.py
// builds it, once plainly and once with -fsanitize=address,undefined, and checks the output).
//
//   binding_test <mlp.so> <corrupt.so> <truncated.so> <missing.so>
//                x.bin w1.bin b1.bin w2.bin b2.bin
//
// (the arguments of forward as raw little-endian float32 files). Prints
//   OUT <value>                        the 10 outputs of forward (the API.md block as written)
//   ERR <case> <code> <message>        one line per expected kiln::Error
//   OK <case>                          checks that passed
//   FAIL <case> <why>                  checks that failed (the test fails on any)
// and "DONE" last.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "kiln.hpp"

namespace {

int failures = 0;

void Fail(const std::string& name, const std::string& why) {
  std::printf("FAIL %s %s\n", name.c_str(), why.c_str());
  ++failures;
}
void Check(bool ok, const std::string& name, const std::string& why = "check failed") {
  if (ok) std::printf("OK %s\n", name.c_str());
  else Fail(name, why);
}

// Runs `body`, which must throw kiln::Error; prints it as an ERR line.
template <typename F>
void ExpectError(const std::string& name, F&& body) {
  try {
    body();
    Fail(name, "no kiln::Error thrown");
  } catch (const kiln::Error& e) {
    std::printf("ERR %s 0x%02x %s\n", name.c_str(), unsigned(e.code()), e.what());
  } catch (const std::exception& e) {
    Fail(name, std::string("other exception: ") + e.what());
  }
}

kiln::NDArray ReadFloats(const std::string& path, std::vector<int64_t> shape) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(values.data()));
  return kiln::NDArray::FromVector(values, shape);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: %s <mlp.so> <corrupt.so> <truncated.so> <missing.so> "
                 "x.bin w1.bin b1.bin w2.bin b2.bin\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  try {
    kiln::NDArray x = ReadFloats(argv[5], {1, 784});
    kiln::NDArray w1 = ReadFloats(argv[6], {256, 784});
    kiln::NDArray b1 = ReadFloats(argv[7], {256});
    kiln::NDArray w2 = ReadFloats(argv[8], {10, 256});
    kiln::NDArray b2 = ReadFloats(argv[9], {10});

    // ---- API.md section 5, as written ----
    kiln::Module lib = kiln::Module::Load(path);
    kiln::Module vm = lib.GetFunction("load_executable")();
    vm.GetFunction("init")(kiln::Device::CPU());
    kiln::NDArray out = vm.GetFunction("forward")(x, w1, b1, w2, b2);
    for (float v : out.ToVector<float>()) std::printf("OUT %.9g\n", v);

    // ---- handles, values, tensors ----
    Check(lib.kind() == "library" && vm.kind() == "vm", "module_kind");
    {
      std::vector<std::string> names = vm.FunctionNames();
      bool has_forward = false;
      for (const auto& n : names) has_forward |= n == "forward";
      Check(has_forward, "function_names");
    }
    Check(out.shape() == std::vector<int64_t>{1, 10} && out.dtype() == kiln::DataType("float32") &&
              out.dtype().ToString() == "float32" && out.device() == kiln::Device::CPU() &&
              out.nbytes() == 40 && out->ndim == 2,
          "output_metadata");
    {
      kiln::Function forward = vm["forward"];  // operator[], look up once, call many times
      kiln::NDArray again = forward(x, w1, b1, w2, b2);
      Check(again.ToVector<float>() == out.ToVector<float>(), "call_again");
      kiln::Value v = forward(x, w1, b1, w2, b2);
      Check(v.kind() == KILN_VALUE_TENSOR && std::string(v.kind_name()) == "tensor",
            "value_kind");
      kiln::NDArray from_value = v;  // Value keeps its reference; the NDArray retains
      Check(from_value.get() == v.raw().u.tensor, "value_to_ndarray_shares");
    }
    {
      kiln::NDArray a = kiln::NDArray::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
      kiln::NDArray b = a;  // copy = retain: same tensor
      b.data<float>()[0] = 42.0f;
      Check(a.get() == b.get() && a.ToVector<float>()[0] == 42.0f, "ndarray_copy_shares");
      a = kiln::NDArray();  // drop one owner; b still valid
      Check(b.ToVector<float>() == std::vector<float>({42, 2, 3, 4, 5, 6}),
            "ndarray_shared_lifetime");
      kiln::NDArray e = kiln::NDArray::Empty({3, 0}, "int32");
      Check(e.numel() == 0 && e.ToVector<int32_t>().empty() && e.dtype() == kiln::DataType::Int32(),
            "ndarray_empty_extent");
      kiln::NDArray i64 = kiln::NDArray::FromVector<int64_t>({7, -8});
      Check(i64.shape() == std::vector<int64_t>{2} && i64.ToVector<int64_t>()[1] == -8 &&
                i64.dtype().ToString() == "int64",
            "ndarray_int64");
      const DLTensor& dl = b.dltensor();
      Check(dl.strides[0] == 3 && dl.strides[1] == 1 &&
                reinterpret_cast<uintptr_t>(dl.data) % KILN_ALIGNMENT == 0,
            "dltensor_access");
      {
        // Wrap memory owned elsewhere: no copy; the deleter runs at the last release.
        static int deleted = 0;
        std::vector<float> storage = {1, -2, 3};
        int64_t extent = 3;
        DLTensor dl{};
        dl.data = storage.data();
        dl.device = kiln::Device::CPU();
        dl.ndim = 1;
        dl.dtype = kiln::DataType::Float32();
        dl.shape = &extent;
        kiln::NDArray w = kiln::NDArray::Wrap(dl, [](void*) { ++deleted; });
        kiln::NDArray w2 = w;
        w.data<float>()[1] = 5;
        w = kiln::NDArray();
        bool alive = deleted == 0 && storage[1] == 5.0f && w2.shape() == std::vector<int64_t>{3};
        w2 = kiln::NDArray();
        Check(alive && deleted == 1, "ndarray_wrap");
      }
      b.CopyFrom(std::vector<float>{6, 5, 4, 3, 2, 1});
      Check(b.data<float>()[5] == 1.0f, "ndarray_copy_from");
    }
    {
      // profile returns a tuple of rows (name, kind, calls, total_us): tuple-of-values conversions.
      std::vector<kiln::Value> rows = vm.GetFunction("profile")("forward", x, w1, b1, w2, b2);
      bool total = false;
      for (const kiln::Value& row : rows) {
        std::vector<kiln::Value> cols = row;
        std::string name = cols.at(0), kind = cols.at(1);
        int64_t calls = cols.at(2);
        double us = cols.at(3);
        total |= kind == "total" && calls >= 1 && us >= 0.0 && row.size() == 4 && !name.empty();
      }
      Check(!rows.empty() && total, "profile_tuple");
    }

    {
      // Functions implemented in C++: arguments and results cross as values, errors as codes.
      kiln::Function add =
          kiln::Function::FromCallable("add", [](const std::vector<kiln::Value>& a) {
            return int64_t(a.at(0)) + int64_t(a.at(1));
          });
      int64_t sum = add(40, 2);
      std::string hello = kiln::Function::FromCallable(
          "greet", [](const std::vector<kiln::Value>& a) {
            return kiln::Value::From("hello " + std::string(a.at(0)));
          })("kiln");
      double half = kiln::Function::FromCallable(
          "half", [](const std::vector<kiln::Value>& a) { return double(a.at(0)) / 2; })(3);
      Check(sum == 42 && hello == "hello kiln" && half == 1.5 && add.name() == "add",
            "callback_values");
      // A DPS external function, registered in the process-wide registry, writing its output.
      kiln::Function relu = kiln::Function::FromCallable(
          "cpp.relu", [](const std::vector<kiln::Value>& a) {
            kiln::NDArray src_t = a.at(0), dst_t = a.at(1);
            const float* src = src_t.data<float>();
            float* dst = dst_t.data<float>();
            for (int64_t i = 0; i < src_t.numel(); ++i) dst[i] = src[i] > 0 ? src[i] : 0.0f;
          });
      kiln::RegisterFunction("cpp.relu", relu, true);
      kiln::Function looked_up = kiln::GetRegisteredFunction("cpp.relu");
      kiln::NDArray in = kiln::NDArray::FromVector<float>({-1, 2, -3});
      kiln::NDArray res = kiln::NDArray::Empty({3});
      kiln::Value none = looked_up(in, res);
      Check(none.is_null() && res.ToVector<float>() == std::vector<float>({0, 2, 0}),
            "registered_callback");
      kiln::UnregisterFunction("cpp.relu");
      ExpectError("unregistered", [] { kiln::GetRegisteredFunction("cpp.relu"); });
      ExpectError("callback_kiln_error", [] {
        kiln::Function::FromCallable("f", [](const std::vector<kiln::Value>&) {
          throw kiln::Error(KILN_ERR_SHAPE_MISMATCH, "f: custom shape complaint");
        })();
      });
      ExpectError("callback_std_exception", [] {
        kiln::Function::FromCallable("g", [](const std::vector<kiln::Value>& a) {
          return int64_t(a.at(5));  // std::out_of_range
        })(1);
      });
      // Tuples built in C++, passed through a callback and read back.
      kiln::Value t = kiln::Value::TupleOf(x, 7, 2.5, "s", kiln::Device::CPU());
      kiln::Function ident = kiln::Function::FromCallable(
          "ident", [](const std::vector<kiln::Value>& a) { return kiln::Value::From(a.at(0)); });
      std::vector<kiln::Value> items = ident(t);
      kiln::NDArray t0 = items.at(0);
      Check(items.size() == 5 && t0.get() == x.get() && int(items[1]) == 7 &&
                float(items[2]) == 2.5f && std::string(items[3]) == "s" &&
                kiln::Device(items[4]) == kiln::Device::CPU(),
            "tuple_roundtrip");
      std::vector<kiln::Value> pieces;
      pieces.push_back(kiln::Value::From(1));
      pieces.push_back(kiln::Value::Tuple({}));
      kiln::Value nested = kiln::Value::Tuple(pieces);
      Check(nested.size() == 2 && nested[1].size() == 0 && int64_t(nested[0]) == 1, "tuple_nested");
      // DLPack export and import share memory.
      DLManagedTensorVersioned* m = out.ToDLPack();
      kiln::NDArray back = kiln::NDArray::FromDLPack(m);
      Check(back.raw_data() == out.raw_data() && back.shape() == out.shape(), "dlpack_roundtrip");
    }

    // ---- errors: each runtime error is a kiln::Error with code and message ----
    kiln::Function forward = vm.GetFunction("forward");
    ExpectError("wrong_shape", [&] {
      kiln::NDArray bad = kiln::NDArray::Empty({1, 785}, "float32");
      kiln::NDArray r = forward(bad, w1, b1, w2, b2);
    });
    ExpectError("wrong_dtype", [&] {
      kiln::NDArray bad = kiln::NDArray::Empty({1, 784}, "int32");
      kiln::NDArray r = forward(bad, w1, b1, w2, b2);
    });
    ExpectError("wrong_count", [&] { forward(x); });
    ExpectError("wrong_kind", [&] { forward(1, 2.5, "three", w2, b2); });
    ExpectError("unknown_function", [&] { vm.GetFunction("backward"); });
    ExpectError("before_init", [&] {
      kiln::Module fresh = lib.GetFunction("load_executable")();
      fresh.GetFunction("forward")(x, w1, b1, w2, b2);
    });
    ExpectError("missing_file", [&] { kiln::Module::Load(argv[4]); });
    ExpectError("corrupt_file", [&] {
      kiln::Module m = kiln::Module::Load(argv[2]);
      kiln::Module v = m.GetFunction("load_executable")();
    });
    ExpectError("truncated_file", [&] {
      kiln::Module m = kiln::Module::Load(argv[3]);
      kiln::Module v = m.GetFunction("load_executable")();
    });
    ExpectError("value_wrong_kind", [&] {
      kiln::NDArray r = vm.GetFunction("init")(kiln::Device::CPU());  // init returns null
    });
    ExpectError("data_wrong_type", [&] { out.data<int32_t>(); });
    ExpectError("from_vector_size", [&] { kiln::NDArray::FromVector<float>({1, 2, 3}, {2, 2}); });
    ExpectError("unknown_dtype", [&] { kiln::NDArray::Empty({2}, "float7x"); });
    ExpectError("negative_extent", [&] { kiln::NDArray::Empty({-1}, "float32"); });

    // ---- moved-from handles: empty, destructible, reassignable; using them throws ----
    {
      kiln::Module lib2 = std::move(lib);
      Check(!lib && lib2 && lib2.kind() == "library", "module_move");
      ExpectError("moved_module", [&] { lib.GetFunction("load_executable"); });
      lib = std::move(lib2);  // reassign a moved-from handle
      Check(lib.defined() && !lib2.defined(), "module_move_back");

      kiln::Function f2 = std::move(forward);
      ExpectError("moved_function", [&] { forward(x, w1, b1, w2, b2); });
      kiln::NDArray r = f2(x, w1, b1, w2, b2);
      Check(r.ToVector<float>() == out.ToVector<float>(), "function_move");

      kiln::NDArray x2 = std::move(x);
      ExpectError("moved_ndarray_arg", [&] { f2(x, w1, b1, w2, b2); });
      ExpectError("moved_ndarray_shape", [&] { x.shape(); });
      x = x2;  // copy-assign into a moved-from handle

      kiln::Value v = f2(x, w1, b1, w2, b2);
      kiln::Value v2 = std::move(v);
      Check(v.is_null() && v2.kind() == KILN_VALUE_TENSOR, "value_move");
      ExpectError("moved_value", [&] { kiln::NDArray n = v; });
    }
    // The library stays loaded while a function or VM made from it lives.
    {
      kiln::Function fwd = vm.GetFunction("forward");
      lib = kiln::Module();
      vm = kiln::Module();
      kiln::NDArray r = fwd(x, w1, b1, w2, b2);
      Check(r.ToVector<float>() == out.ToVector<float>(), "function_keeps_module_alive");
    }
  } catch (const std::exception& e) {
    Fail("unexpected", e.what());
  }
  std::printf("DONE\n");
  return failures == 0 ? 0 : 1;
}
