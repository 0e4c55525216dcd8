// The MLP through its typed C++ bindings (mlp.hpp, written by export_typed.py):
// kiln_models::Mlp with Forward over typed array references.
//
//   main_cpp <dir>        loads dir/mlp.so, or with -DKILN_STATIC and mlp.a, the linked-in model.
// Prints the 10 outputs of both Forward overloads, one per line ("a" and "b" columns).
#include <cstdio>
#include <fstream>

#include "mlp.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  kiln_models::Array<float, 1, 784> x;
  std::ifstream in(std::string(argv[1]) + "/x.bin", std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(x.data()), sizeof(float) * x.kSize)) {
    std::fprintf(stderr, "cannot read x.bin\n");
    return 1;
  }
  try {
#ifdef KILN_STATIC
    kiln_models::Mlp mlp = kiln_models::Mlp::Static();
#else
    kiln_models::Mlp mlp(std::string(argv[1]) + "/mlp.so");
#endif
    float out[1][10];
    mlp.Forward(x.ref(), out);                       // into the caller's array
    kiln_models::Array<float, 1, 10> y = mlp.Forward(x.ref());   // a new typed array
    for (int j = 0; j < 10; ++j) std::printf("%.9g %.9g\n", out[0][j], y.ref()[0][j]);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln error %d: %s\n", e.code(), e.what());
    return 1;
  }
  return 0;
}
