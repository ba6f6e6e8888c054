/*
 * roam's fast path, preloaded into every dynamic program `roam run` starts (see
 * crates/roam-trap/src/platform/fastpath.rs and docs/ARCHITECTURE.md).
 *
 * It interposes the libc calls compilers, make and shells use most on names (the stat
 * family, access, open, readlink and realpath), and `close` of the fds roam watches. When the name certainly needs nothing of
 * roam (absolute and outside every prefix roam serves, or relative to a cwd roam has not
 * handed out), the call is made natively through the gadget page roam maps at each exec:
 * roam's filter lets calls from that page through, so the call costs what it costs
 * without roam. Anything else, and any native failure roam could answer differently (a
 * local symlink into roam makes a name missing to the kernel), goes to the real libc
 * function, whose call roam's filter catches as before.
 *
 * Hooks may run in any thread, in vfork children and in signal handlers: no malloc (but
 * realpath's own result), no stdio, no thread-local state but errno.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* platform::fastpath::GADGET: `syscall; ret`, with the view page right above. */
#define ROAM_GADGET 0x6f0000000000UL
#define ROAM_PAGE 4096UL
#define MAX_LINKS 40

struct view {
	char magic[8];
	uint32_t version;
	volatile uint32_t cwd_remote;
	uint32_t count;
	uint32_t bytes;
	char prefixes[];
};

static const struct view *const view = (const struct view *)(ROAM_GADGET + ROAM_PAGE);
static int enabled;

/* Makes system call `nr` from the gadget page; returns the raw result (-errno on failure). */
long roam_fast_syscall(long nr, long a1, long a2, long a3, long a4, long a5);
__asm__(".text\n"
	".globl roam_fast_syscall\n"
	".hidden roam_fast_syscall\n"
	".type roam_fast_syscall,@function\n"
	"roam_fast_syscall:\n"
	"	mov %rdi, %rax\n"
	"	mov %rsi, %rdi\n"
	"	mov %rdx, %rsi\n"
	"	mov %rcx, %rdx\n"
	"	mov %r8, %r10\n"
	"	mov %r9, %r8\n"
	"	movabs $0x6f0000000000, %r11\n"
	/* The gadget's `ret` returns to our caller. */
	"	jmp *%r11\n"
	".size roam_fast_syscall, .-roam_fast_syscall\n");

#define FAST(nr, a, b, c, d, e) \
	roam_fast_syscall((nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e))

/* The next definition of a libc function (libc's own, or another preloaded library's);
 * without one, the hook fails with ENOSYS, returning `fail`. */
#define REAL(name, fail)                                                \
	static __typeof__(name) *real_##name;                           \
	if (!real_##name)                                               \
		real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name); \
	if (!real_##name) {                                             \
		errno = ENOSYS;                                         \
		return fail;                                            \
	}

__attribute__((constructor)) static void roam_fastpath_init(void)
{
	unsigned char pages[2];
	/* Only where roam mapped its pages (not a program run outside roam, not a kernel
	 * where the address was taken): mincore tells without touching them. */
	if (syscall(SYS_mincore, ROAM_GADGET, 2 * ROAM_PAGE, pages) != 0)
		return;
	if (memcmp(view->magic, "roamview", 8) != 0 || view->version != 1)
		return;
	if (view->bytes > ROAM_PAGE - sizeof(struct view))
		return;
	enabled = 1;
}

/* Whether `path` starts with one of the prefixes roam serves (as bytes, as roam checks). */
static int under_prefix(const char *path)
{
	const char *p = view->prefixes, *end = view->prefixes + view->bytes;
	for (uint32_t i = 0; i < view->count && p < end; i++) {
		size_t n = strnlen(p, end - p);
		if (strncmp(path, p, n) == 0)
			return 1;
		p += n + 1;
	}
	return 0;
}

