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
     through a symbolic link. A hit is let go here (cx_let_go) and never handed back (but with
     CX_TELL, for the log). Everything else is handed back with its facts for the Python judge;
     anything this code cannot read or does not know how to read goes back without facts, and
     the Python path then reads it itself, exactly as it does without this library. While it
     waits it also sees to the events of the calling thread's tracees (SIGCHLD, blocked in every
     thread of the supervisor, read from a signalfd), handing back those the Python side must
     see.
   - cx_let_go: seize a held exec (this thread becomes its tracer), keep what it was judged as,
     and let it go on; at its exec event the image the kernel loaded is compared here and the
     process detached, or handed back to be judged afresh when it differs (CX_FRESH).
   - cx_claim: the Python side keeps the answer for a process (refused, or asked): every held
     exec of it goes there, hit or not.
   - cx_remember: the Python judge allowed these facts (it judged them from the bytes
     cx_receive gave it, with the real path and identity it saw): later identical facts are hits.
   - cx_same_image: at the exec event, whether the program, argv and environment the kernel
     loaded and copied are, byte for byte, the judged ones.
   - cx_expect / cx_follow: the worker's tracees' events. cx_expect keeps what an exec let go
     was judged as; cx_follow waits for the next event of this thread's tracees, and an exec
     event whose image is the expected one is let go (detached) here; every other event, and
     any exec event that does not compare equal, goes back to the Python side as it came.

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
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOTIF_RECV 0xC0502100UL
#define NOTIF_ID_VALID 0x40082102UL
#define NOTIF_SEND 0xC0182101UL
#define NOTIF_FLAG_CONTINUE 1
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

enum { CX_GONE = -1, CX_NONE = 0, CX_MISS = 1, CX_HIT = 2, CX_EVENT = 3, CX_EXPECTED = 4,
       CX_FRESH = 5 };

/* cx_receive's flags: CX_TELL, each hit let go is also handed back (CX_HIT, with its facts) for
   the Python side to log; without it no call returns for a hit. */
#define CX_TELL 1

struct notif {
    uint64_t id;
    uint32_t pid;
    uint32_t flags;
    int32_t nr;
    uint32_t arch;
    uint64_t ip;
    uint64_t args[6];
};

