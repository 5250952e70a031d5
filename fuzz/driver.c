/* Replays inputs through a harness without libFuzzer, so `make check`
 * (any compiler) runs the seeds and every crash once found. Arguments are
 * files or folders of files; a crash or sanitizer report fails the run. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return 1;
	}
	size_t cap = 1 << 16, n = 0;
	unsigned char *buf = malloc(cap);
	for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += r;
		if (n == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(f);
	if (!buf) {
		fprintf(stderr, "%s: out of memory\n", path);
		return 1;
	}
	/* A private copy of exactly n bytes, so a read past the end is
	 * caught by ASan or valgrind as it would be under libFuzzer. */
	unsigned char *in = malloc(n ? n : 1);
	memcpy(in, buf, n);
	free(buf);
	LLVMFuzzerTestOneInput(in, n);
	free(in);
	return 0;
}

static int walk(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0) {
		perror(path);
		return 1;
	}
	if (!S_ISDIR(st.st_mode))
		return replay(path);
	struct dirent **ent;
	int k = scandir(path, &ent, NULL, alphasort), bad = 0;
	if (k < 0) {
		perror(path);
		return 1;
	}
	for (int i = 0; i < k; i++) {
		if (ent[i]->d_name[0] != '.') {
			char p[4096];
			snprintf(p, sizeof p, "%s/%s", path, ent[i]->d_name);
			bad |= walk(p);
		}
		free(ent[i]);
	}
	free(ent);
	return bad;
}

int main(int argc, char **argv)
{
	int bad = 0;
	for (int i = 1; i < argc; i++)
		bad |= walk(argv[i]);
#if defined FUZZ_SRCDIR && defined FUZZ_NAME
	/* No arguments (make check): the harness's seeds and every input a
	 * fuzzing run once broke it with. */
	if (argc == 1) {
		struct stat st;
		const char *reg = FUZZ_SRCDIR "/fuzz/regress/" FUZZ_NAME;
		bad |= walk(FUZZ_SRCDIR "/fuzz/seeds/" FUZZ_NAME);
		if (stat(reg, &st) == 0)
			bad |= walk(reg);
	}
#endif
	return bad;
}
