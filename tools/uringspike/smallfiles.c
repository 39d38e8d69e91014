// smallfiles: a parallel small-file client for the FUSE-over-io_uring spike
// (docs/benchmarks.md, "FUSE over io_uring: parallel spike").
//
// usage: smallfiles DIR PROCS FILES SIZE [DIR2 ...]
//
// Forks PROCS processes per directory (each DIR gets its own PROCS
// clients, so several mounts can be driven at once); client i works in
// DIR/cI. Three phases run one after another, each started for all clients
// at once and timed from the start until the last client exits:
//   create: FILES times open(O_CREAT|O_EXCL) + write(SIZE) + close
//   stat:   FILES times stat
//   read:   FILES times open + read + close (content checked)
// It prints, per phase, the wall time and the mean time per operation seen by
// one client (wall * clients / ops), in microseconds.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *path) {
	fprintf(stderr, "smallfiles: %s %s: %s\n", what, path, strerror(errno));
	exit(1);
}

static void client(int phase, const char *dir, int files, int size) {
	char path[4096];
	char *buf = malloc(size), *got = malloc(size);
	memset(buf, 'x', size);
	for (int i = 0; i < files; i++) {
		snprintf(path, sizeof path, "%.4000s/f%06d", dir, i);
		if (phase == 0) {
			int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
			if (fd < 0) die("create", path);
			if (write(fd, buf, size) != size) die("write", path);
			if (close(fd) != 0) die("close", path);
		} else if (phase == 1) {
			struct stat st;
			if (stat(path, &st) != 0) die("stat", path);
			if (st.st_size != size) { fprintf(stderr, "smallfiles: %s: size %lld\n", path, (long long)st.st_size); exit(1); }
		} else {
			int fd = open(path, O_RDONLY);
			if (fd < 0) die("open", path);
			if (read(fd, got, size) != size || memcmp(got, buf, size) != 0) die("read", path);
			if (close(fd) != 0) die("close", path);
		}
	}
	exit(0);
}

int main(int argc, char **argv) {
	if (argc < 5) {
		fprintf(stderr, "usage: smallfiles DIR PROCS FILES SIZE [DIR2 ...]\n");
		return 2;
	}
	int procs = atoi(argv[2]), files = atoi(argv[3]), size = atoi(argv[4]);
	int ndirs = 1 + (argc - 5);
	const char **dirs = malloc(sizeof(char *) * ndirs);
	dirs[0] = argv[1];
	for (int d = 1; d < ndirs; d++) dirs[d] = argv[4 + d];
	char path[4096];
	for (int d = 0; d < ndirs; d++)
		for (int c = 0; c < procs; c++) {
			snprintf(path, sizeof path, "%s/c%d", dirs[d], c);
			if (mkdir(path, 0700) != 0) die("mkdir", path);
		}
	const char *names[] = {"create", "stat", "read"};
	int clients = procs * ndirs;
	for (int phase = 0; phase < 3; phase++) {
		fflush(stdout);
		double t0 = now();
		for (int d = 0; d < ndirs; d++)
			for (int c = 0; c < procs; c++) {
				pid_t pid = fork();
				if (pid < 0) die("fork", "");
				if (pid == 0) {
					snprintf(path, sizeof path, "%s/c%d", dirs[d], c);
					client(phase, path, files, size);
				}
			}
		int failed = 0, st;
		while (wait(&st) > 0)
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
		double wall = now() - t0;
		if (failed) { fprintf(stderr, "smallfiles: a client failed in %s\n", names[phase]); return 1; }
		printf("%s clients=%d files=%d wall_s=%.3f us_per_op=%.1f\n", names[phase], clients,
		       clients * files, wall, wall * 1e6 * clients / ((double)clients * files));
	}
	return 0;
}