/* Whether a component of `path` is `..`. */
static int has_dotdot(const char *path)
{
	for (const char *p = path; (p = strstr(p, "..")); p += 2)
		if ((p == path || p[-1] == '/') && (p[2] == '/' || p[2] == 0))
			return 1;
	return 0;
}

/* For an absolute name with `..`: whether a prefix roam serves is reached on the way (the
 * name climbs out of roam, or into it), resolving `..` as text. */
static int dotdot_meets_prefix(const char *path)
{
	char cur[PATH_MAX];
	size_t len = 0;
	for (const char *p = path; *p;) {
		while (*p == '/')
			p++;
		const char *c = p;
		while (*p && *p != '/')
			p++;
		size_t n = p - c;
		if (n == 0 || (n == 1 && c[0] == '.'))
			continue;
		cur[len] = 0;
		if (n == 2 && c[0] == '.' && c[1] == '.') {
			if (len && under_prefix(cur))
				return 1;
			while (len && cur[len - 1] != '/')
				len--;
			if (len)
				len--;
			continue;
		}
		if (len + 1 + n >= sizeof cur)
			return 1;
		cur[len++] = '/';
		memcpy(cur + len, c, n);
		len += n;
	}
	cur[len] = 0;
	return len ? under_prefix(cur) : under_prefix("/");
}

/* Whether `path` (relative to `dirfd`) certainly names something local, so that the
 * kernel's answer is roam's answer whenever the kernel finds it. */
static int local_name(int dirfd, const char *path)
{
	if (!enabled || !path || !path[0] || strstr(path, "://"))
		return 0;
	if (path[0] != '/')
		return dirfd == AT_FDCWD && !view->cwd_remote && !has_dotdot(path);
	return !under_prefix(path) && !(has_dotdot(path) && dotdot_meets_prefix(path));
}

/* Whether the native failure `err` of a call on the local `path` is roam's answer too:
 * the name is missing from a directory that exists (roam walks the name link by link
 * only when the kernel fails further up, or on a dangling symlink, which may point into
 * roam). */
static int final_failure(const char *path, long err, int follow)
{
	char dir[PATH_MAX];
	struct stat st;
	size_t n = strlen(path);
	if ((err != -ENOENT && err != -ENOTDIR) || n >= sizeof dir || path[n - 1] == '/')
		return 0;
	if (follow) {
		long l = FAST(SYS_newfstatat, AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW, 0);
		if (l != -ENOENT && l != -ENOTDIR)
			return 0;
	}
	const char *slash = strrchr(path, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else {
		memcpy(dir, path, slash - path);
		dir[slash - path] = 0;
	}
	return FAST(SYS_newfstatat, AT_FDCWD, dir, &st, 0, 0) == 0;
}

/* Makes a call on the name `path` natively when its answer is final; returns whether it
 * did, with the call's result (or -1 and errno) in *ret. */
static int native(int dirfd, const char *path, int follow, long nr, long a1, long a2,
		  long a3, long a4, long a5, long *ret)
{
	if (!local_name(dirfd, path))
		return 0;
	long r = roam_fast_syscall(nr, a1, a2, a3, a4, a5);
	/* readlink's EINVAL: the name exists and is no symlink (gcc asks of every prefix). */
	int exists = r == -EINVAL && nr == SYS_readlinkat;
	if (r < 0 && !exists && !final_failure(path, r, follow))
		return 0;
	if (r < 0) {
		errno = -r;
		r = -1;
	}
	*ret = r;
	return 1;
}

/* ---- the stat family ---- */

static int fast_fstatat(int dirfd, const char *path, struct stat *buf, int flags, long *ret)
{
	return native(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), SYS_newfstatat, dirfd,
		      (long)path, (long)buf, flags, 0, ret);
}

int stat(const char *path, struct stat *buf)
{
	long r;
	if (fast_fstatat(AT_FDCWD, path, buf, 0, &r))
		return r;
	REAL(stat, -1);
	return real_stat(path, buf);
}

