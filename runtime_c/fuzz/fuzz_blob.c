/* fuzz_blob.c — libFuzzer target over the executable-blob loader (vm_loader.c) and the VM that
 * runs what it accepts: each input is a blob, loaded as a static bundle (kiln_module_from_static,
 * the in-memory entry) against every kernel table of $KILN_FUZZ_LIBS, then init and every
 * function called on the argument pool (fuzz_common.h). Seeds: the blobs of real artifacts
 * (tests/reliability/fuzz_seeds.py). Anything may fail; nothing may crash, hang, leak, read out
 * of bounds or fail without a message. */
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc, (void)argv;
  fuzz_setup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  /* the loader requires KILN_ALIGNMENT; libFuzzer's buffer has none */
  void* blob = NULL;
  if (kiln_memory_alloc(size, &blob) != KILN_OK) return 0;
  if (size) memcpy(blob, data, size);
  for (int i = 0; i < g_num_libs; ++i) {
    kiln_module_t* lib = NULL;
    if (kiln_module_from_static(g_libs[i], blob, size, &lib) != KILN_OK) abort(); /* tables are valid */
    fuzz_load_and_run(lib);
    kiln_module_release(lib);
  }
  kiln_memory_free(blob); /* every VM and tensor made from it is released by now */
  return 0;
}
