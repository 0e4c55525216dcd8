/* Checks a shared library's ELF structure against its file size before dlopen.
 *
 * glibc's loader maps every segment a library's program headers name; a segment that extends
 * past the end of a truncated file is mapped anyway, and touching it raises SIGBUS inside
 * dlopen. "Every byte of a loaded file validated" therefore starts here: the ELF header, the
 * program and section header tables, and every segment's file range must lie inside the file.
 * Only the native ELF class and byte order are accepted (a library for another machine could
 * not be loaded anyway). */
#define _POSIX_C_SOURCE 200809L
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* The ELF machine this runtime runs on (0: unchecked on other hosts), and names of the machines
 * an artifact is likely built for, so a library compiled for another CPU architecture is
 * refused with a message naming both instead of dlopen's "cannot open shared object file". */
#if defined(__x86_64__)
#define KILN_HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define KILN_HOST_MACHINE EM_AARCH64
#elif defined(__riscv) && defined(__LP64__)
#define KILN_HOST_MACHINE EM_RISCV
#elif defined(__arm__)
#define KILN_HOST_MACHINE EM_ARM
#elif defined(__i386__)
#define KILN_HOST_MACHINE EM_386
#else
#define KILN_HOST_MACHINE 0
#endif

static const char* machine_name(unsigned machine) {
  switch (machine) {
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "AArch64";
    case EM_RISCV: return "RISC-V";
    case EM_ARM: return "ARM";
    default: return "another machine";
  }
}

/* a + b <= limit, without overflow */
static int fits(uint64_t a, uint64_t b, uint64_t limit) { return a <= limit && b <= limit - a; }

/* Where the headers are read from: an open file (fd >= 0), or memory (the fuzz target,
 * runtime_c/fuzz/fuzz_elf.c, checks its inputs in memory: no file write per execution). */
typedef struct {
  int fd;
  const uint8_t* data;
} source_t;

static int read_at(source_t src, void* buf, size_t n, uint64_t offset) {
  uint8_t* p = buf;
#if defined(KILN_FUZZING)
  if (src.fd < 0) { /* the caller has checked offset + n against the size */
    memcpy(p, src.data + offset, n);
    return 1;
  }
#endif
  while (n > 0) {
    ssize_t got = pread(src.fd, p, n, (off_t)offset);
    if (got <= 0) return 0;
    p += got;
    n -= (size_t)got;
    offset += (uint64_t)got;
  }
  return 1;
}

static kiln_status_t check_headers(source_t src, const char* path, uint64_t size) {
  const kiln_status_t bad = KILN_ERR_INVALID_FORMAT;
  ElfW(Ehdr) eh;
  if (size < sizeof eh || !read_at(src, &eh, sizeof eh, 0))
    return kiln_error(bad, "cannot load library '%s': file of %llu bytes is too short for an ELF header",
                      path, (unsigned long long)size);
  if (eh.e_ident[EI_MAG0] != ELFMAG0 || eh.e_ident[EI_MAG1] != ELFMAG1 ||
      eh.e_ident[EI_MAG2] != ELFMAG2 || eh.e_ident[EI_MAG3] != ELFMAG3)
    return kiln_error(bad, "cannot load library '%s': not an ELF file (bad magic)", path);
#if defined(__LP64__) || defined(_LP64)
  const int want_class = ELFCLASS64;
#else
  const int want_class = ELFCLASS32;
#endif
  if (eh.e_ident[EI_CLASS] != want_class)
    return kiln_error(bad, "cannot load library '%s': ELF class %d does not match this machine", path,
                      (int)eh.e_ident[EI_CLASS]);
  if (KILN_HOST_MACHINE != 0 && eh.e_machine != KILN_HOST_MACHINE)
    return kiln_error(bad, "cannot load library '%s': built for %s (ELF machine %u), this runtime "
                      "runs on %s", path, machine_name(eh.e_machine), (unsigned)eh.e_machine,
                      machine_name(KILN_HOST_MACHINE));
  if (eh.e_phnum > 0 && eh.e_phentsize != sizeof(ElfW(Phdr)))
    return kiln_error(bad, "cannot load library '%s': program header entry size %u, expected %u",
                      path, (unsigned)eh.e_phentsize, (unsigned)sizeof(ElfW(Phdr)));
  if (!fits(eh.e_phoff, (uint64_t)eh.e_phnum * eh.e_phentsize, size))
    return kiln_error(bad, "cannot load library '%s': program headers at %llu (%u entries) exceed "
                      "the file size %llu (truncated?)", path, (unsigned long long)eh.e_phoff,
                      (unsigned)eh.e_phnum, (unsigned long long)size);
  if (eh.e_shnum > 0 && !fits(eh.e_shoff, (uint64_t)eh.e_shnum * eh.e_shentsize, size))
    return kiln_error(bad, "cannot load library '%s': section headers at %llu (%u entries) exceed "
                      "the file size %llu (truncated?)", path, (unsigned long long)eh.e_shoff,
                      (unsigned)eh.e_shnum, (unsigned long long)size);
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    ElfW(Phdr) ph;
    if (!read_at(src, &ph, sizeof ph, eh.e_phoff + (uint64_t)i * sizeof ph))
      return kiln_error(KILN_ERR_IO, "cannot load library '%s': cannot read program header %u", path, i);
    if (ph.p_filesz > 0 && !fits(ph.p_offset, ph.p_filesz, size))
      return kiln_error(bad, "cannot load library '%s': segment %u (file bytes %llu..%llu) exceeds "
                        "the file size %llu (truncated?)", path, i, (unsigned long long)ph.p_offset,
                        (unsigned long long)(ph.p_offset + ph.p_filesz), (unsigned long long)size);
  }
  return KILN_OK;
}

kiln_status_t kiln_platform_elf_check(const char* path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return KILN_OK; /* let dlopen report a missing or unreadable file in its words */
  struct stat st;
  kiln_status_t status = KILN_OK;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    status = kiln_error(KILN_ERR_IO, "cannot load library '%s': not a regular file", path);
  else
    status = check_headers((source_t){fd, NULL}, path, (uint64_t)st.st_size);
  close(fd);
  return status;
}

#if defined(KILN_FUZZING)
/* The same check on `size` bytes in memory; `name` stands for the path in messages. Built into
 * the fuzz target only (runtime_c/fuzz/Makefile defines KILN_FUZZING), which declares it itself:
 * it is not part of the runtime, whose size budget it would spend. */
kiln_status_t kiln_platform_elf_check_memory(const uint8_t* data, uint64_t size, const char* name);
kiln_status_t kiln_platform_elf_check_memory(const uint8_t* data, uint64_t size, const char* name) {
  source_t src = {-1, data};
  return check_headers(src, name, size);
}
#endif