int lstat(const char *path, struct stat *buf)
{
	long r;
	if (fast_fstatat(AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW, &r))
		return r;
	REAL(lstat, -1);
	return real_lstat(path, buf);
}

int fstatat(int dirfd, const char *path, struct stat *buf, int flags)
{
	long r;
	if (fast_fstatat(dirfd, path, buf, flags, &r))
		return r;
	REAL(fstatat, -1);
	return real_fstatat(dirfd, path, buf, flags);
}

/* On x86_64 the 64-bit names are the same calls with the same struct. */
int stat64(const char *path, struct stat64 *buf)
{
	long r;
	if (fast_fstatat(AT_FDCWD, path, (struct stat *)buf, 0, &r))
		return r;
	REAL(stat64, -1);
	return real_stat64(path, buf);
}

int lstat64(const char *path, struct stat64 *buf)
{
	long r;
	if (fast_fstatat(AT_FDCWD, path, (struct stat *)buf, AT_SYMLINK_NOFOLLOW, &r))
		return r;
	REAL(lstat64, -1);
	return real_lstat64(path, buf);
}

int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags)
{
	long r;
	if (fast_fstatat(dirfd, path, (struct stat *)buf, flags, &r))
		return r;
	REAL(fstatat64, -1);
	return real_fstatat64(dirfd, path, buf, flags);
}

/* glibc before 2.33 exported stat as these (`ver` 1 is the kernel's struct). */
int __xstat(int ver, const char *path, struct stat *buf);
int __lxstat(int ver, const char *path, struct stat *buf);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *buf, int flags);
int __xstat64(int ver, const char *path, struct stat64 *buf);
int __lxstat64(int ver, const char *path, struct stat64 *buf);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *buf, int flags);

int __xstat(int ver, const char *path, struct stat *buf)
{
	long r;
	if (ver == 1 && fast_fstatat(AT_FDCWD, path, buf, 0, &r))
		return r;
	REAL(__xstat, -1);
	return real___xstat(ver, path, buf);
}

int __lxstat(int ver, const char *path, struct stat *buf)
{
	long r;
	if (ver == 1 && fast_fstatat(AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW, &r))
		return r;
	REAL(__lxstat, -1);
	return real___lxstat(ver, path, buf);
}

int __fxstatat(int ver, int dirfd, const char *path, struct stat *buf, int flags)
{
	long r;
	if (ver == 1 && fast_fstatat(dirfd, path, buf, flags, &r))
		return r;
	REAL(__fxstatat, -1);
	return real___fxstatat(ver, dirfd, path, buf, flags);
}

int __xstat64(int ver, const char *path, struct stat64 *buf)
{
	long r;
	if (ver == 1 && fast_fstatat(AT_FDCWD, path, (struct stat *)buf, 0, &r))
		return r;
	REAL(__xstat64, -1);
	return real___xstat64(ver, path, buf);
}

int __lxstat64(int ver, const char *path, struct stat64 *buf)
{
	long r;
	if (ver == 1 && fast_fstatat(AT_FDCWD, path, (struct stat *)buf, AT_SYMLINK_NOFOLLOW, &r))
		return r;
	REAL(__lxstat64, -1);
	return real___lxstat64(ver, path, buf);
}

int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *buf, int flags)
{
	long r;
	if (ver == 1 && fast_fstatat(dirfd, path, (struct stat *)buf, flags, &r))
		return r;
	REAL(__fxstatat64, -1);
	return real___fxstatat64(ver, dirfd, path, buf, flags);
}

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
	long r;
	if (native(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), SYS_statx, dirfd, (long)path,
		   flags, mask, (long)buf, &r))
		return r;
	REAL(statx, -1);
	return real_statx(dirfd, path, flags, mask, buf);
}

/* ---- access ---- */

int access(const char *path, int mode)
{
	long r;
	if (native(AT_FDCWD, path, 1, SYS_faccessat2, AT_FDCWD, (long)path, mode, 0, 0, &r))
		return r;
	REAL(access, -1);
	return real_access(path, mode);
}

