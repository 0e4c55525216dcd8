// SEED_FLOWS.md section C from C++: a language model's functions called with the tutorials'
// call shapes, vm.GetFunction("prefill")(data, weight, kv_cache) and the same for "decode"
// (the cache prefill returns goes into decode).
//
//   prefill_decode <lm.so> <dir>   reads dir/{inputs,weight,kv_cache,token}.bin (raw float32)
//                                  and prints each output as "name v0 v1 ..." on one line.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln.hpp"

namespace {

kiln::NDArray ReadFile(const std::string& path, const std::vector<int64_t>& shape) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  kiln::NDArray a = kiln::NDArray::Empty(shape, kiln::DataType::Float32());
  if (bytes.size() != a.nbytes()) throw std::runtime_error(path + ": wrong size");
  std::copy(bytes.begin(), bytes.end(), static_cast<char*>(a.raw_data()));
  return a;
}

void Print(const char* name, const kiln::NDArray& a) {
  std::printf("%s", name);
  for (float v : a.ToVector<float>()) std::printf(" %.9g", v);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <lm.so> <dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[2];
  try {
    kiln::NDArray data = ReadFile(dir + "/inputs.bin", {1, 4, 16});
    kiln::NDArray weight = ReadFile(dir + "/weight.bin", {16, 16});
    kiln::NDArray kv_cache = ReadFile(dir + "/kv_cache.bin", {1, 4, 16});
    kiln::NDArray token = ReadFile(dir + "/token.bin", {1, 1, 16});

    kiln::Module lib = kiln::Module::Load(argv[1]);
    kiln::Module vm = lib.GetFunction("load_executable")();
    vm.GetFunction("init")(kiln::Device::CPU());
    std::vector<kiln::Value> pre = vm.GetFunction("prefill")(data, weight, kv_cache);
    kiln::NDArray cache = pre[1];
    std::vector<kiln::Value> dec = vm.GetFunction("decode")(token, weight, cache);
    Print("prefill_logits", pre[0]);
    Print("prefill_cache", cache);
    Print("decode_logits", dec[0]);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln error %d (%s): %s\n", e.code(), e.status_string(), e.what());
    return 1;
  }
  return 0;
}
