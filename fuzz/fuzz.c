#include "fuzz.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

/* Removes the folder one level deep: harnesses make at most one subfolder. */
static void rm_tree(const char *d)
{
	DIR *dp = opendir(d);
	if (!dp)
		return;
	char p[512];
	for (struct dirent *de; (de = readdir(dp));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof p, "%s/%s", d, de->d_name);
		if (unlink(p) < 0)
			rm_tree(p);
	}
	closedir(dp);
	rmdir(d);
}

static void cleanup(void)
{
	if (dir[0])
		rm_tree(dir);
}

const char *fuzz_dir(void)
{
	if (dir[0])
		return dir;
	const char *base = getenv("TMPDIR");
	struct stat st;
	if (!base || !*base)
		base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof dir, "%s/moe-fuzz.XXXXXX", base);
	if (!mkdtemp(dir)) {
		perror(dir);
		abort();
	}
	atexit(cleanup);
	return dir;
}

const char *fuzz_file(const char *name, const uint8_t *data, size_t size)
{
	static char path[512];
	snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
	char *sl = strrchr(path, '/');
	if (sl > path + strlen(dir)) { /* name has a subfolder */
		*sl = 0;
		mkdir(path, 0700);
		*sl = '/';
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		perror(path);
		abort();
	}
	for (size_t off = 0; off < size;) {
		ssize_t w = write(fd, data + off, size - off);
		if (w <= 0) {
			perror(path);
			abort();
		}
		off += (size_t)w;
	}
	close(fd);
	return path;
}
