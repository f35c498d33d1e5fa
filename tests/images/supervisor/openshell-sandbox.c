/*
 * openshell-sandbox.c - TEST STAND-IN for the OpenShell sandbox supervisor.
 *
 * Used only by podmand's tests. It does the parts of the real supervisor that
 * the compute driver can observe: it runs as PID 1 of the sandbox container,
 * reads the token file, creates the SSH unix socket, starts the main process
 * from OPENSHELL_MAIN_PROCESS_SPEC, forwards stop signals, reaps zombies and
 * exits with the main process's status. No SSH, no policy, no networking.
 *
 * Build: gcc -static -O2 -o openshell-sandbox openshell-sandbox.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROG "openshell-sandbox"
static volatile pid_t child_pid;

__attribute__((noreturn)) static void die(const char *what) { fprintf(stderr, PROG ": %s\n", what); exit(1); }

/* ---- minimal JSON: only what is needed to pull out "command": [strings] ---- */
static const char *ws(const char *p) { while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++; return p; }

static void put_utf8(char **o, unsigned c)
{
    char *q = *o;
    if (c < 0x80) *q++ = (char)c;
    else if (c < 0x800) { *q++ = (char)(0xC0 | c >> 6); *q++ = (char)(0x80 | (c & 0x3F)); }
    else if (c < 0x10000) { *q++ = (char)(0xE0 | c >> 12); *q++ = (char)(0x80 | (c >> 6 & 0x3F)); *q++ = (char)(0x80 | (c & 0x3F)); }
    else { *q++ = (char)(0xF0 | c >> 18); *q++ = (char)(0x80 | (c >> 12 & 0x3F));
           *q++ = (char)(0x80 | (c >> 6 & 0x3F)); *q++ = (char)(0x80 | (c & 0x3F)); }
    *o = q;
}

/* Parses a JSON string at *pp (which points at '"'); returns a malloc'd copy. */
static char *json_string(const char **pp)
{
    const char *p = *pp + 1;
    char *out = malloc(strlen(p) * 2 + 1), *o = out;   /* \uXXXX never grows past 2x */
    unsigned c;
    if (!out) die("out of memory");
    while (*p && *p != '"') {
        if (*p != '\\') { *o++ = *p++; continue; }
        switch (*++p) {
        case 'n': *o++ = '\n'; break;   case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;   case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'u':
            if (sscanf(p + 1, "%4x", &c) != 1) die("bad \\u escape in main process spec");
            p += 4;
            if (c >= 0xD800 && c < 0xDC00 && p[1] == '\\' && p[2] == 'u') {   /* surrogate pair */
                unsigned lo;
                if (sscanf(p + 3, "%4x", &lo) == 1 && lo >= 0xDC00 && lo < 0xE000) {
                    c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00); p += 6;
                }
            }
            put_utf8(&o, c); break;
        case '\0': die("unterminated string in main process spec");
        default: *o++ = *p; break;      /* \" \\ \/ */
        }
        p++;
    }
    if (*p != '"') die("unterminated string in main process spec");
    *o = '\0';
    *pp = p + 1;
    return out;
}

/* Skips any JSON value (strings may contain brackets, so track them). */
static const char *json_skip(const char *p)
{
    int depth = 0;
    p = ws(p);
    do {
        if (*p == '"') { free(json_string(&p)); continue; }
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') depth--;
        else if (*p == '\0') die("truncated main process spec");
        p++;
        if (depth == 0) while (*p && !strchr(",}]", *p)) p++;   /* rest of a scalar */
    } while (depth > 0);
    return p;
}

/* Returns a NULL-terminated argv from the top-level "command" key, or NULL. */
static char **parse_command(const char *p)
{
    char **argv = NULL;
    size_t n = 0;
    p = ws(p);
    if (*p++ != '{') die("main process spec is not a JSON object");
    for (p = ws(p); *p && *p != '}'; p = ws(p)) {
        if (*p == ',') { p++; continue; }
        if (*p != '"') die("bad key in main process spec");
        char *key = json_string(&p);
        p = ws(p);
        if (*p++ != ':') die("missing ':' in main process spec");
        p = ws(p);
        if (strcmp(key, "command") == 0 && *p == '[') {
            for (p = ws(p + 1); *p != ']'; p = ws(p)) {
                if (*p == ',') { p++; continue; }
                if (*p != '"') die("\"command\" must be an array of strings");
                argv = realloc(argv, (n + 2) * sizeof *argv);
                if (!argv) die("out of memory");
                argv[n++] = json_string(&p);
                argv[n] = NULL;
            }
            p++;
        } else {
            p = json_skip(p);
        }
        free(key);
    }
    return argv;
}

