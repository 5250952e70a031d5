/* Shared by the fuzz harnesses: the readers take paths, so each input is
 * written to a file in a private folder (on /dev/shm when it exists, to
 * spare the disk) that is removed at exit. */
#ifndef FUZZ_H
#define FUZZ_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The private folder, made on first use. */
const char *fuzz_dir(void);
/* Writes data to fuzz_dir()/name and returns the path (static storage,
 * valid until the next call). Aborts on I/O errors: they are not findings. */
const char *fuzz_file(const char *name, const uint8_t *data, size_t size);

#endif