struct notif_resp {
    uint64_t id;
    int64_t val;
    int32_t error;
    uint32_t flags;
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
        char path[2 * PATH_MAX + 8];
        int pl = w[0] == '/' ? snprintf(path, sizeof path, "%s", w)
                             : snprintf(path, sizeof path, "%s/%s", cwd, w);
        if (pl < 0 || (size_t)pl >= sizeof path) return 1;
        if (w[wl - 1] == '/' || (wl >= 2 && !strcmp(w + wl - 2, "/.")) ||
            (wl >= 3 && !strcmp(w + wl - 3, "/..")) || !strcmp(w, ".") || !strcmp(w, "..")) {
            /* A word that follows its last link (`link/`): links_of looks further only when
               it is there (`sed s/a/b/` names nothing). */
            struct stat st;
            if (lstat(path, &st) && (errno == ENOENT || errno == ENOTDIR)) {
                word = next;
                continue;
            }
            return 1;
        }
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
void cx_unexpect(int tid);
int cx_same_image(int pid, const unsigned char *argv, uint32_t argv_len, const unsigned char *env,
                  uint32_t env_len, uint64_t dev, uint64_t ino);
int cx_let_go(int listener, uint64_t id, int tid, const unsigned char *argv, uint32_t argv_len,
              const unsigned char *env, uint32_t env_len, uint64_t dev, uint64_t ino);


static __thread struct buf facts_buf, key_buf;

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

static struct expected take_expected(int tid) {
    struct expected e = {0};
    pthread_mutex_lock(&expected_lock);
    for (int i = 0; i < EXPECTED; i++) {
        if (expected[i].tid == tid) {
            e = expected[i];
            memset(&expected[i], 0, sizeof expected[i]); /* its buffers are e's now */
            break;
        }
    }
    pthread_mutex_unlock(&expected_lock);
    return e;
}

static void free_expected(struct expected *e) {
    free(e->argv);
    free(e->env);
}

/* -- tracees let go here --

   A process this library seized for a hit (or that the Python side let go through cx_let_go) is
   "owned": its exec event is compared here and it is detached here, and the Python side never
   hears of it unless its exec event differs (CX_FRESH: judged afresh there). Only the seizing
   thread sees its events (ptrace), so each thread counts its own. */

#define OWNED 1024

static struct {
    int tid;
    int owner; /* the tracing thread (gettid) */
} owned[OWNED];
static pthread_mutex_t owned_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int owned_here;

static int thread_id(void) { return (int)syscall(SYS_gettid); }

/* The thread that owns tid, or 0. */
static int owner_of(int tid) {
    int found = 0;
    pthread_mutex_lock(&owned_lock);
    for (int i = 0; i < OWNED; i++)
        if (owned[i].tid == tid) {
            found = owned[i].owner;
            break;
        }
    pthread_mutex_unlock(&owned_lock);
    return found;
}

static int own(int tid) {
    int done = -1;
    pthread_mutex_lock(&owned_lock);
    for (int i = 0; i < OWNED; i++)
        if (!owned[i].tid) {
            owned[i].tid = tid;
            owned[i].owner = thread_id();
            done = 0;
            break;
        }
    pthread_mutex_unlock(&owned_lock);
    if (!done) owned_here++;
    return done;
}

/* 1 when tid was this thread's own (and no longer is). */
static int unown(int tid) {
    int me = thread_id(), was = 0;
    pthread_mutex_lock(&owned_lock);
    for (int i = 0; i < OWNED; i++)
        if (owned[i].tid == tid && owned[i].owner == me) {
            owned[i].tid = 0;
            was = 1;
            break;
        }
    pthread_mutex_unlock(&owned_lock);
    if (was) owned_here--;
    return was;
}

/* How many tracees this thread owns: it must wait for their events before it stops. */
int cx_owned(void) { return owned_here; }

/* -- processes the Python side answers itself -- */

#define CLAIMED 1024
static int claimed[CLAIMED];
static pthread_mutex_t claimed_lock = PTHREAD_MUTEX_INITIALIZER;

/* Every held exec of tid goes to the Python side (on: it was refused, or is asked, and that
   answer is kept there), or no longer (off). */
int cx_claim(int tid, int on) {
    int done = on ? -1 : 0;
    pthread_mutex_lock(&claimed_lock);
    for (int i = 0; i < CLAIMED; i++) {
        if (claimed[i] == tid) {
            if (!on) claimed[i] = 0;
            done = 0;
            if (on) break;
        }
    }
    if (on && done)
        for (int i = 0; i < CLAIMED; i++)
            if (!claimed[i]) {
                claimed[i] = tid;
                done = 0;
                break;
            }
    pthread_mutex_unlock(&claimed_lock);
    return done;
}

static int is_claimed(int tid) {
    int found = 0;
    pthread_mutex_lock(&claimed_lock);
    for (int i = 0; i < CLAIMED; i++)
        if (claimed[i] == tid) {
            found = 1;
            break;
        }
    pthread_mutex_unlock(&claimed_lock);
    return found;
}

static int respond_continue(int listener, uint64_t id) {
    struct notif_resp r = {.id = id, .val = 0, .error = 0, .flags = NOTIF_FLAG_CONTINUE};
    if (ioctl(listener, NOTIF_SEND, &r) < 0 && errno != ENOENT) return -errno;
    return 0; /* ENOENT: gone, or the exec abandoned */
}

/* -- events -- */


/* One event of this thread's tracees: handled here (0), or for the Python side: CX_EVENT (as
   it came), CX_EXPECTED (an exec event of a Python-side tracee whose image was the expected
   one, now detached: *former exec'd), CX_FRESH (an exec event of an owned tracee whose image
   differs: it is the Python side's tracee now, still stopped there, to judge afresh). */
static int handle(pid_t w, int st, int *pid, int *status, int *former) {
    *pid = w;
    *status = st;
    *former = w;
    int mine = owner_of(w) == thread_id();
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
        cx_unexpect(w);
        if (mine) {
            unown(w);
            return 0;
        }
        return CX_EVENT;
    }
    if (!WIFSTOPPED(st)) return mine ? 0 : CX_EVENT;
    int event = st >> 16;
    if (event != PTRACE_EVENT_EXEC) {
        if (!mine) return CX_EVENT;
        /* As supervisor.py's step: a group-stop stays stopped until SIGCONT, a ptrace event
           goes on, a signal is delivered. */
        int sig = WSTOPSIG(st);
        if (event == PTRACE_EVENT_STOP)
            ptrace(PTRACE_LISTEN, w, 0, 0);
        else if (sig == SIGTRAP && event)
            ptrace(PTRACE_CONT, w, 0, 0);
        else
            ptrace(PTRACE_CONT, w, 0, sig);
        return 0;
    }
    unsigned long msg = 0;
    if (ptrace(PTRACE_GETEVENTMSG, w, 0, &msg) < 0) msg = (unsigned long)w;
    *former = (int)msg;
    if ((int)msg != w && owner_of((int)msg) == thread_id()) {
        /* A thread that was not the leader exec'd: it has the leader's pid now. */
        unown((int)msg);
        if (!mine) mine = !own(w) ? 1 : 0;
        if (!mine) return CX_FRESH;
    }
    struct expected e = take_expected((int)msg);
    int same = e.tid ? cx_same_image(w, e.argv, e.argv_len, e.env, e.env_len, e.dev, e.ino) : 0;
    free_expected(&e);
    if (same == 1) {
        if (ptrace(PTRACE_DETACH, w, 0, 0) < 0 && errno != ESRCH) return CX_EVENT;
        if (mine) {
            unown(w);
            return 0;
        }
        return CX_EXPECTED;
    }
    if (mine) {
        unown(w);
        return CX_FRESH; /* the Python side takes it over from here */
    }
    return CX_EVENT;
}

