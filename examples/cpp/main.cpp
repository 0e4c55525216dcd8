// Runs an exported MLP (examples/mlp.py: x (1, 784) -> Linear(784, 256) -> ReLU -> Linear(256, 10))
// from C++ through bindings/cpp/kiln.hpp, and prints the 10 outputs, one per line.
//
//   main <mlp.so>                          inputs generated deterministically (see Generate)
//   main <mlp.so> x.bin w1.bin b1.bin w2.bin b2.bin
//                                          inputs read from raw little-endian float32 files
//
// Build (from the repository root; see examples/cpp/Makefile):
//   g++ -std=c++17 -O2 -Iruntime_c/include -Ibindings/cpp examples/cpp/main.cpp
//       runtime_c/build/libkiln_runtime.a -ldl -lpthread -lm -o examples/cpp/build/main
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln.hpp"

namespace {

// Deterministic values in [-scale/2, scale/2): ((i * 7919 + seed * 104729) % 1000) / 1000 - 0.5,
// computed in double and rounded once to float (numpy can reproduce it bit for bit).
kiln::NDArray Generate(const std::vector<int64_t>& shape, int seed, double scale) {
  kiln::NDArray a = kiln::NDArray::Empty(shape, kiln::DataType::Float32());
  float* p = a.data<float>();
  for (int64_t i = 0, n = a.numel(); i < n; ++i)
    p[i] = float(((i * 7919 + seed * 104729) % 1000) / 1000.0 - 0.5) * float(scale);
  return a;
}

kiln::NDArray ReadFile(const std::string& path, const std::vector<int64_t>& shape) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  kiln::NDArray a = kiln::NDArray::Empty(shape, kiln::DataType::Float32());
  if (bytes.size() != a.nbytes())
    throw std::runtime_error(path + ": " + std::to_string(bytes.size()) + " bytes, expected " +
                             std::to_string(a.nbytes()) + " for shape " +
                             kiln::NDArray::ShapeString(shape));
  std::copy(bytes.begin(), bytes.end(), static_cast<char*>(a.raw_data()));
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 7) {
    std::fprintf(stderr, "usage: %s <mlp.so> [x.bin w1.bin b1.bin w2.bin b2.bin]\n", argv[0]);
    return 2;
  }
  const std::vector<std::vector<int64_t>> shapes = {{1, 784}, {256, 784}, {256}, {10, 256}, {10}};
  try {
    std::vector<kiln::NDArray> in;
    for (size_t k = 0; k < shapes.size(); ++k)
      in.push_back(argc == 7 ? ReadFile(argv[2 + k], shapes[k])
                             : Generate(shapes[k], int(k), k == 0 ? 1.0 : 0.1));
    const kiln::NDArray &x = in[0], &w1 = in[1], &b1 = in[2], &w2 = in[3], &b2 = in[4];

    kiln::Module lib = kiln::Module::Load(argv[1]);
    kiln::Module vm = lib.GetFunction("load_executable")();
    vm.GetFunction("init")(kiln::Device::CPU());
    kiln::NDArray out = vm.GetFunction("forward")(x, w1, b1, w2, b2);

    std::printf("output %s %s\n", kiln::NDArray::ShapeString(out.shape()).c_str(),
                out.dtype().ToString().c_str());
    for (float v : out.ToVector<float>()) std::printf("%.9g\n", v);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln error %d (%s): %s\n", e.code(), e.status_string(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