/* base64url without padding (also tolerates '+', '/' and '='). */
static char *base64url_decode(const char *s)
{
    char *out = malloc(strlen(s) + 1), *o = out;
    unsigned acc = 0; int bits = 0;
    if (!out) die("out of memory");
    for (; *s && *s != '='; s++) {
        const char *al = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        const char *hit = strchr(al, *s);
        int v = hit && *s ? (int)(hit - al) : *s == '+' ? 62 : *s == '/' ? 63 : -1;
        if (v < 0) die("bad base64url in main process spec");
        acc = acc << 6 | (unsigned)v; bits += 6;
        if (bits >= 8) { bits -= 8; *o++ = (char)(acc >> bits & 0xFF); }
    }
    *o = '\0';
    return out;
}

/* ---- the SSH socket: created and kept listening, never served ---- */
static void mkdir_parents(char *path)
{
    for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) { perror(path); exit(1); }
        *s = '/';
    }
}

static int listen_unix(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    char *copy = strdup(path);
    int fd;
    if (strlen(path) >= sizeof sa.sun_path) die("ssh socket path too long");
    strcpy(sa.sun_path, path);
    mkdir_parents(copy);
    free(copy);
    unlink(path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 16) != 0) {
        fprintf(stderr, PROG ": cannot listen on %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return fd;
}

static void forward(int sig) { if (child_pid > 0) kill(child_pid, sig); }

int main(int argc, char **argv)
{
    const char *workdir = NULL, *v;
    char **cmd = NULL;
    static char *fallback[] = { "/bin/sh", NULL };
    int stops[] = { SIGTERM, SIGINT, SIGHUP }, status;
    sigset_t block, old;

    for (int i = 1; i < argc; i++)          /* only --workdir matters; ignore the rest */
        if (strcmp(argv[i], "--workdir") == 0 && i + 1 < argc) workdir = argv[++i];
        else if (strncmp(argv[i], "--workdir=", 10) == 0) workdir = argv[i] + 10;
    if (workdir && chdir(workdir) != 0) {
        fprintf(stderr, PROG ": cannot chdir to %s: %s\n", workdir, strerror(errno));
        return 1;
    }

    if (getenv("OPENSHELL_SANDBOX_TOKEN"))
        fprintf(stderr, PROG ": warning: OPENSHELL_SANDBOX_TOKEN is set; the token "
                        "must only be passed as a file (OPENSHELL_SANDBOX_TOKEN_FILE)\n");
    if ((v = getenv("OPENSHELL_SANDBOX_TOKEN_FILE")) != NULL) {
        char buf[4096];
        FILE *f = fopen(v, "r");
        if (!f || (fread(buf, 1, sizeof buf, f), ferror(f))) {   /* content is never printed */
            fprintf(stderr, PROG ": cannot read token file %s: %s\n", v, strerror(errno));
            return 1;
        }
        fclose(f);
    }

    v = getenv("OPENSHELL_SSH_SOCKET_PATH");
    listen_unix(v && *v ? v : "/run/openshell/ssh.sock");   /* fd stays open until exit */

    if ((v = getenv("OPENSHELL_MAIN_PROCESS_SPEC")) != NULL && *v) {
        char *json = strncmp(v, "base64url:", 10) == 0 ? base64url_decode(v + 10) : strdup(v);
        cmd = parse_command(json);
        free(json);
    }
    if (!cmd || !cmd[0]) cmd = fallback;

    v = getenv("OPENSHELL_SANDBOX_ID");
    fprintf(stderr, PROG ": sandbox %s endpoint %s ready\n", v ? v : "",
            getenv("OPENSHELL_ENDPOINT") ? getenv("OPENSHELL_ENDPOINT") : "");

    /* Block stop signals until child_pid is known so none is lost. */
    sigemptyset(&block);
    for (int i = 0; i < 3; i++) sigaddset(&block, stops[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    for (int i = 0; i < 3; i++) {
        struct sigaction sa = { .sa_handler = forward };
        sigemptyset(&sa.sa_mask);
        sigaction(stops[i], &sa, NULL);
    }
    child_pid = fork();
    if (child_pid < 0) die("fork failed");
    if (child_pid == 0) {
        for (int i = 0; i < 3; i++) signal(stops[i], SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(cmd[0], cmd);
        fprintf(stderr, PROG ": cannot exec %s: %s\n", cmd[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);

    /* PID 1: reap everything; leave when the main process is gone. */
    for (;;) {
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) die("lost track of the main process");
        if (pid == child_pid) break;
    }
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