static __thread int events_fd = -1;

/* SIGCHLD, which the supervisor blocks in every thread, read from a descriptor: it wakes the
   receiving thread for its tracees' events while it waits on the listener. */
static int events(void) {
    if (events_fd >= 0) return events_fd;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    events_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return events_fd;
}

/* The events of this thread's tracees that have come, without waiting: 0 when none is left for
   the Python side, else handle's code. */
static int sweep(struct cx_out *out) {
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG | __WALL | __WNOTHREAD);
        if (w <= 0) return 0;
        int pid, status, former;
        int code = handle(w, st, &pid, &status, &former);
        if (code) {
            out->pid = (uint32_t)pid;
            out->nr = status;
            out->token = former;
            return code;
        }
    }
}

/* -- the listener -- */

static __thread struct buf facts_buf, key_buf;

/* Wait for the next thing the Python side must see: a held exec the cache does not allow (a miss,
   with its facts, or without them when this code cannot read it: the Python side reads it
   itself), or an event of this thread's tracees (out->pid, out->nr: the status, out->token: the
   tid that exec'd). An exec the cache allows is let go here (cx_let_go) and never handed back,
   but with CX_TELL. */
int cx_receive(int listener, struct cx_out *out, unsigned char **facts, int flags) {
    int sig = events();
    if (sig < 0) return -errno;
    for (;;) {
        memset(out, 0, sizeof *out);
        *facts = NULL;
        int code = sweep(out);
        if (code) return code;
        struct pollfd pfd[2] = {{.fd = listener, .events = POLLIN}, {.fd = sig, .events = POLLIN}};
        int r = poll(pfd, 2, -1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        if (pfd[1].revents) {
            struct signalfd_siginfo info;
            while (read(sig, &info, sizeof info) == sizeof info) {
            }
        }
        if (!pfd[0].revents) continue;
        if (!(pfd[0].revents & POLLIN)) {
            code = sweep(out);
            if (code) return code;
            return CX_GONE; /* no process holds the filter any more */
        }
        struct notif n;
        memset(&n, 0, sizeof n);
        if (ioctl(listener, NOTIF_RECV, &n) < 0) {
            if (errno == ENOENT || errno == EINTR) continue; /* left before it was read */
            return -errno;
        }
        out->id = n.id;
        out->pid = n.pid;
        out->nr = n.nr;
        memcpy(out->args, n.args, sizeof n.args);
        char where[2 * PATH_MAX + 8];
        if (read_facts(&n, &facts_buf, out, where, sizeof where)) return CX_MISS;
        if (ioctl(listener, NOTIF_ID_VALID, &n.id) < 0) continue; /* gone while read */
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
        if (is_claimed((int)n.pid)) return CX_MISS;
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
        out->dev = st.st_dev;
        out->ino = st.st_ino;
        int r2 = cx_let_go(listener, n.id, (int)n.pid, facts_buf.data + out->argv_off,
                           out->argv_len, facts_buf.data + out->env_off, out->env_len, st.st_dev,
                           st.st_ino);
        if (r2 == -EPERM) return CX_MISS; /* traced by a Python-side worker: its to see to */
        if (r2 < 0 && r2 != -ESRCH) return r2;
        if (flags & CX_TELL && !r2) return CX_HIT; /* let go: for the log */
    }
}

/* Let a held exec go on, allowed, traced by this thread until its exec event, where the image
   the kernel loaded is compared with these (and detached when it is the same; CX_FRESH for the
   Python side otherwise). A process some thread of this library traces already keeps that
   tracer (its earlier exec failed before loading). -ESRCH: gone meanwhile (nothing runs),
   -EPERM: traced by the Python side (its worker lets it go itself). */
int cx_let_go(int listener, uint64_t id, int tid, const unsigned char *argv, uint32_t argv_len,
              const unsigned char *env, uint32_t env_len, uint64_t dev, uint64_t ino) {
    if (!owner_of(tid)) {
        if (own(tid)) return -EPERM; /* no room to keep it: the Python side lets it go */
        if (ptrace(PTRACE_SEIZE, tid, 0, SEIZE_OPTIONS) < 0) {
            int err = errno;
            unown(tid);
            return err == ESRCH ? -ESRCH : -EPERM;
        }
    }
    if (cx_expect(tid, argv, argv_len, env, env_len, dev, ino)) {
        cx_unexpect(tid); /* its exec event then goes to the Python side as fresh */
    }
    return respond_continue(listener, id);
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

/* The next event of this thread's tracees, waiting for it: what handle says the Python side
   must see (CX_EVENT, CX_EXPECTED, CX_FRESH), after the ones handled here; -errno (ECHILD: no
   tracee left). */
int cx_follow(int *pid, int *status, int *former) {
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, __WALL | __WNOTHREAD);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        int code = handle(w, st, pid, status, former);
        if (code) return code;
    }
}

int cx_version(void) { return 4; }
