/* The MLP through its typed C bindings (mlp_bindings.h, written by export_typed.py): one
 * function call with C arrays, no shapes or tensors to build.
 *
 *   main_c <dir>          dir: what export_typed.py wrote; mlp.so is loaded from there, or,
 *                         when built with -DKILN_STATIC and mlp.a, the model is linked in.
 * Prints the 10 outputs, one per line. */
#include <stdio.h>
#include <string.h>

#include "mlp_bindings.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  static float x[KILN_MODEL_MLP_FORWARD_X_DIM0][KILN_MODEL_MLP_FORWARD_X_DIM1];
  float out[KILN_MODEL_MLP_FORWARD_OUT_DIM0][KILN_MODEL_MLP_FORWARD_OUT_DIM1];
  char path[4096];
  snprintf(path, sizeof path, "%s/x.bin", argv[1]);
  FILE* f = fopen(path, "rb");
  if (f == NULL || fread(x, sizeof x, 1, f) != 1) {
    fprintf(stderr, "cannot read %s\n", path);
    return 1;
  }
  fclose(f);

  kiln_model_mlp_t mlp;
#ifdef KILN_STATIC
  kiln_status_t st = kiln_model_mlp_open_static(&mlp);
#else
  snprintf(path, sizeof path, "%s/mlp.so", argv[1]);
  kiln_status_t st = kiln_model_mlp_open(&mlp, path);
#endif
  if (st == KILN_OK) st = kiln_model_mlp_forward(&mlp, x, out);
  kiln_model_mlp_close(&mlp);
  if (st != KILN_OK) {
    fprintf(stderr, "kiln error %d: %s\n", (int)st, kiln_last_error());
    return 1;
  }
  printf("arena %d bytes\n", KILN_MODEL_MLP_FORWARD_ARENA_BYTES);
  for (int j = 0; j < KILN_MODEL_MLP_FORWARD_OUT_DIM1; ++j) printf("%.9g\n", out[0][j]);
  return 0;
}
