/*
 * syscalls.c - per-system-call cost microbenchmark (Ufo Table III / Parrot Fig 2.1).
 *
 * Usage: syscalls [--iters N] [--batches B] [--file PATH] [--big PATH]
 *
 * Each operation runs one untimed warm-up batch, then B timed batches of N
 * iterations; the reported figure is the median over the batches of the mean
 * time per operation, in microseconds.  The sequential read reads the whole
 * --big file with 1 MiB read(2) calls, once untimed and then B times timed,
 * and reports the median bandwidth in MB/s (10^6 bytes per second).
 *
 * Output, one line per measurement, "name value" (lines starting with '#'
 * are comments):
 *   getpid 0.142          syscall(SYS_getpid), glibc cannot cache it
 *   stat 1.17             stat(2) of --file
 *   open_close 2.25       open(O_RDONLY) + close of --file
 *   read_1B 0.51          pread(fd, 1 byte, offset 0) on --file
 *   read_8KB 0.62         pread(fd, 8192 bytes, offset 0) on --file
 *   write_8KB 0.82        pwrite(fd, 8192 bytes, offset 0) to a temp file in /tmp
 *   seqread_MBps 5900     whole --big file, 1 MiB reads
 *
 * Without --file, a 64 KiB file is created in /tmp; without --big, a 100 MB
 * one is.  Both are removed on exit.  Build: cc -O2 -o syscalls syscalls.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_BATCHES 101
#define SMALL_SIZE (64 * 1024)
#define BIG_SIZE (100L * 1000 * 1000)
#define SEQ_CHUNK (1024 * 1024)

static long iters = 10000;
static int batches = 7;
static char made_file[64], made_big[64], made_tmp[64];

static void cleanup(void)
{
    if (made_file[0]) unlink(made_file);
    if (made_big[0]) unlink(made_big);
    if (made_tmp[0]) unlink(made_tmp);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    int e = errno;
    fputs("syscalls: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (e) fprintf(stderr, ": %s", strerror(e));
    fputc('\n', stderr);
    cleanup();
    exit(1);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Create a temp file in /tmp of `size` bytes; its name goes to `name`. */
static void make_file(char *name, const char *tmpl, long size)
{
    static char buf[SEQ_CHUNK];
    strcpy(name, tmpl);
    int fd = mkstemp(name);
    if (fd < 0) { name[0] = 0; die("mkstemp %s", tmpl); }
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)(i * 131 + 7);
    for (long done = 0; done < size;) {
        long n = size - done < (long)sizeof buf ? size - done : (long)sizeof buf;
        ssize_t w = write(fd, buf, n);
        if (w <= 0) die("write %s", name);
        done += w;
    }
    if (close(fd)) die("close %s", name);
}

/* ---- the operations: each does `n` iterations ---- */

static const char *path;
static int rfd, wfd;
static char *buf;

static void op_getpid(long n)
{
    for (long i = 0; i < n; i++)
        if (syscall(SYS_getpid) <= 0) die("getpid");
}

static void op_stat(long n)
{
    struct stat st;
    for (long i = 0; i < n; i++)
        if (stat(path, &st)) die("stat %s", path);
}

static void op_open_close(long n)
{
    for (long i = 0; i < n; i++) {
        int fd = open(path, O_RDONLY);
        if (fd < 0) die("open %s", path);
        if (close(fd)) die("close %s", path);
    }
}

static void op_read_1(long n)
{
    for (long i = 0; i < n; i++)
        if (pread(rfd, buf, 1, 0) != 1) die("pread 1 B of %s", path);
}

static void op_read_8k(long n)
{
    for (long i = 0; i < n; i++)
        if (pread(rfd, buf, 8192, 0) != 8192) die("pread 8 KB of %s", path);
}

static void op_write_8k(long n)
{
    for (long i = 0; i < n; i++)
        if (pwrite(wfd, buf, 8192, 0) != 8192) die("pwrite 8 KB to %s", made_tmp);
}

/* Median over `batches` timed batches of µs per operation. */
static void measure(const char *name, void (*op)(long))
{
    double t[MAX_BATCHES];
    op(iters / 10 > 0 ? iters / 10 : 1); /* warm-up */
    for (int b = 0; b < batches; b++) {
        double t0 = now_us();
        op(iters);
        t[b] = (now_us() - t0) / iters;
    }
    printf("%s %.4f\n", name, median(t, batches));
    fflush(stdout);
}

static long read_whole(const char *big)
{
    int fd = open(big, O_RDONLY);
    if (fd < 0) die("open %s", big);
    long total = 0;
    for (;;) {
        ssize_t r = read(fd, buf, SEQ_CHUNK);
        if (r < 0) die("read %s", big);
        if (r == 0) break;
        total += r;
    }
    close(fd);
    return total;
}

static void measure_seqread(const char *big)
{
    double mbps[MAX_BATCHES];
    long size = read_whole(big); /* warm-up: page cache and tracer caches */
    if (size <= 0) die("%s is empty", big);
    for (int b = 0; b < batches; b++) {
        double t0 = now_us();
        long got = read_whole(big);
        double dt = now_us() - t0;
        if (got != size) { errno = 0; die("%s: read %ld bytes, expected %ld", big, got, size); }
        mbps[b] = got / dt; /* bytes per µs == MB/s */
    }
    printf("seqread_MBps %.1f\n", median(mbps, batches));
    fflush(stdout);
}

static void usage(void)
{
    fprintf(stderr, "usage: syscalls [--iters N] [--batches B] [--file PATH] [--big PATH]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *big = NULL;
    path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atol(argv[++i]);
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--file") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--big") && i + 1 < argc) big = argv[++i];
        else usage();
    }
    if (iters < 1 || batches < 1 || batches > MAX_BATCHES) usage();

    if (posix_memalign((void **)&buf, 4096, SEQ_CHUNK)) die("posix_memalign");
    memset(buf, 'x', SEQ_CHUNK);
    if (!path) { make_file(made_file, "/tmp/syscalls-small.XXXXXX", SMALL_SIZE); path = made_file; }
    if (!big) { make_file(made_big, "/tmp/syscalls-big.XXXXXX", BIG_SIZE); big = made_big; }

    rfd = open(path, O_RDONLY);
    if (rfd < 0) die("open %s", path);
    strcpy(made_tmp, "/tmp/syscalls-write.XXXXXX");
    wfd = mkstemp(made_tmp);
    if (wfd < 0) { made_tmp[0] = 0; die("mkstemp /tmp/syscalls-write.XXXXXX"); }

    printf("# iters %ld batches %d file %s big %s\n", iters, batches, path, big);
    measure("getpid", op_getpid);
    measure("stat", op_stat);
    measure("open_close", op_open_close);
    measure("read_1B", op_read_1);
    measure("read_8KB", op_read_8k);
    measure("write_8KB", op_write_8k);
    measure_seqread(big);

    close(rfd);
    close(wfd);
    cleanup();
    return 0;
}
