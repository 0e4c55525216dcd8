// A model with string operators through kiln.hpp (tests/deploy/test_cpp_binding.py builds it):
// argv[1] is tests/onnx/string_models.py's model, (x == "cat", x ++ "!") for a string vector x
// of 3, exported as a library. Linked with libkiln_strings, which registers the functions the
// model calls. Prints "ALL OK".
#include <cstdio>
#include <string>
#include <vector>

#include "kiln.hpp"
#include "kiln_strings.h"

#define CHECK(c)                                                    \
  do {                                                              \
    if (!(c)) {                                                     \
      std::printf("FAIL line %d: %s\n", __LINE__, #c);              \
      return 1;                                                     \
    }                                                               \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    kiln::Module vm = kiln::Module::Load(argv[1]).GetFunction("load_executable")();
    kiln::detail::Check(kiln_strings_register());
    vm.GetFunction("init")(kiln::Device::CPU());

    const std::vector<std::string> x = {"cat", "dog", "\xc3\xa9meu"};  // "émeu": UTF-8
    kiln::NDArray in = kiln::NDArray::FromStrings(x);
    CHECK(in.dtype() == kiln::DataType::String() && in.dtype().ToString() == "string");
    CHECK(in.ToStrings() == x);
    std::vector<kiln::Value> out = vm.GetFunction("main")(in);
    CHECK(out.size() == 2);
    CHECK((out[0].AsNDArray().ToVector<bool>() == std::vector<bool>{true, false, false}));
    CHECK((out[1].AsNDArray().ToStrings() ==
           std::vector<std::string>{"cat!", "dog!", "\xc3\xa9meu!"}));
    CHECK(out[1].AsNDArray().shape() == std::vector<int64_t>{3});

    // Empty strings and a 2-D shape round-trip; a wrong count and typed access are refused.
    kiln::NDArray grid = kiln::NDArray::FromStrings({"", "a", "", "bc"}, {2, 2});
    CHECK((grid.ToStrings() == std::vector<std::string>{"", "a", "", "bc"}));
    CHECK(grid.shape() == (std::vector<int64_t>{2, 2}));
    try {
      kiln::NDArray::FromStrings({"a"}, {2});
      CHECK(false);
    } catch (const kiln::Error& e) {
      CHECK(e.code() == KILN_ERR_SHAPE_MISMATCH);
    }
    try {
      grid.data<float>();
      CHECK(false);
    } catch (const kiln::Error& e) {
      CHECK(e.code() == KILN_ERR_DTYPE_MISMATCH &&
            std::string(e.what()).find("use ToStrings()") != std::string::npos);
    }
    try {
      out[0].AsNDArray().ToStrings();
      CHECK(false);
    } catch (const kiln::Error& e) {
      CHECK(e.code() == KILN_ERR_DTYPE_MISMATCH);
    }
  } catch (const kiln::Error& e) {
    std::printf("kiln error %d: %s\n", e.code(), e.what());
    return 1;
  }
  std::printf("ALL OK\n");
  return 0;
}
