/* The exec supervisor's compiled hot path (resources/sandbox/supervisor.py loads it with ctypes).

   Built by the image recipe:  gcc -O2 -shared -fPIC -o exec-fast.so exec-fast.c -lpthread

   What it does, for the Python supervisor's worker threads (each call runs on the calling
   worker's own thread, with the interpreter lock released, so a process it seizes is that
   worker's tracee):

   - cx_receive: wait for the next held exec on the seccomp listener and read what it would run
     (path, argv, environment, working folder, what stdin is) from the process's memory into
     "facts" bytes, the same values supervisor.py reads itself. Then look the exact facts up in a
     cache of verdicts the Python judge gave ("allow" only), together with what is known of the
     program now (its real path and its file's identity) and a check that no argument leads
     through a symbolic link. A hit is seized (ptrace, this thread) and handed back as such: the
     Python worker lets it go and verifies it at its exec event (cx_same_image) like any other.
     Everything else is handed back with its facts for the Python judge. Anything this code
     cannot read or does not know how to read goes back without facts: the Python path then
     reads it itself, exactly as it does without this library.
   - cx_remember: the Python judge allowed these facts (it judged them from the bytes
     cx_receive gave it, with the real path and identity it saw): later identical facts are hits.
   - cx_same_image: at the exec event, whether the program, argv and environment the kernel
     loaded and copied are, byte for byte, the judged ones.
   - cx_expect / cx_follow: the worker's tracees' events. cx_expect keeps what an exec let go
     was judged as (the Python side's pending exec, or a hit's facts); cx_follow waits for the
     next event of this thread's tracees, and an exec event whose image is the expected one is
     let go (detached) here; every other event, and any exec event that does not compare equal,
     goes back to the Python side as it came.

   A hit can only repeat a verdict for facts equal to the ones judged: nothing a verdict depends
   on is outside the key, or the Python side does not offer it for the cache (see
   supervisor.py, cacheable). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOTIF_RECV 0xC0502100UL
#define NOTIF_ID_VALID 0x40082102UL
#define NR_EXECVE 59
#define NR_EXECVEAT 322
#define AT_FDCWD_ (-100)
#define SEIZE_OPTIONS (0x10 | 0x100000) /* TRACEEXEC | EXITKILL, as supervisor.py */
#define PAGE 4096
#define MAX_STR (128 * 1024)
#define MAX_ARGS 8192
#define MAX_PATH_READ 4096
#define MAX_LINK_WORDS 256
#define SLOTS 8192 /* power of two */
#define MAX_ENTRIES 4096

enum { CX_GONE = -1, CX_NONE = 0, CX_MISS = 1, CX_HIT = 2 };

struct notif {
    uint64_t id;
    uint32_t pid;
    uint32_t flags;
    int32_t nr;
    uint32_t arch;
    uint64_t ip;
    uint64_t args[6];
};

/* What cx_receive hands back (supervisor.py's CxOut mirrors it). */
struct cx_out {
    uint64_t id;
    uint64_t args[6];
    uint32_t pid;
    int32_t nr;
    uint32_t facts_len; /* 0: no facts (the Python side reads them itself) */
    int32_t token;      /* a hit: what the Python side remembered with it */
    uint32_t argv_off, argv_len, env_off, env_len; /* the images within the facts */
    uint64_t dev, ino;  /* a hit: the program's identity */
    uint32_t no_links;  /* no argument leads through a symbolic link (see leads_elsewhere) */
    uint32_t spare;
};

struct entry {
    uint64_t hash;
    uint32_t len;
    int32_t token;
    uint64_t dev, ino;
    uint32_t argv_off, argv_len, env_off, env_len;
    unsigned char *key;
};

static struct entry table[SLOTS];
static int entries;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* -- a growing byte buffer -- */

struct buf {
    unsigned char *data;
    size_t len, cap;
};

