// generate.cpp: greedy generation from a language model exported by Kiln
// (examples/export_gpt.py), with the header-only C++ binding (bindings/cpp/kiln.hpp).
//
//   generate MODEL.so STEPS TOKEN...
//
// Loads the one artifact, creates its KV cache, prefills the prompt's token ids (tokens[1, n]),
// decodes STEPS tokens greedily (one token[1, 1] per step) and prints them, space separated. The
// cache is one NDArray the functions update in place; it holds its own length, so a step passes
// only the new token, wrapped without a copy (NDArray::Wrap). Errors throw kiln::Error with the
// runtime's message.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kiln.hpp"

// fn(tokens[1, t], kv) -> (logits, kv); returns the argmax of the logits.
static int64_t Step(const kiln::Function& fn, int64_t* tokens, int64_t t, const kiln::NDArray& kv) {
  int64_t shape[2] = {1, t};
  DLTensor view{tokens, {kDLCPU, 0}, 2, {kDLInt, 64, 1}, shape, nullptr, 0};
  kiln::Value result = fn(kiln::NDArray::Wrap(view), kv);
  kiln::NDArray logits = result[0].AsNDArray();
  const float* v = logits.data<float>();
  int64_t best = 0;
  for (int64_t i = 1; i < logits.shape()[1]; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.so STEPS TOKEN...\n", argv[0]);
    return 2;
  }
  try {
    int steps = std::atoi(argv[2]);
    kiln::Module lib = kiln::Module::Load(argv[1]);
    kiln::Module vm = lib.GetFunction("load_executable")().AsModule();
    vm.GetFunction("init")(kiln::Device::CPU());
    kiln::Function prefill = vm.GetFunction("prefill"), decode = vm.GetFunction("decode");
    kiln::NDArray kv = vm.GetFunction("create_cache")().AsNDArray();
    if (steps < 1) {
      std::fprintf(stderr, "generate: STEPS must be at least 1\n");
      return 2;
    }
    // kv_cache[layers, 2, heads, max_len + 1, head_dim]: the last position holds the length
    const int64_t max_len = kv.shape()[3] - 1;
    std::vector<int64_t> prompt;
    for (int i = 3; i < argc; ++i) prompt.push_back(std::atoll(argv[i]));
    // (a prompt longer than the cache: the runtime refuses prefill, naming the limit)
    int64_t t = int64_t(prompt.size());
    int64_t next = Step(prefill, prompt.data(), t, kv);
    for (int k = 0; k < steps; ++k) {
      std::printf(k ? " %lld" : "%lld", (long long)next);
      if (k + 1 == steps) break;
      if (t == max_len) {  // decode would return NaN logits: the cache is full
        std::printf("\n");
        std::fprintf(stderr, "generate: the KV cache is full (%lld positions)\n", (long long)max_len);
        return 1;
      }
      int64_t token = next;
      next = Step(decode, &token, 1, kv);
      ++t;
    }
    std::printf("\n");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