int faccessat(int dirfd, const char *path, int mode, int flags)
{
	long r;
	if (native(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), SYS_faccessat2, dirfd,
		   (long)path, mode, flags, 0, &r))
		return r;
	REAL(faccessat, -1);
	return real_faccessat(dirfd, path, mode, flags);
}

/* ---- close ---- */

/* platform::seccomp::WATCHED_FD_BASE: a copy being written (or arriving in ranges) is
 * given an fd from this number on, whose close roam sees. */
#define WATCHED_FD_BASE 800

/* close of a watched fd, the upload of a changed copy by its last writer: the program's
 * caught signals are blocked across it. Once roam's listener has read the call the thread
 * waits for it as for a local disk, but a caught signal that comes before would end the
 * wait with nothing done and, for a handler without SA_RESTART (Python's), fail the close
 * with EINTR, the fd still open, where a local close never fails so. The signal is taken
 * as the call returns instead. Signals that end the process stay deliverable: a close
 * waiting on a server that hangs can still be killed. */
int close(int fd)
{
	REAL(close, -1);
	if (!enabled || fd < WATCHED_FD_BASE)
		return real_close(fd);
	sigset_t caught, old;
	sigemptyset(&caught);
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL &&
		    sa.sa_handler != SIG_IGN)
			sigaddset(&caught, sig);
	}
	pthread_sigmask(SIG_BLOCK, &caught, &old);
	int r = real_close(fd);
	int err = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = err;
	return r;
}

/* ---- open ---- */

/* An open made natively: not of a directory (roam lists its mount points in some), and
 * never `O_TMPFILE` (which includes O_DIRECTORY). */
static int fast_open(int dirfd, const char *path, int flags, mode_t mode, long *ret)
{
	if (flags & O_DIRECTORY)
		return 0;
	return native(dirfd, path, !(flags & O_NOFOLLOW), SYS_openat, dirfd, (long)path, flags,
		      mode, 0, ret);
}

/* The mode argument, present only when the flags create a file. */
#define MODE_ARG(flags, last)                            \
	mode_t mode = 0;                                 \
	if ((flags) & (O_CREAT | __O_TMPFILE)) {         \
		va_list ap;                              \
		va_start(ap, last);                      \
		mode = va_arg(ap, mode_t);               \
		va_end(ap);                              \
	}