static int grow(struct buf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + more) cap *= 2;
    unsigned char *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int put(struct buf *b, const void *p, size_t n) {
    if (grow(b, n)) return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static int put_u32(struct buf *b, uint32_t v) { return put(b, &v, 4); }

static int put_field(struct buf *b, const void *p, size_t n) {
    return put_u32(b, (uint32_t)n) || put(b, p, n);
}

/* -- the tracee's memory, a page at a time (the last few pages kept: argv, environment and
   their strings are spread over a few) -- */

#define KEPT 16

struct mem {
    int fd;
    int next, current;
    ssize_t have;
    unsigned char *page;
    uint64_t numbers[KEPT];
    ssize_t sizes[KEPT];
    unsigned char pages[KEPT][PAGE];
};

static int page_at(struct mem *m, uint64_t n) {
    if (m->current >= 0 && m->numbers[m->current] == n) return 0;
    for (int i = 0; i < KEPT; i++) {
        if (m->sizes[i] > 0 && m->numbers[i] == n) {
            m->current = i;
            m->page = m->pages[i];
            m->have = m->sizes[i];
            return 0;
        }
    }
    int i = m->next;
    m->next = (m->next + 1) % KEPT;
    m->sizes[i] = pread(m->fd, m->pages[i], PAGE, (off_t)(n * PAGE));
    if (m->sizes[i] <= 0) {
        m->sizes[i] = 0;
        m->current = -1;
        return -1;
    }
    m->numbers[i] = n;
    m->current = i;
    m->page = m->pages[i];
    m->have = m->sizes[i];
    return 0;
}

/* Append the NUL-terminated string at addr (with its NUL); -1 when unreadable or longer than
   limit (the Python path decides those). */
static int read_string(struct mem *m, uint64_t addr, size_t limit, struct buf *b) {
    size_t total = 0;
    for (;;) {
        if (page_at(m, addr / PAGE)) return -1;
        size_t off = addr % PAGE;
        if (off >= (size_t)m->have) return -1;
        size_t avail = (size_t)m->have - off;
        unsigned char *start = m->page + off;
        unsigned char *nul = memchr(start, 0, avail);
        size_t n = nul ? (size_t)(nul - start) : avail;
        if (total + n >= limit) return -1;
        if (put(b, start, nul ? n + 1 : n)) return -1;
        total += n;
        if (nul) return 0;
        addr += n;
    }
}

static int read_u64(struct mem *m, uint64_t addr, uint64_t *out) {
    unsigned char raw[8];
    for (int i = 0; i < 8; i++) {
        if (page_at(m, (addr + i) / PAGE)) return -1;
        size_t off = (addr + i) % PAGE;
        if (off >= (size_t)m->have) return -1;
        raw[i] = m->page[off];
    }
    memcpy(out, raw, 8);
    return 0;
}

/* The strings of a NULL-terminated pointer array, as /proc/PID/cmdline shows them; their
   count, or -1. Strings live elsewhere than the array, so the array is read first. */
static int read_vector(struct mem *m, uint64_t addr, struct buf *b) {
    static __thread uint64_t ptrs[MAX_ARGS];
    int count = 0;
    if (!addr) return -1;
    for (;;) {
        uint64_t p;
        if (read_u64(m, addr, &p)) return -1;
        if (!p) break;
        if (count >= MAX_ARGS) return -1;
        ptrs[count++] = p;
        addr += 8;
    }
    for (int i = 0; i < count; i++)
        if (read_string(m, ptrs[i], MAX_STR, b)) return -1;
    return count;
}

/* -- what else the facts hold -- */

static int read_link(const char *path, char *out, size_t size) {
    ssize_t n = readlink(path, out, size - 1);
    if (n < 0 || (size_t)n >= size - 1) return -1;
    out[n] = 0;
    return 0;
}

/* stdin as supervisor.py's stdin_kind and stdin_file tell it: "KIND\0PATH\0". */
static int put_stdin(int proc, struct buf *b) {
    char target[PATH_MAX + 1];
    const char *kind;
    const char *path = "";
    ssize_t n = readlinkat(proc, "fd/0", target, sizeof target - 1);
    if (n < 0) {
        kind = "closed";
    } else if ((size_t)n >= sizeof target - 1) {
        return -1;
    } else {
        target[n] = 0;
        if (!strncmp(target, "pipe:", 5))
            kind = "pipe";
        else if (!strncmp(target, "socket:", 7))
            kind = "socket";
        else if (!strncmp(target, "/dev/pts/", 9) || !strcmp(target, "/dev/tty") ||
                 !strcmp(target, "/dev/console"))
            kind = "tty";
        else if (!strcmp(target, "/dev/null"))
            kind = "null";
        else {
            kind = "file";
            if (target[0] == '/' && strncmp(target, "/dev/", 5)) path = target;
        }
    }
    return put(b, kind, strlen(kind) + 1) || put(b, path, strlen(path) + 1);
}

/* Facts: u32 nr, u32 argc, u32 envc, then fields (u32 length, bytes): path, cwd, stdin, argv
   image, environment image. Returns 0, or -1 for "read it in Python". */
static int read_facts(struct notif *n, struct buf *b, struct cx_out *out, char *where,
                      size_t where_size) {
    uint64_t path_p, argv_p, envp_p;
    if (n->nr == NR_EXECVE) {
        path_p = n->args[0];
        argv_p = n->args[1];
        envp_p = n->args[2];
    } else if (n->nr == NR_EXECVEAT) {
        if ((int32_t)(n->args[0] & 0xffffffff) != AT_FDCWD_ || n->args[4] != 0) return -1;
        path_p = n->args[1];
        argv_p = n->args[2];
        envp_p = n->args[3];
    } else {
        return -1;
    }
    char name[64];
    snprintf(name, sizeof name, "/proc/%u", n->pid);
    int proc = open(name, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (proc < 0) return -1;
    static __thread struct mem m;
    memset(m.sizes, 0, sizeof m.sizes);
    m.next = 0;
    m.current = -1;
    /* Everything read of the process is opened from its /proc folder: looking a new process up
       there costs more than the reads. */
    m.fd = openat(proc, "mem", O_RDONLY | O_CLOEXEC);
    if (m.fd < 0) {
        close(proc);
        return -1;
    }
    /* Kept from call to call: a fresh buffer each time costs page faults (and unmapping it,
       a round of every CPU running one of the supervisor's threads). */
    static __thread struct buf path, argv, env;
    path.len = argv.len = env.len = 0;
    int argc = -1, envc = -1, ok = -1;
    if (path_p && !read_string(&m, path_p, MAX_PATH_READ, &path) && path.len > 1) {
        argc = read_vector(&m, argv_p, &argv);
        if (argc > 0) envc = read_vector(&m, envp_p, &env);
        ok = envc >= 0 ? 0 : -1;
    }
    close(m.fd);
    char cwd[PATH_MAX + 1];
    if (!ok) {
        ssize_t len = readlinkat(proc, "cwd", cwd, sizeof cwd - 1);
        if (len < 0 || (size_t)len >= sizeof cwd - 1)
            ok = -1;
        else
            cwd[len] = 0;
    }
    const char *p = (const char *)path.data;
    if (!ok && (!strncmp(p, "/proc/", 6) || cwd[0] != '/')) ok = -1;
    if (!ok) {
        int len = p[0] == '/' ? snprintf(where, where_size, "%s", p)
                              : snprintf(where, where_size, "%s/%s", cwd, p);
        if (len < 0 || (size_t)len >= where_size) ok = -1;
    }
    b->len = 0;
    if (!ok) {
        uint32_t head[3] = {(uint32_t)n->nr, (uint32_t)argc, (uint32_t)envc};
        if (put(b, head, sizeof head) || put_field(b, path.data, path.len - 1) ||
            put_field(b, cwd, strlen(cwd)))
            ok = -1;
        size_t before = b->len;
        if (!ok && (put_u32(b, 0) || put_stdin(proc, b))) ok = -1;
        if (!ok) {
            uint32_t len = (uint32_t)(b->len - before - 4);
            memcpy(b->data + before, &len, 4);
            out->argv_off = (uint32_t)b->len + 4;
            out->argv_len = (uint32_t)argv.len;
            if (put_field(b, argv.data, argv.len)) ok = -1;
            out->env_off = (uint32_t)b->len + 4;
            out->env_len = (uint32_t)env.len;
            if (!ok && put_field(b, env.data, env.len)) ok = -1;
        }
    }
    close(proc);
    return ok;
}

/* -- the cache -- */

static uint64_t fnv(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* The key: the facts, then the program's real path and its file's identity (device, inode,
   mode, owner, size, modification and change times). */
static int make_key(struct buf *key, const unsigned char *facts, size_t facts_len,
                    const char *program, const struct stat *st) {
    int64_t ident[9] = {(int64_t)st->st_dev,      (int64_t)st->st_ino,  (int64_t)st->st_mode,
                        (int64_t)st->st_uid,      (int64_t)st->st_gid,  (int64_t)st->st_size,
                        (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
                        (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec, 0};
    key->len = 0;
    return put_field(key, facts, facts_len) || put_field(key, program, strlen(program)) ||
           put(key, ident, sizeof ident);
}

static struct entry *find(const unsigned char *key, size_t len, uint64_t hash) {
    for (uint64_t i = hash & (SLOTS - 1);; i = (i + 1) & (SLOTS - 1)) {
        struct entry *e = &table[i];
        if (!e->key) return e;
        if (e->hash == hash && e->len == len && !memcmp(e->key, key, len)) return e;
    }
}

static void clear_table(void) {
    for (int i = 0; i < SLOTS; i++) {
        free(table[i].key);
        table[i].key = NULL;
    }
    entries = 0;
}

/* Whether an argument could name a path through a symbolic link, as supervisor.py's links_of
   would find; 1 also whenever this cannot tell at once (the Python judge then looks). 0 means
   links_of would find nothing: each word (the same words links_of reads) is not there, or is
   no link and the kernel names it as it is spelt. */
static int leads_elsewhere(const unsigned char *argv, size_t argv_len, const char *cwd) {
    const char *word = (const char *)argv;
    const char *end = (const char *)argv + argv_len;
    word += strlen(word) + 1; /* argv[0] */
    for (int n = 0; word < end && n < MAX_LINK_WORDS; n++) {
        size_t len = strlen(word);
        const char *next = word + len + 1;
        const char *w = word;
        if (w[0] == '-') {
            const char *eq = strchr(w, '=');
            if (eq) w = eq + 1;
        }
        size_t wl = strlen(w);
        if (!wl || w[0] == '-') {
            word = next;
            continue;
        }
        if (wl > 4096) return 1; /* links_of counts characters, this bytes: let it decide */
        if (w[wl - 1] == '/' || (wl >= 2 && !strcmp(w + wl - 2, "/.")) ||
            (wl >= 3 && !strcmp(w + wl - 3, "/..")) || !strcmp(w, ".") || !strcmp(w, ".."))
            return 1;
        char path[2 * PATH_MAX + 8];
        int pl = w[0] == '/' ? snprintf(path, sizeof path, "%s", w)
                             : snprintf(path, sizeof path, "%s/%s", cwd, w);
        if (pl < 0 || (size_t)pl >= sizeof path) return 1;
        int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT || errno == ENOTDIR) {
                word = next;
                continue; /* not there */
            }
            return 1;
        }
        struct stat st;
        char self[64], found[PATH_MAX + 1];
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        int bad = fstat(fd, &st) || S_ISLNK(st.st_mode) || read_link(self, found, sizeof found);
        close(fd);
        if (bad) return 1;
        /* Where it is must be what it says: the plain path, no "." or ".." or "//" in it. */
        if (strcmp(found, path)) return 1;
        word = next;
    }
    return 0;
}

int cx_expect(int tid, const unsigned char *argv, uint32_t argv_len, const unsigned char *env,
              uint32_t env_len, uint64_t dev, uint64_t ino);

/* -- the listener -- */

static __thread struct buf facts_buf, key_buf;

int cx_receive(int listener, struct cx_out *out, unsigned char **facts) {
    struct pollfd pfd = {.fd = listener, .events = POLLIN};
    memset(out, 0, sizeof *out);
    *facts = NULL;
    for (;;) {
        int r = poll(&pfd, 1, -1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        break;
    }
    if (!(pfd.revents & POLLIN)) return CX_GONE; /* no process holds the filter any more */
    struct notif n;
    memset(&n, 0, sizeof n);
    if (ioctl(listener, NOTIF_RECV, &n) < 0) {
        if (errno == ENOENT || errno == EINTR) return CX_NONE;
        return -errno;
    }
    out->id = n.id;
    out->pid = n.pid;
    out->nr = n.nr;
    memcpy(out->args, n.args, sizeof n.args);
    char where[2 * PATH_MAX + 8];
    if (read_facts(&n, &facts_buf, out, where, sizeof where)) return CX_MISS;
    if (ioctl(listener, NOTIF_ID_VALID, &n.id) < 0) return CX_NONE; /* gone while read */
    out->facts_len = (uint32_t)facts_buf.len;
    *facts = facts_buf.data;
    /* The facts' cwd field follows the 12-byte head and the path field. */
    uint32_t path_len, cwd_len;
    memcpy(&path_len, facts_buf.data + 12, 4);
    memcpy(&cwd_len, facts_buf.data + 16 + path_len, 4);
    char cwd[PATH_MAX + 1];
    memcpy(cwd, facts_buf.data + 20 + path_len, cwd_len);
    cwd[cwd_len] = 0;
    out->no_links = !leads_elsewhere(facts_buf.data + out->argv_off, out->argv_len, cwd);
    if (!entries || !out->no_links) return CX_MISS;
    char program[PATH_MAX + 1];
    struct stat st;
    if (!realpath(where, program) || stat(where, &st)) return CX_MISS;
    if (make_key(&key_buf, facts_buf.data, facts_buf.len, program, &st)) return CX_MISS;
    uint64_t hash = fnv(key_buf.data, key_buf.len);
    pthread_mutex_lock(&table_lock);
    struct entry *e = find(key_buf.data, key_buf.len, hash);
    int hit = e->key != NULL;
    if (hit) out->token = e->token;
    pthread_mutex_unlock(&table_lock);
    if (!hit) return CX_MISS;
    if (ptrace(PTRACE_SEIZE, n.pid, 0, SEIZE_OPTIONS) < 0) return CX_MISS;
    out->dev = st.st_dev;
    out->ino = st.st_ino;
    cx_expect((int)n.pid, facts_buf.data + out->argv_off, out->argv_len,
              facts_buf.data + out->env_off, out->env_len, st.st_dev, st.st_ino);
    return CX_HIT;
}

/* The Python judge allowed these facts, judging `program` with the identity in `ident` (from
   its own stat: device, inode, mode, uid, gid, size, modification and change times in ns). */
int cx_remember(const unsigned char *facts, uint32_t facts_len, const char *program,
                const int64_t *ident, int32_t token) {
    struct stat st;
    memset(&st, 0, sizeof st);
    st.st_dev = (dev_t)ident[0];
    st.st_ino = (ino_t)ident[1];
    st.st_mode = (mode_t)ident[2];
    st.st_uid = (uid_t)ident[3];
    st.st_gid = (gid_t)ident[4];
    st.st_size = (off_t)ident[5];
    st.st_mtim.tv_sec = ident[6] / 1000000000;
    st.st_mtim.tv_nsec = ident[6] % 1000000000;
    st.st_ctim.tv_sec = ident[7] / 1000000000;
    st.st_ctim.tv_nsec = ident[7] % 1000000000;
    struct buf *key = &key_buf;
    if (make_key(key, facts, facts_len, program, &st)) return -1;
    uint64_t hash = fnv(key->data, key->len);
    pthread_mutex_lock(&table_lock);
    if (entries >= MAX_ENTRIES) clear_table();
    struct entry *e = find(key->data, key->len, hash);
    if (!e->key) {
        unsigned char *copy = malloc(key->len);
        if (!copy) {
            pthread_mutex_unlock(&table_lock);
            return -1;
        }
        memcpy(copy, key->data, key->len);
        e->key = copy;
        e->len = (uint32_t)key->len;
        e->hash = hash;
        entries++;
    }
    e->token = token;
    pthread_mutex_unlock(&table_lock);
    return 0;
}

int cx_forget(void) {
    pthread_mutex_lock(&table_lock);
    clear_table();
    pthread_mutex_unlock(&table_lock);
    return 0;
}

static int same_file_bytes(int proc, const char *path, const unsigned char *want,
                           size_t want_len) {
    int fd = openat(proc, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    unsigned char chunk[65536];
    size_t at = 0;
    int same = 1;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0) {
            int err = errno;
            close(fd);
            return -err;
        }
        if (n == 0) break;
        if (at + (size_t)n > want_len || memcmp(chunk, want + at, (size_t)n)) {
            same = 0;
            break;
        }
        at += (size_t)n;
    }
    close(fd);
    return same && at == want_len;
}

/* At the exec event: 1 when the process runs the judged program (device, inode) with the judged
   argv and environment images, 0 when not, -errno when it cannot be read. */
int cx_same_image(int pid, const unsigned char *argv, uint32_t argv_len, const unsigned char *env,
                  uint32_t env_len, uint64_t dev, uint64_t ino) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d", pid);
    int proc = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (proc < 0) return -errno;
    int r = same_file_bytes(proc, "cmdline", argv, argv_len);
    if (r == 1) r = same_file_bytes(proc, "environ", env, env_len);
    struct stat st;
    if (r == 1) r = fstatat(proc, "exe", &st, 0) ? -errno : st.st_dev == dev && st.st_ino == ino;
    close(proc);
    return r;
}

/* -- exec events -- */

#define EXPECTED 256

struct expected {
    int tid; /* 0: free */
    unsigned char *argv, *env;
    uint32_t argv_len, env_len;
    uint64_t dev, ino;
};

static struct expected expected[EXPECTED];
static pthread_mutex_t expected_lock = PTHREAD_MUTEX_INITIALIZER;

static void drop(struct expected *e) {
    free(e->argv);
    free(e->env);
    memset(e, 0, sizeof *e);
}

/* Forget what tid was expected to load (gone, or judged in a way only the Python side checks). */
void cx_unexpect(int tid) {
    pthread_mutex_lock(&expected_lock);
    for (int i = 0; i < EXPECTED; i++)
        if (expected[i].tid == tid) drop(&expected[i]);
    pthread_mutex_unlock(&expected_lock);
}

/* tid, let go by this thread, was judged as these images of that program; -1 when it cannot be
   kept (its exec event then goes to the Python side). */
int cx_expect(int tid, const unsigned char *argv, uint32_t argv_len, const unsigned char *env,
              uint32_t env_len, uint64_t dev, uint64_t ino) {
    unsigned char *a = malloc(argv_len ? argv_len : 1), *v = malloc(env_len ? env_len : 1);
    if (!a || !v) {
        free(a);
        free(v);
        cx_unexpect(tid);
        return -1;
    }
    memcpy(a, argv, argv_len);
    memcpy(v, env, env_len);
    pthread_mutex_lock(&expected_lock);
    struct expected *slot = NULL;
    for (int i = 0; i < EXPECTED; i++) {
        if (expected[i].tid == tid) drop(&expected[i]);
        if (!slot && !expected[i].tid) slot = &expected[i];
    }
    if (slot) {
        slot->tid = tid;
        slot->argv = a;
        slot->env = v;
        slot->argv_len = argv_len;
        slot->env_len = env_len;
        slot->dev = dev;
        slot->ino = ino;
    }
    pthread_mutex_unlock(&expected_lock);
    if (!slot) {
        free(a);
        free(v);
        return -1;
    }
    return 0;
}

/* The next event of this thread's tracees. 1: an exec event of an expected process whose image
   compared equal, now detached (*pid, *former: the tid that exec'd); 0: any other event, for the
   Python side (*pid, *status, nothing done); -errno (ECHILD: no tracee left). */
int cx_follow(int *pid, int *status, int *former) {
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, __WALL | __WNOTHREAD);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        *pid = w;
        *status = st;
        *former = w;
        if (!WIFSTOPPED(st) || (st >> 16) != PTRACE_EVENT_EXEC) {
            if (WIFEXITED(st) || WIFSIGNALED(st)) cx_unexpect(w);
            return 0;
        }
        unsigned long msg = 0;
        if (ptrace(PTRACE_GETEVENTMSG, w, 0, &msg) < 0) return 0;
        *former = (int)msg;
        pthread_mutex_lock(&expected_lock);
        struct expected e = {0};
        for (int i = 0; i < EXPECTED; i++) {
            if (expected[i].tid == (int)msg) {
                e = expected[i];
                memset(&expected[i], 0, sizeof expected[i]); /* its buffers are e's now */
                break;
            }
        }
        pthread_mutex_unlock(&expected_lock);
        if (!e.tid) return 0;
        int same = cx_same_image(w, e.argv, e.argv_len, e.env, e.env_len, e.dev, e.ino);
        free(e.argv);
        free(e.env);
        if (same != 1) return 0; /* the Python side compares and judges it again */
        if (ptrace(PTRACE_DETACH, w, 0, 0) < 0 && errno != ESRCH) return -errno;
        return 1;
    }
}

int cx_version(void) { return 3; }
