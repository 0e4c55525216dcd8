/* fuzz_elf.c — libFuzzer target over the ELF check that runs before dlopen (elf_check.c), on
 * the input in memory (the same check_headers the file path runs, through its memory reader).
 * The check must refuse, with a message, every file whose ELF header, program or section
 * header tables or segments do not fit in it, so the dlopen after it cannot SIGBUS on a
 * truncated mapping; it must never crash or read out of bounds. dlopen itself is not fuzzed: it
 * would run the fuzzed file's constructors. Seeds: real model .so files and the fixture kernel
 * libraries (tests/reliability/fuzz_seeds.py). */
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

kiln_status_t kiln_platform_elf_check_memory(const uint8_t* data, uint64_t size, const char* name);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  /* an exact-size copy, so reading one byte past the input is an ASan report */
  uint8_t* copy = malloc(size ? size : 1);
  if (!copy) return 0;
  if (size) memcpy(copy, data, size);
  kiln_status_t st = kiln_platform_elf_check_memory(copy, size, "fuzz input");
  if (st != KILN_OK && kiln_last_error()[0] == '\0') abort(); /* a refusal names its reason */
  free(copy);
  return 0;
}