int open(const char *path, int flags, ...)
{
	long r;
	MODE_ARG(flags, flags);
	if (fast_open(AT_FDCWD, path, flags, mode, &r))
		return r;
	REAL(open, -1);
	return real_open(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	long r;
	MODE_ARG(flags, flags);
	if (fast_open(AT_FDCWD, path, flags, mode, &r))
		return r;
	REAL(open64, -1);
	return real_open64(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	long r;
	MODE_ARG(flags, flags);
	if (fast_open(dirfd, path, flags, mode, &r))
		return r;
	REAL(openat, -1);
	return real_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	long r;
	MODE_ARG(flags, flags);
	if (fast_open(dirfd, path, flags, mode, &r))
		return r;
	REAL(openat64, -1);
	return real_openat64(dirfd, path, flags, mode);
}

/* _FORTIFY_SOURCE's opens (never with O_CREAT). */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

int __open_2(const char *path, int flags)
{
	long r;
	if (fast_open(AT_FDCWD, path, flags, 0, &r))
		return r;
	REAL(__open_2, -1);
	return real___open_2(path, flags);
}

int __open64_2(const char *path, int flags)
{
	long r;
	if (fast_open(AT_FDCWD, path, flags, 0, &r))
		return r;
	REAL(__open64_2, -1);
	return real___open64_2(path, flags);
}

int __openat_2(int dirfd, const char *path, int flags)
{
	long r;
	if (fast_open(dirfd, path, flags, 0, &r))
		return r;
	REAL(__openat_2, -1);
	return real___openat_2(dirfd, path, flags);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	long r;
	if (fast_open(dirfd, path, flags, 0, &r))
		return r;
	REAL(__openat64_2, -1);
	return real___openat64_2(dirfd, path, flags);
}

/* ---- readlink ---- */

ssize_t readlink(const char *path, char *buf, size_t size)
{
	long r;
	if (native(AT_FDCWD, path, 0, SYS_readlinkat, AT_FDCWD, (long)path, (long)buf, size, 0,
		   &r))
		return r;
	REAL(readlink, -1);
	return real_readlink(path, buf, size);
}

ssize_t readlinkat(int dirfd, const char *path, char *buf, size_t size)
{
	long r;
	if (native(dirfd, path, 0, SYS_readlinkat, dirfd, (long)path, (long)buf, size, 0, &r))
		return r;
	REAL(readlinkat, -1);
	return real_readlinkat(dirfd, path, buf, size);
}

/* ---- realpath ---- */

/* Drops the last component of the absolute name `out` of length `len`; the new length. */
static size_t up(char *out, size_t len)
{
	while (len > 1 && out[len - 1] != '/')
		len--;
	if (len > 1)
		len--;
	out[len] = 0;
	return len;
}

/* glibc's realpath resolves with internal calls no library can see, each a trip to roam:
 * this one walks the name with native lstat and readlink. Returns 0 where roam must
 * answer: a name that is not certainly local, that meets a prefix roam serves on the way
 * (through a symlink), or any failure (the real realpath then says which, as roam sees). */
static int fast_realpath(const char *path, char *out)
{
	char todo[PATH_MAX], link[PATH_MAX];
	struct stat st;
	size_t len, n = path ? strlen(path) : 0;
	int links = 0, is_dir = 1;
	if (!local_name(AT_FDCWD, path) || n >= sizeof todo)
		return 0;
	if (path[0] == '/') {
		strcpy(out, "/");
	} else if (FAST(SYS_getcwd, out, PATH_MAX, 0, 0, 0) < 0 || out[0] != '/') {
		return 0;
	}
	len = strlen(out);
	memcpy(todo, path, n + 1);
	for (char *p = todo; *p;) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		if (!is_dir)
			return 0;
		char *c = p;
		while (*p && *p != '/')
			p++;
		size_t cn = p - c;
		if (cn == 1 && c[0] == '.')
			continue;
		if (cn == 2 && c[0] == '.' && c[1] == '.') {
			len = up(out, len);
			continue;
		}
		if (len + 1 + cn >= PATH_MAX)
			return 0;
		if (len > 1)
			out[len++] = '/';
		memcpy(out + len, c, cn);
		out[len += cn] = 0;
		if (under_prefix(out))
			return 0;
		if (FAST(SYS_newfstatat, AT_FDCWD, out, &st, AT_SYMLINK_NOFOLLOW, 0) < 0)
			return 0;
		if (!S_ISLNK(st.st_mode)) {
			is_dir = S_ISDIR(st.st_mode);
			continue;
		}
		if (++links > MAX_LINKS)
			return 0;
		long ln = FAST(SYS_readlinkat, AT_FDCWD, out, link, sizeof link - 1, 0);
		size_t rest = strlen(p);
		if (ln <= 0 || (size_t)ln + rest >= sizeof todo)
			return 0;
		/* The target, then what was left of the name. */
		memmove(todo + ln, p, rest + 1);
		memcpy(todo, link, ln);
		p = todo;
		len = link[0] == '/' ? (out[1] = 0, 1) : up(out, len);
		is_dir = 1;
	}
	return is_dir || path[n - 1] != '/';
}

char *realpath(const char *path, char *resolved)
{
	char out[PATH_MAX];
	if (fast_realpath(path, out)) {
		if (!resolved)
			return strdup(out);
		return strcpy(resolved, out);
	}
	REAL(realpath, NULL);
	return real_realpath(path, resolved);
}

char *canonicalize_file_name(const char *path)
{
	return realpath(path, NULL);
}
