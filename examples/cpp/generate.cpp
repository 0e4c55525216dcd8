// generate.cpp: greedy generation from a language model exported by Kiln
// (examples/export_gpt.py), with the header-only C++ binding (bindings/cpp/kiln.hpp).
//
//   generate MODEL.so STEPS TOKEN...
//
// Loads the one artifact, creates its KV cache, prefills the prompt's token ids, decodes STEPS
// tokens greedily and prints them, space separated. The cache is one NDArray the functions update
// in place; the tokens so far live in one vector, passed to each call as a [1, t] view
// (NDArray::Wrap: no copy). Errors throw kiln::Error with the runtime's message.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kiln.hpp"

// fn(tokens[:, :t], kv) -> (logits, kv); returns the argmax of the logits.
static int64_t Step(const kiln::Function& fn, std::vector<int64_t>& tokens, int64_t t,
                    const kiln::NDArray& kv) {
  int64_t shape[2] = {1, t};
  DLTensor view{tokens.data(), {kDLCPU, 0}, 2, {kDLInt, 64, 1}, shape, nullptr, 0};
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
    // (more tokens than the cache's positions: the runtime refuses the call, naming the limit)
    std::vector<int64_t> tokens(size_t(argc - 3 + steps), 0);
    int64_t t = 0;
    for (int i = 3; i < argc; ++i) tokens[size_t(t++)] = std::atoll(argv[i]);
    int64_t next = Step(prefill, tokens, t, kv);
    for (int k = 0; k < steps; ++k) {
      std::printf(k ? " %lld" : "%lld", (long long)next);
      if (k + 1 == steps) break;
      tokens[size_t(t++)] = next;
      next = Step(decode, tokens, t, kv);
    }
    std::printf("\n");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
