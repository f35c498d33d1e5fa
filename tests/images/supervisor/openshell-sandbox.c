/*
 * openshell-sandbox.c - TEST STAND-IN for the OpenShell sandbox supervisor.
 *
 * podmand's tests run this static binary as PID 1 of every sandbox container,
 * where the real supervisor (NVIDIA/OpenShell `openshell-sandbox`, commit
 * 2f7fb65) would run. It mirrors the real supervisor's startup checks as
 * listed in shared/docs/supervisor-contract.md ("item N" below): every
 * requirement that can be checked without a gateway fails with the real
 * supervisor's message and exit code, in the real supervisor's order, and a
 * launch that passes them is run the way the real supervisor runs it. It is
 * written from that description; no upstream code is copied.
 *
 * Startup, in upstream's order:
 *   argv and env-backed options, clap style, exit 2 ........... items 0, 2, 18
 *   the main-process spec (decoded before any gateway contact)  item 11
 *   the policy source .......................................... item 4
 *   the gateway connection: endpoint, TLS files, token ........ items 4, 6, 7
 *   identity: OCI / Resolved / None ............................ items 8, 9
 *   network namespace prerequisites: root, caps, ip, nsenter ... items 20, 22
 *   policy TCP endpoints versus runtime capabilities ........... item 13
 *   the operator's corporate proxy (argv only), fail-closed .... item 2
 *   sidecar topology hazards ................................... item 18
 *   account files, identity validation, workspace ownership .... items 9, 10
 *   runtime PID limit .......................................... item 23
 *   the main process: privilege drop, environment, no shell .... items 10, 11, 14
 *   the SSH socket (bound, never served) ....................... items 12, 25
 *   PID 1: reap, forward SIGTERM once, exit with the main status items 1, 24
 *
 * Nothing is contacted: no gateway, no namespace, no proxy (the corporate proxy's
 * settings are checked and logged, never dialled). What the gateway's
 * policy would say comes from test knobs in the environment:
 *   STANDIN_POLICY_TCP=1            the policy has `protocol: tcp` endpoints
 *   STANDIN_POLICY_RUN_AS_USER=x    process.run_as_user (unset: omitted)
 *   STANDIN_POLICY_RUN_AS_GROUP=x   process.run_as_group (unset: omitted)
 *   STANDIN_SUPERVISOR_NEWER=1      stand in for a supervisor newer than 2f7fb65: accept
 *                                   --upstream-proxy-ca-bundle (2f7fb65 refuses it, clap style)
 *                                   and https:// proxies, whose auth file needs no
 *                                   --upstream-proxy-auth-allow-insecure (PR #2512);
 *                                   check an image --workdir's structure at start, in every
 *                                   identity mode, and no longer as the final identity, and
 *                                   refuse workdirs over the system roots too (PR #2715)
 *
 * Errors look like the real ones: "Error:   × <message>" and exit 1 (miette),
 * "error: ..." and exit 2 (clap). Lines starting "openshell-sandbox: " are the
 * stand-in's own log for the tests (identity, token source, ready).
 *
 * Build: gcc -static -O2 -Wall -o openshell-sandbox openshell-sandbox.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <dirent.h>
#include <arpa/inet.h>
#include <grp.h>
#include <math.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define PROG "openshell-sandbox"
#define USAGE "Usage: openshell-sandbox [OPTIONS] [COMMAND]..."
#define SPEC_ENV "OPENSHELL_MAIN_PROCESS_SPEC"
#define WORKSPACE "/sandbox"
#define MAX_ID 4294967294u               /* u32::MAX - 1; the minimum is 1 */
#define ACCOUNT_FILE_MAX (1024 * 1024)
#define ACCOUNT_LINE_MAX 8192
#define ACCOUNT_FIELD_MAX 1024
#define CAP_NET_ADMIN_BIT 12
#define CAP_SYS_ADMIN_BIT 21
#define TIMES "\xc3\x97"                 /* × */
#define ARROW "\xe2\x95\xb0\xe2\x94\x80\xe2\x96\xb6" /* ╰─▶ */
#define EMDASH "\xe2\x80\x94"            /* — */

extern char **environ;

/* ================================================================ basics */

typedef struct { char *s; size_t n, cap; } buf;

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) { fputs(PROG ": out of memory\n", stderr); exit(1); }
    return p;
}

static void b_add(buf *b, const void *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void b_str(buf *b, const char *s) { b_add(b, s, strlen(s)); }
static void b_chr(buf *b, char c) { b_add(b, &c, 1); }
static char *b_take(buf *b) { if (!b->s) b_add(b, "", 0); return b->s; }

static char *vfmt(const char *f, va_list ap)
{
    char *s;
    if (vasprintf(&s, f, ap) < 0) { fputs(PROG ": out of memory\n", stderr); exit(1); }
    return s;
}

static char *fmt(const char *f, ...)
{
    va_list ap;
    char *s;
    va_start(ap, f);
    s = vfmt(f, ap);
    va_end(ap);
    return s;
}

static char *xstrndup(const char *s, size_t n)
{
    char *d = xrealloc(NULL, n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static bool given(const char *s) { return s && *s; }
static bool streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* Rust's io::Error text for an errno: "No such file or directory (os error 2)". */
static char *os_err(int e) { return fmt("%s (os error %d)", strerror(e), e); }
/* nix's Errno text: "EPERM: Operation not permitted". */
static char *nix_err(int e) { return fmt("%s: %s", strerrorname_np(e), strerror(e)); }

/* ============================================================ reporting */

/* miette's report, as `main() -> miette::Result` prints it (item 0). The
 * message is not re-wrapped at 80 columns the way miette does. */
static _Noreturn void die_cause(const char *msg, const char *cause)
{
    fprintf(stderr, "Error:   " TIMES " %s\n", msg);
    if (cause) fprintf(stderr, "  " ARROW " %s\n", cause);
    exit(1);
}

static _Noreturn void die(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    die_cause(vfmt(f, ap), NULL);
}

/* Gateway-side errors are retried five times upstream, then reported so. */
static _Noreturn void die_gateway(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    die("Policy fetch failed after 5 attempts: %s", vfmt(f, ap));
}

static _Noreturn void die_clap(bool usage, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    fprintf(stderr, "error: %s\n\n", vfmt(f, ap));
    if (usage) fputs(USAGE "\n\n", stderr);
    fputs("For more information, try '--help'.\n", stderr);
    exit(2);
}

static void say(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    fprintf(stderr, PROG ": %s\n", vfmt(f, ap));
    va_end(ap);
}

/* ============================================== UTF-8 and Rust's parsers */

/* core::str::from_utf8: true when valid; else *up_to is the valid prefix and
 * *bad the length of the invalid sequence (0 when the input is cut short). */
static bool utf8_check(const unsigned char *s, size_t n, size_t *up_to, int *bad)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i], lo = 0x80, hi = 0xBF;
        int width = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                  : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        *up_to = i;
        if (width == 0) { *bad = 1; return false; }
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        for (int k = 1; k < width; k++) {
            if (i + k >= n) { *bad = 0; return false; }
            if (s[i + k] < (k == 1 ? lo : 0x80) || s[i + k] > (k == 1 ? hi : 0xBF)) { *bad = k; return false; }
        }
        i += width;
    }
    return true;
}

static bool is_utf8n(const char *s, size_t n) { size_t u; int b; return utf8_check((const unsigned char *)s, n, &u, &b); }
static bool is_utf8(const char *s) { return is_utf8n(s, strlen(s)); }

static char *utf8_error(const char *s, size_t n)
{
    size_t up_to = 0;
    int bad = 0;
    utf8_check((const unsigned char *)s, n, &up_to, &bad);
    if (bad) return fmt("invalid utf-8 sequence of %d bytes from index %zu", bad, up_to);
    return fmt("incomplete utf-8 byte sequence from index %zu", up_to);
}

/* One code point of valid UTF-8. */
static uint32_t utf8_next(const char **p)
{
    const unsigned char *s = (const unsigned char *)*p;
    uint32_t c = s[0];
    int width = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (width > 1) c &= 0xFF >> (width + 1);
    for (int k = 1; k < width; k++) c = c << 6 | (s[k] & 0x3F);
    *p += width;
    return c;
}

static bool uni_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool uni_control(uint32_t c) { return c < 0x20 || (c >= 0x7F && c <= 0x9F); }

/* str::trim() of valid UTF-8 (Unicode White_Space): the kept byte range. */
static void trim_range(const char *s, size_t n, size_t *start, size_t *stop)
{
    const char *p = s, *end = s + n;
    bool seen = false;
    *start = *stop = 0;
    while (p < end) {
        const char *at = p;
        if (!uni_space(utf8_next(&p))) {
            if (!seen) *start = at - s;
            seen = true;
            *stop = p - s;
        }
    }
}

static char *rust_trimn(const char *s, size_t n)
{
    size_t start, stop;
    trim_range(s, n, &start, &stop);
    return xstrndup(s + start, stop - start);
}
static char *rust_trim(const char *s) { return rust_trimn(s, strlen(s)); }

/* str::parse::<u32>(): an optional '+', then ASCII digits, no overflow. */
static bool parse_u32n(const char *s, size_t n, uint32_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    if (n > 0 && s[0] == '+') i++;
    if (i == n) return false;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > UINT32_MAX) return false;
    }
    *out = (uint32_t)v;
    return true;
}
static bool parse_u32(const char *s, uint32_t *out) { return parse_u32n(s, strlen(s), out); }
static bool is_number(const char *s) { uint32_t v; return parse_u32(s, &v); }

/* str::parse::<i64>/<u64>(): NULL, or Rust's ParseIntError text. */
static const char *parse_int(const char *s, bool is_signed, long long *sval, unsigned long long *uval)
{
    const char *p = s;
    bool neg = false;
    unsigned long long v = 0, lim = is_signed ? 9223372036854775807ULL : ~0ULL;
    if (!*p) return "cannot parse integer from empty string";
    if ((*p == '+' || *p == '-') && !p[1]) return "invalid digit found in string";
    if (*p == '+') p++;
    else if (*p == '-' && is_signed) { neg = true; p++; lim++; }
    for (; *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (*p < '0' || *p > '9') return "invalid digit found in string";
        if (v > (lim - d) / 10)
            return neg ? "number too small to fit in target type" : "number too large to fit in target type";
        v = v * 10 + d;
    }
    if (sval) *sval = neg ? (long long)(0ULL - v) : (long long)v;
    if (uval) *uval = v;
    return NULL;
}

/* <str as Debug>: quoted, with Rust's escapes. */
static char *rust_debug(const char *s, size_t n)
{
    buf b = {0};
    const char *p = s, *end = s + n;
    b_chr(&b, '"');
    while (p < end) {
        const char *at = p;
        uint32_t c = utf8_next(&p);
        if (c == '"' || c == '\\') { b_chr(&b, '\\'); b_chr(&b, (char)c); }
        else if (c == '\n') b_str(&b, "\\n");
        else if (c == '\r') b_str(&b, "\\r");
        else if (c == '\t') b_str(&b, "\\t");
        else if (c == 0) b_str(&b, "\\0");
        else if (uni_control(c)) b_str(&b, fmt("\\u{%x}", c));
        else b_add(&b, at, p - at);
    }
    b_chr(&b, '"');
    return b_take(&b);
}

/* <f64 as Display> (shortest round-trip, never an exponent), then serde's
 * "always show a decimal point". */
static char *rust_float(double f)
{
    char tmp[64], digits[32];
    int prec, nd = 0, point;
    buf b = {0};
    const char *q = tmp;
    if (f == 0) return fmt("%s0.0", signbit(f) ? "-" : "");
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    if (*q == '-') { b_chr(&b, '-'); q++; }
    for (; *q != 'e'; q++) if (*q != '.') digits[nd++] = *q;
    point = atoi(q + 1) + 1;             /* digits before the decimal point */
    if (point <= 0) {
        b_str(&b, "0.");
        for (int i = 0; i < -point; i++) b_chr(&b, '0');
        b_add(&b, digits, nd);
    } else if (point >= nd) {
        b_add(&b, digits, nd);
        for (int i = nd; i < point; i++) b_chr(&b, '0');
        b_str(&b, ".0");
    } else {
        b_add(&b, digits, point);
        b_chr(&b, '.');
        b_add(&b, digits + point, nd - point);
    }
    return b_take(&b);
}

/* std::env::var(): NULL when unset or not valid UTF-8. */
static const char *env_var(const char *name)
{
    const char *v = getenv(name);
    return v && is_utf8(v) ? v : NULL;
}

/* Whole file as bytes (std::fs::read); NULL with errno set on failure. */
static char *slurp(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    buf b = {0};
    char chunk[65536];
    ssize_t r;
    if (fd < 0) return NULL;
    while ((r = read(fd, chunk, sizeof chunk)) != 0) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { int e = errno; close(fd); free(b.s); errno = e; return NULL; }
        b_add(&b, chunk, (size_t)r);
    }
    close(fd);
    *len = b.n;
    return b_take(&b);
}

/* std::fs::read_to_string: NULL with *err set to io::Error's text. */
static char *read_text(const char *path, size_t *len, char **err)
{
    char *data = slurp(path, len);
    if (!data) { *err = os_err(errno); return NULL; }
    if (!is_utf8n(data, *len)) { *err = "stream did not contain valid UTF-8"; return NULL; }
    return data;
}

/* ================================================ argv (items 0, 2, 18) */

struct opts {
    const char *workdir;
    bool network, process, network_init;
    /* the corporate proxy (item 2); --upstream-proxy-ca-bundle is a newer supervisor's flag */
    const char *proxy, *no_proxy, *proxy_auth_file, *proxy_ca_bundle;
    bool proxy_auth_allow_insecure, proxy_connect_by_hostname;
    char **command;                      /* trailing positional argv, or NULL */
};

/* newer: a flag only supervisors after 2f7fb65 have; unknown unless STANDIN_SUPERVISOR_NEWER=1 */
struct longopt { const char *name, *value_name; bool seen, newer; };

static struct longopt longopts[] = {
    { "workdir", "WORKDIR", false },
    { "mode", "MODE", false },
    { "upstream-proxy", "UPSTREAM_PROXY", false },
    { "upstream-no-proxy", "UPSTREAM_NO_PROXY", false },
    { "upstream-proxy-auth-file", "UPSTREAM_PROXY_AUTH_FILE", false },
    { "upstream-proxy-auth-allow-insecure", NULL, false },
    { "upstream-proxy-connect-by-hostname", NULL, false },
    { "upstream-proxy-ca-bundle", "UPSTREAM_PROXY_CA_BUNDLE", .newer = true },
};

static bool newer_supervisor(void) { return streq(getenv("STANDIN_SUPERVISOR_NEWER"), "1"); }

static _Noreturn void print_help(void)
{
    puts("Process sandbox and monitor (OpenShell supervisor test stand-in)\n\n" USAGE "\n\n"
         "Arguments:\n  [COMMAND]...  Command to execute in the sandbox\n\n"
         "Options:\n"
         "      --workdir <WORKDIR>        Working directory for the sandboxed process\n"
         "      --mode <MODE>              Supervisor components [default: network,process]\n"
         "      --upstream-proxy <UPSTREAM_PROXY>\n"
         "      --upstream-no-proxy <UPSTREAM_NO_PROXY>\n"
         "      --upstream-proxy-auth-file <UPSTREAM_PROXY_AUTH_FILE>\n"
         "      --upstream-proxy-auth-allow-insecure\n"
         "      --upstream-proxy-connect-by-hostname");
    if (newer_supervisor()) puts("      --upstream-proxy-ca-bundle <UPSTREAM_PROXY_CA_BUNDLE>");
    puts("  -h, --help                     Print help\n"
         "  -V, --version                  Print version");
    exit(0);
}

static _Noreturn void print_version(void) { puts("openshell-sandbox 0.0.0-standin"); exit(0); }

static _Noreturn void unexpected_argument(const char *arg)
{
    die_clap(true, "unexpected argument '%s' found\n\n  tip: to pass '%s' as a value, use '-- %s'",
             arg, arg, arg);
}

/* --mode: comma-separated components; NULL or the error text. */
static const char *parse_mode(const char *value, struct opts *o)
{
    const char *p = value;
    o->network = o->process = o->network_init = false;
    while (*p) {
        size_t n = strcspn(p, ",");
        char *part = rust_trimn(p, n);
        if (streq(part, "network")) o->network = true;
        else if (streq(part, "process")) o->process = true;
        else if (streq(part, "network-init")) o->network_init = true;
        else if (*part)
            return fmt("unknown mode component '%s' (expected 'network', 'process', or 'network-init')", part);
        p += n;
        if (*p == ',') p++;
    }
    if (o->network_init && (o->network || o->process))
        return "--mode=network-init cannot be combined with other components";
    if (!o->network && !o->process && !o->network_init)
        return "--mode must enable at least one of: network, process, network-init";
    return NULL;
}

static struct longopt *find_longopt(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof longopts / sizeof *longopts; i++)
        if (strlen(longopts[i].name) == len && strncmp(longopts[i].name, name, len) == 0)
            return longopts[i].newer && !newer_supervisor() ? NULL : &longopts[i];
    return NULL;
}

/* One --name[=value]; returns the index of the last argv element consumed. */
static int parse_long(int argc, char **argv, int i, struct opts *o)
{
    const char *name = argv[i] + 2, *eq = strchr(name, '='), *value = NULL, *err;
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    struct longopt *lo;
    char *label;
    if (len == 4 && strncmp(name, "help", 4) == 0) print_help();
    if (len == 7 && strncmp(name, "version", 7) == 0) print_version();
    if (!(lo = find_longopt(name, len))) unexpected_argument(xstrndup(argv[i], len + 2));
    label = lo->value_name ? fmt("--%s <%s>", lo->name, lo->value_name) : fmt("--%s", lo->name);
    if (lo->value_name) {
        if (eq) value = eq + 1;
        else if (i + 1 < argc && !(argv[i + 1][0] == '-' && argv[i + 1][1])) value = argv[++i];
        else die_clap(false, "a value is required for '%s' but none was supplied", label);
    } else if (eq) {
        die_clap(true, "unexpected value '%s' for '%s' found; no more were expected", eq + 1, label);
    }
    if (lo->seen) die_clap(true, "the argument '%s' cannot be used multiple times", label);
    lo->seen = true;
    if (streq(lo->name, "workdir")) o->workdir = value;
    if (streq(lo->name, "upstream-proxy")) o->proxy = value;
    if (streq(lo->name, "upstream-no-proxy")) o->no_proxy = value;
    if (streq(lo->name, "upstream-proxy-auth-file")) o->proxy_auth_file = value;
    if (streq(lo->name, "upstream-proxy-ca-bundle")) o->proxy_ca_bundle = value;
    if (streq(lo->name, "upstream-proxy-auth-allow-insecure")) o->proxy_auth_allow_insecure = true;
    if (streq(lo->name, "upstream-proxy-connect-by-hostname")) o->proxy_connect_by_hostname = true;
    if (streq(lo->name, "mode") && (err = parse_mode(value, o)))
        die_clap(false, "invalid value '%s' for '%s': %s", value, label, err);
    return i;
}

/* clap's value parser for an env-backed u32 (it parses as i64, then ranges). */
static void check_u32_env(const char *env, const char *label)
{
    const char *v = getenv(env), *err;
    long long n;
    if (!v) return;
    if ((err = parse_int(v, true, &n, NULL))) die_clap(false, "invalid value '%s' for '%s': %s", v, label, err);
    if (n < 0 || n > 4294967295LL)
        die_clap(false, "invalid value '%lld' for '%s': %lld is not in 0..=4294967295", n, label, n);
}

/* clap reads every env-backed argument, used or not, in declaration order. */
static void check_env_options(void)
{
    static const char *const envs[] = {
        "OPENSHELL_SANDBOX_ID", "OPENSHELL_SANDBOX", "OPENSHELL_ENDPOINT", "OPENSHELL_POLICY_RULES",
        "OPENSHELL_POLICY_DATA", "OPENSHELL_LOG_LEVEL", "OPENSHELL_SSH_SOCKET_PATH",
        "OPENSHELL_INFERENCE_ROUTES", "OPENSHELL_PROXY_UID", "OPENSHELL_PROXY_GID",
        "OPENSHELL_SIDECAR_STATE_DIR", "OPENSHELL_PROXY_TLS_DIR",
    };
    for (size_t i = 0; i < sizeof envs / sizeof *envs; i++) {
        const char *v = getenv(envs[i]);
        if (v && !is_utf8(v)) die_clap(true, "invalid UTF-8 was detected in one or more arguments");
        if (streq(envs[i], "OPENSHELL_PROXY_UID")) check_u32_env(envs[i], "--proxy-uid <PROXY_UID>");
        if (streq(envs[i], "OPENSHELL_PROXY_GID")) check_u32_env(envs[i], "--proxy-gid <PROXY_GID>");
    }
}

static void parse_argv(int argc, char **argv, struct opts *o)
{
    int i;
    bool mode_seen;
    for (i = 1; i < argc; i++)
        if (!is_utf8(argv[i])) die_clap(true, "invalid UTF-8 was detected in one or more arguments");
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (streq(a, "--")) { i++; break; }
        if (a[0] != '-' || a[1] == '\0') break;          /* the command: everything from here */
        if (a[1] != '-') {
            if (streq(a, "-h")) print_help();
            if (streq(a, "-V")) print_version();
            unexpected_argument(xstrndup(a, 2));
        }
        i = parse_long(argc, argv, i, o);
    }
    if (i < argc) o->command = argv + i;
    mode_seen = find_longopt("mode", 4)->seen;
    if (!mode_seen) parse_mode("network,process", o);
    check_env_options();
}

/* ==================================== JSON, with serde_json's error texts */

#define E_EOF_VALUE "EOF while parsing a value"
#define E_EOF_LIST "EOF while parsing a list"
#define E_EOF_OBJECT "EOF while parsing an object"
#define E_EOF_STRING "EOF while parsing a string"
#define E_EXPECTED_VALUE "expected value"
#define E_IDENT "expected ident"
#define E_COLON "expected `:`"
#define E_LIST_COMMA "expected `,` or `]`"
#define E_OBJECT_COMMA "expected `,` or `}`"
#define E_KEY "key must be a string"
#define E_TRAILING_COMMA "trailing comma"
#define E_TRAILING "trailing characters"
#define E_NUMBER "invalid number"
#define E_RANGE "number out of range"
#define E_ESCAPE "invalid escape"
#define E_CONTROL "control character (\\u0000-\\u001F) found while parsing a string"
#define E_SURROGATE "lone leading surrogate in hex escape"
#define E_HEX_END "unexpected end of hex escape"
#define E_DEPTH "recursion limit exceeded"

struct jp { const char *s; size_t n, i; int depth; char *err; };
struct jnum { enum { J_U64, J_I64, J_F64 } kind; unsigned long long u; long long i; double f; };

/* serde_json positions: error() is where reading stopped, peek_error() one further. */
static bool j_fail_at(struct jp *j, size_t at, const char *msg)
{
    size_t line = 1, col = 0;
    for (size_t k = 0; k < at; k++) {
        if (j->s[k] == '\n') { line++; col = 0; } else col++;
    }
    j->err = fmt("%s at line %zu column %zu", msg, line, col);
    return false;
}
static bool j_error(struct jp *j, const char *msg) { return j_fail_at(j, j->i, msg); }
static bool j_peek_error(struct jp *j, const char *msg) { return j_fail_at(j, j->i < j->n ? j->i + 1 : j->n, msg); }

/* Skips JSON whitespace; the next byte, or -1 at the end. */
static int j_ws(struct jp *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r'))
        j->i++;
    return j->i < j->n ? (unsigned char)j->s[j->i] : -1;
}

static bool j_enter(struct jp *j) { return ++j->depth < 128 || j_peek_error(j, E_DEPTH); }

static void put_utf8(buf *b, uint32_t c)
{
    char u[4];
    int n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (n == 1) u[0] = (char)c;
    else {
        for (int k = n - 1; k > 0; k--) { u[k] = (char)(0x80 | (c & 0x3F)); c >>= 6; }
        u[0] = (char)((0xF00 >> n) | c);
    }
    b_add(b, u, n);
}

static bool j_hex4(struct jp *j, uint32_t *out)
{
    *out = 0;
    if (j->i + 4 > j->n) { j->i = j->n; return j_error(j, E_EOF_STRING); }
    for (int k = 0; k < 4; k++) {
        char c = j->s[j->i++];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return j_error(j, E_ESCAPE);
        *out = *out << 4 | (uint32_t)v;
    }
    return true;
}

static bool j_unicode_escape(struct jp *j, buf *out)
{
    uint32_t hi, lo;
    if (!j_hex4(j, &hi)) return false;
    if (hi >= 0xDC00 && hi <= 0xDFFF) return j_error(j, E_SURROGATE);
    if (hi < 0xD800 || hi > 0xDBFF) { put_utf8(out, hi); return true; }
    for (const char *want = "\\u"; *want; want++) {
        if (j->i >= j->n) return j_error(j, E_EOF_STRING);
        if (j->s[j->i++] != *want) return j_error(j, E_HEX_END);
    }
    if (!j_hex4(j, &lo)) return false;
    if (lo < 0xDC00 || lo > 0xDFFF) return j_error(j, E_SURROGATE);
    put_utf8(out, 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
    return true;
}

/* A string body, after its opening quote; decoded into out (may hold NULs). */
static bool j_string(struct jp *j, buf *out)
{
    b_add(out, "", 0);
    for (;;) {
        unsigned char c;
        if (j->i >= j->n) return j_error(j, E_EOF_STRING);
        c = (unsigned char)j->s[j->i++];
        if (c == '"') return true;
        if (c < 0x20) return j_error(j, E_CONTROL);
        if (c != '\\') { b_chr(out, (char)c); continue; }
        if (j->i >= j->n) return j_error(j, E_EOF_STRING);
        switch (c = (unsigned char)j->s[j->i++]) {
        case '"': case '\\': case '/': b_chr(out, (char)c); break;
        case 'b': b_chr(out, '\b'); break;
        case 'f': b_chr(out, '\f'); break;
        case 'n': b_chr(out, '\n'); break;
        case 'r': b_chr(out, '\r'); break;
        case 't': b_chr(out, '\t'); break;
        case 'u': if (!j_unicode_escape(j, out)) return false; break;
        default: return j_error(j, E_ESCAPE);
        }
    }
}

static bool j_ident(struct jp *j, const char *rest)
{
    for (; *rest; rest++) {
        if (j->i >= j->n) return j_error(j, E_EOF_VALUE);
        if (j->s[j->i++] != *rest) return j_error(j, E_IDENT);
    }
    return true;
}

static bool j_digits(struct jp *j)
{
    size_t start = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return j->i > start;
}

/* A number from its first digit (a leading '-' already consumed). */
static bool j_number(struct jp *j, bool positive, struct jnum *v)
{
    size_t start = j->i - (positive ? 0 : 1);
    bool is_float = false;
    char *text;
    if (j->i >= j->n) return j_error(j, E_EOF_VALUE);
    if (j->s[j->i] == '0') {
        j->i++;
        if (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') return j_peek_error(j, E_NUMBER);
    } else if (j->s[j->i] >= '1' && j->s[j->i] <= '9') {
        j_digits(j);
    } else {
        j->i++;
        return j_error(j, E_NUMBER);
    }
    if (j->i < j->n && j->s[j->i] == '.') {
        j->i++;
        is_float = true;
        if (!j_digits(j)) return j_peek_error(j, j->i < j->n ? E_NUMBER : E_EOF_VALUE);
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        is_float = true;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
        if (j->i >= j->n) return j_error(j, E_EOF_VALUE);
        if (j->s[j->i] < '0' || j->s[j->i] > '9') { j->i++; return j_error(j, E_NUMBER); }
        j_digits(j);
    }
    text = xstrndup(j->s + start, j->i - start);
    if (!is_float && !parse_int(positive ? text : text + 1, false, NULL, &v->u)) {
        if (positive) { v->kind = J_U64; return true; }
        if (v->u != 0 && v->u <= 9223372036854775808ULL) { v->kind = J_I64; v->i = (long long)(0ULL - v->u); return true; }
    }
    v->kind = J_F64;
    v->f = strtod(text, NULL);
    if (isinf(v->f)) return j_error(j, E_RANGE);
    return true;
}

static char *j_describe_number(const struct jnum *v)
{
    if (v->kind == J_U64) return fmt("integer `%llu`", v->u);
    if (v->kind == J_I64) return fmt("integer `%lld`", v->i);
    return fmt("floating point `%s`", rust_float(v->f));
}

/* serde_json's peek_invalid_type: consume the value, then name what it was. */
static bool j_invalid_type(struct jp *j, const char *expected)
{
    int c = j->i < j->n ? (unsigned char)j->s[j->i] : -1;
    char *what;
    struct jnum v;
    buf s = {0};
    switch (c) {
    case 'n': j->i++; if (!j_ident(j, "ull")) return false; what = "null"; break;
    case 't': j->i++; if (!j_ident(j, "rue")) return false; what = "boolean `true`"; break;
    case 'f': j->i++; if (!j_ident(j, "alse")) return false; what = "boolean `false`"; break;
    case '-': j->i++; if (!j_number(j, false, &v)) return false; what = j_describe_number(&v); break;
    case '"': j->i++; if (!j_string(j, &s)) return false; what = fmt("string %s", rust_debug(s.s, s.n)); break;
    case '[': what = "sequence"; break;
    case '{': what = "map"; break;
    default:
        if (c >= '0' && c <= '9') { if (!j_number(j, true, &v)) return false; what = j_describe_number(&v); break; }
        return j_peek_error(j, E_EXPECTED_VALUE);
    }
    return j_error(j, fmt("invalid type: %s, expected %s", what, expected));
}

/* A key and its ':' inside an ignored object, from the opening quote. */
static bool j_ignore_key(struct jp *j)
{
    buf key = {0};
    int c = j_ws(j);
    if (c < 0) return j_peek_error(j, E_EOF_VALUE);
    if (c != '"') return j_peek_error(j, E_KEY);
    j->i++;
    if (!j_string(j, &key)) return false;
    c = j_ws(j);
    if (c < 0) return j_peek_error(j, E_EOF_OBJECT);
    if (c != ':') return j_peek_error(j, E_COLON);
    j->i++;
    return true;
}

/* After an ignored value: close finished containers; *done once the
 * outermost one is closed, else the next element is due. */
static bool j_ignore_next(struct jp *j, buf *stack, bool *done)
{
    *done = false;
    for (;;) {
        char top;
        int c;
        if (stack->n == 0) { *done = true; return true; }
        top = stack->s[stack->n - 1];
        c = j_ws(j);
        if (c < 0) return j_peek_error(j, top == '[' ? E_EOF_LIST : E_EOF_OBJECT);
        if (c == (top == '[' ? ']' : '}')) { j->i++; stack->n--; continue; }
        if (c != ',') return j_peek_error(j, top == '[' ? E_LIST_COMMA : E_OBJECT_COMMA);
        j->i++;
        return top == '[' || j_ignore_key(j);
    }
}

/* serde_json's ignore_value: any well-formed value, iteratively (no depth limit). */
static bool j_ignore(struct jp *j)
{
    buf stack = {0};
    struct jnum v;
    bool done;
    for (;;) {
        int c = j_ws(j);
        buf s = {0};
        if (c < 0) return j_peek_error(j, E_EOF_VALUE);
        if (c == '[' || c == '{') {
            j->i++;
            if (j_ws(j) == (c == '[' ? ']' : '}')) j->i++;
            else if (c == '{' && j_ws(j) < 0) return j_peek_error(j, E_EOF_OBJECT);
            else if (c == '{' && !j_ignore_key(j)) return false;
            else { b_chr(&stack, (char)c); continue; }
        } else if (c == 'n' || c == 't' || c == 'f') {
            j->i++;
            if (!j_ident(j, c == 'n' ? "ull" : c == 't' ? "rue" : "alse")) return false;
        } else if (c == '"') {
            j->i++;
            if (!j_string(j, &s)) return false;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            j->i += c == '-';
            if (!j_number(j, c != '-', &v)) return false;
        } else {
            return j_peek_error(j, E_EXPECTED_VALUE);
        }
        if (!j_ignore_next(j, &stack, &done)) return false;
        if (done) return true;
    }
}

static bool de_u32(struct jp *j, uint32_t *out)
{
    int c = j_ws(j);
    struct jnum v;
    if (c < 0) return j_peek_error(j, E_EOF_VALUE);
    if (c == '-') { j->i++; if (!j_number(j, false, &v)) return false; }
    else if (c >= '0' && c <= '9') { if (!j_number(j, true, &v)) return false; }
    else return j_invalid_type(j, "u32");
    if (v.kind == J_U64 && v.u <= UINT32_MAX) { *out = (uint32_t)v.u; return true; }
    if (v.kind == J_F64) return j_error(j, fmt("invalid type: %s, expected u32", j_describe_number(&v)));
    return j_error(j, fmt("invalid value: %s, expected u32", j_describe_number(&v)));
}

static bool de_bool(struct jp *j, bool *out)
{
    int c = j_ws(j);
    if (c < 0) return j_peek_error(j, E_EOF_VALUE);
    if (c == 't') { j->i++; *out = true; return j_ident(j, "rue"); }
    if (c == 'f') { j->i++; *out = false; return j_ident(j, "alse"); }
    return j_invalid_type(j, "a boolean");
}

static bool de_string(struct jp *j, buf *out)
{
    int c = j_ws(j);
    if (c < 0) return j_peek_error(j, E_EOF_VALUE);
    if (c != '"') return j_invalid_type(j, "a string");
    j->i++;
    return j_string(j, out);
}

/* serde_json's SeqAccess: before each element; false at ']' (not consumed). */
static bool j_seq_next(struct jp *j, bool *first, bool *more)
{
    int c = j_ws(j);
    *more = false;
    if (c == ']') return true;
    if (c < 0) return j_peek_error(j, E_EOF_LIST);
    if (!*first) {
        if (c != ',') return j_peek_error(j, E_LIST_COMMA);
        j->i++;
        c = j_ws(j);
        if (c == ']') return j_peek_error(j, E_TRAILING_COMMA);
        if (c < 0) return j_peek_error(j, E_EOF_VALUE);
    }
    *first = false;
    *more = true;
    return true;
}

/* serde_json's end_seq: the closing ']' (or what is wrong instead). */
static bool j_end_seq(struct jp *j)
{
    int c = j_ws(j);
    if (c == ']') { j->i++; return true; }
    if (c < 0) return j_peek_error(j, E_EOF_LIST);
    if (c != ',') return j_peek_error(j, E_LIST_COMMA);
    j->i++;
    return j_peek_error(j, j_ws(j) == ']' ? E_TRAILING_COMMA : E_TRAILING);
}

struct strv { char **v; size_t n; bool nul; };

static bool de_strings(struct jp *j, struct strv *out)
{
    int c = j_ws(j);
    bool first = true, more;
    if (c < 0) return j_peek_error(j, E_EOF_VALUE);
    if (c != '[') return j_invalid_type(j, "a sequence");
    j->i++;
    if (!j_enter(j)) return false;
    for (;;) {
        buf s = {0};
        if (!j_seq_next(j, &first, &more)) return false;
        if (!more) break;
        if (!de_string(j, &s)) return false;
        if (memchr(b_take(&s), '\0', s.n)) out->nul = true;
        out->v = xrealloc(out->v, (out->n + 2) * sizeof *out->v);
        out->v[out->n++] = s.s;
        out->v[out->n] = NULL;
    }
    j->depth--;
    return j_end_seq(j);
}

/* --------------------------------------------- MainProcessConfig (item 11) */

struct spec { uint32_t version; struct strv command; bool tty; bool has_version, has_command, has_tty; };

static bool spec_field(struct jp *j, const char *key, struct spec *sp)
{
    int c = j_ws(j);
    bool *seen = streq(key, "version") ? &sp->has_version : streq(key, "command") ? &sp->has_command
               : streq(key, "tty") ? &sp->has_tty : NULL;
    if (seen && *seen) return j_error(j, fmt("duplicate field `%s`", key));
    if (c < 0) return j_peek_error(j, E_EOF_OBJECT);
    if (c != ':') return j_peek_error(j, E_COLON);
    j->i++;
    if (!seen) return j_ignore(j);
    *seen = true;
    if (seen == &sp->has_version) return de_u32(j, &sp->version);
    if (seen == &sp->has_command) return de_strings(j, &sp->command);
    return de_bool(j, &sp->tty);
}

static bool spec_from_map(struct jp *j, struct spec *sp)
{
    bool first = true;
    for (;;) {
        int c = j_ws(j);
        buf key = {0};
        if (c == '}') break;
        if (c < 0) return j_peek_error(j, E_EOF_OBJECT);
        if (!first) {
            if (c != ',') return j_peek_error(j, E_OBJECT_COMMA);
            j->i++;
            c = j_ws(j);
            if (c == '}') return j_peek_error(j, E_TRAILING_COMMA);
            if (c < 0) return j_peek_error(j, E_EOF_VALUE);
        }
        first = false;
        if (c != '"') return j_peek_error(j, E_KEY);
        j->i++;
        if (!j_string(j, &key)) return false;
        if (!spec_field(j, memchr(key.s, '\0', key.n) ? "" : key.s, sp)) return false;
    }
    j->i++;                              /* end_map: the '}' */
    if (!sp->has_version) return j_error(j, "missing field `version`");
    if (!sp->has_command) return j_error(j, "missing field `command`");
    if (!sp->has_tty) return j_error(j, "missing field `tty`");
    return true;
}

static bool spec_from_seq(struct jp *j, struct spec *sp)
{
    bool first = true, more;
    for (int k = 0; k < 3; k++) {
        if (!j_seq_next(j, &first, &more)) return false;
        if (!more) {
            size_t at;
            if (!j_end_seq(j)) return false;
            at = j->i;
            return j_fail_at(j, at, fmt("invalid length %d, expected struct MainProcessConfig with 3 elements", k));
        }
        if (!(k == 0 ? de_u32(j, &sp->version) : k == 1 ? de_strings(j, &sp->command) : de_bool(j, &sp->tty)))
            return false;
    }
    return j_end_seq(j);
}

/* serde_json::from_str::<MainProcessConfig>(); NULL, or the error text. */
static char *parse_spec_json(const char *s, size_t n, struct spec *sp)
{
    struct jp j = { s, n, 0, 0, NULL };
    int c = j_ws(&j);
    bool ok;
    memset(sp, 0, sizeof *sp);
    if (c < 0) ok = j_peek_error(&j, E_EOF_VALUE);
    else if (c == '{') { j.i++; ok = j_enter(&j) && spec_from_map(&j, sp); }
    else if (c == '[') { j.i++; ok = j_enter(&j) && spec_from_seq(&j, sp); }
    else ok = j_invalid_type(&j, "struct MainProcessConfig");
    if (ok && j_ws(&j) >= 0) ok = j_peek_error(&j, E_TRAILING);
    return ok ? NULL : j.err;
}

/* OPENSHELL_USER_ENVIRONMENT as HashMap<String, String>; false if invalid. */
static bool user_env_has(const char *json, const char *want, bool *ok)
{
    struct jp j = { json, strlen(json), 0, 0, NULL };
    bool first = true, found = false;
    *ok = false;
    if (j_ws(&j) != '{') return false;
    j.i++;
    for (;;) {
        int c = j_ws(&j);
        buf key = {0}, value = {0};
        if (c == '}') { j.i++; break; }
        if (!first) {
            if (c != ',') return false;
            j.i++;
            c = j_ws(&j);
        }
        first = false;
        if (c != '"') return false;
        j.i++;
        if (!j_string(&j, &key) || j_ws(&j) != ':') return false;
        j.i++;
        if (!de_string(&j, &value)) return false;
        if (key.n == strlen(want) && memcmp(key.s, want, key.n) == 0) found = true;
    }
    if (j_ws(&j) >= 0) return false;
    *ok = true;
    return found;
}

/* ================================== base64url, URL_SAFE_NO_PAD (item 11) */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '-' ? 62 : c == '_' ? 63 : -1;
}

/* NULL with *err set to the base64 crate's DecodeError text on failure. */
static char *b64url_decode(const char *in, size_t *out_len, char **err)
{
    size_t n = strlen(in), pad = 0, len;
    buf out = {0};
    uint32_t acc = 0;
    int bits = 0;
    while (pad < n && in[n - 1 - pad] == '=') pad++;
    len = n - pad;
    for (size_t i = 0; i < len; i++)
        if (b64_value((unsigned char)in[i]) < 0) {
            *err = fmt("Invalid symbol %u, offset %zu.", (unsigned char)in[i], i);
            return NULL;
        }
    if (pad) { *err = "Invalid padding"; return NULL; }
    if (len % 4 == 1) { *err = fmt("Invalid input length: %zu", len); return NULL; }
    if (len % 4 && (b64_value((unsigned char)in[len - 1]) & (len % 4 == 2 ? 0x0F : 0x03))) {
        *err = fmt("Invalid last symbol %u, offset %zu.", (unsigned char)in[len - 1], len - 1);
        return NULL;
    }
    for (size_t i = 0; i < len; i++) {
        acc = acc << 6 | (uint32_t)b64_value((unsigned char)in[i]);
        bits += 6;
        if (bits >= 8) { bits -= 8; b_chr(&out, (char)(acc >> bits & 0xFF)); }
    }
    *out_len = out.n;
    return b_take(&out);
}

/* ======================================= the main process spec (item 11) */

struct mainproc { char **argv; bool tty, nul; };

static void decode_spec(const char *encoded, struct mainproc *m)
{
    const char *json = encoded;
    size_t len = strlen(encoded);
    struct spec sp;
    char *err = NULL;
    if (strncmp(encoded, "base64url:", 10) == 0) {
        if (!(json = b64url_decode(encoded + 10, &len, &err)))
            die("invalid " SPEC_ENV " base64url: %s", err);
        if (!is_utf8n(json, len)) die("invalid " SPEC_ENV " UTF-8: %s", utf8_error(json, len));
    }
    if ((err = parse_spec_json(json, len, &sp))) die("invalid " SPEC_ENV ": %s", err);
    if (sp.version != 1) die("unsupported " SPEC_ENV " version %u", sp.version);
    if (sp.command.n == 0 || sp.command.v[0][0] == '\0') die(SPEC_ENV " command must not be empty");
    m->argv = sp.command.v;
    m->tty = sp.tty;
    m->nul = sp.command.nul;
}

/* A trailing positional command wins, and the spec is then not even read. */
static void resolve_command(const struct opts *o, struct mainproc *m)
{
    static char *scratch[] = { "/bin/bash", "-l", NULL };
    const char *spec;
    memset(m, 0, sizeof *m);
    if (o->command && o->command[0]) { m->argv = o->command; return; }
    if ((spec = env_var(SPEC_ENV))) { decode_spec(spec, m); return; }
    m->argv = scratch;
    m->tty = true;
}

/* =============================================== gateway stage (items 4, 6, 7) */

/* tonic's Endpoint::from_shared (http::Uri), then what a connect would do. */
static const char *endpoint_problem(const char *e)
{
    const char *sep = strstr(e, "://"), *auth, *end, *colon = NULL;
    if (!*e) return "invalid gRPC endpoint";
    for (const char *p = e; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7F) return "invalid gRPC endpoint";
    if (sep) {
        for (const char *p = e; p < sep; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (p > e && ((*p >= '0' && *p <= '9') || *p == '+' || *p == '-' || *p == '.'))))
                return "invalid gRPC endpoint";
        auth = sep + 3;
        end = auth + strcspn(auth, "/?#");
        if (end == auth) return "invalid gRPC endpoint";
        for (const char *p = auth; p < end; p++) {
            if (*p == '@') colon = NULL;
            else if (*p == ']') colon = NULL;
            else if (*p == ':') colon = p;
        }
        if (colon) {
            uint32_t port;
            if (colon + 1 < end && (!parse_u32n(colon + 1, end - colon - 1, &port) || colon[1] == '+' || port > 65535))
                return "invalid gRPC endpoint";
        }
    }
    if (strncmp(e, "http://", 7) != 0 && strncmp(e, "https://", 8) != 0)
        return "failed to connect to OpenShell server";
    return NULL;
}

static void check_tls_files(void)
{
    const char *ca = env_var("OPENSHELL_TLS_CA"), *cert, *key;
    size_t n;
    if (!ca) die_gateway("OPENSHELL_TLS_CA is required");
    if (!(cert = env_var("OPENSHELL_TLS_CERT"))) die_gateway("OPENSHELL_TLS_CERT is required");
    if (!(key = env_var("OPENSHELL_TLS_KEY"))) die_gateway("OPENSHELL_TLS_KEY is required");
    if (!slurp(ca, &n)) die_gateway("failed to read CA cert from %s", ca);
    if (!slurp(cert, &n)) die_gateway("failed to read client cert from %s", cert);
    if (!slurp(key, &n)) die_gateway("failed to read client key from %s", key);
    /* upstream then builds the TLS config ("failed to configure TLS") and
     * connects; the stand-in parses no PEM and contacts nothing. */
}

/* "Bearer <token>" must be a valid header value: tab or 0x20-0x7E only. */
static bool header_bytes_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != '\t' && ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] > 0x7E)) return false;
    return true;
}

/* A token file, read whole (UTF-8) and trimmed; whether it is header-safe. */
static bool token_file_ok(const char *path, const char *what)
{
    size_t n, start, stop;
    char *err, *data = read_text(path, &n, &err);
    if (!data) die_gateway("failed to read %s from %s", what, path);
    trim_range(data, n, &start, &stop);
    return header_bytes_ok(data + start, stop - start);
}

/* The token sources in order; the token itself is never printed. */
static void acquire_token(void)
{
    const char *v;
    if (given(v = env_var("OPENSHELL_SANDBOX_TOKEN"))) {
        if (!header_bytes_ok(v, strlen(v))) die_gateway("sandbox JWT contained characters not valid for a header value");
        say("token source env");
        return;
    }
    if (given(v = env_var("OPENSHELL_SANDBOX_TOKEN_FILE"))) {
        if (!token_file_ok(v, "sandbox token")) die_gateway("sandbox JWT contained characters not valid for a header value");
        say("token source file %s", v);
        return;
    }
    if (given(v = env_var("OPENSHELL_K8S_SA_TOKEN_FILE"))) {
        if (!token_file_ok(v, "K8s SA token")) die_gateway("SA token contained characters not valid for a header value");
        /* upstream exchanges it through IssueSandboxToken; no gateway here */
        say("token source k8s-sa %s", v);
        return;
    }
    die_gateway("no sandbox token source available " EMDASH " set one of OPENSHELL_SANDBOX_TOKEN, "
                "OPENSHELL_SANDBOX_TOKEN_FILE, or OPENSHELL_K8S_SA_TOKEN_FILE");
}

/* ========================================== the policy (items 4, 5, 13) */

struct policy { const char *user, *group; bool tcp; };

/* What the gateway would send, from the test knobs. */
static void policy_knobs(struct policy *p)
{
    p->tcp = streq(getenv("STANDIN_POLICY_TCP"), "1");
    p->user = getenv("STANDIN_POLICY_RUN_AS_USER");
    p->group = getenv("STANDIN_POLICY_RUN_AS_GROUP");
}

/* Local policy files (a dev override; no gateway is contacted then). */
static void load_file_policy(const char *rules, const char *data)
{
    size_t n;
    char *err;
    if (!read_text(data, &n, &err)) die("failed to read YAML data from %s: %s", data, err);
    if (!slurp(rules, &n)) die("%s: %s", rules, os_err(errno));  /* regorus' own text differs */
    say("policy source local files rules=%s data=%s", rules, data);
}

static void load_policy(struct policy *p)
{
    const char *rules = getenv("OPENSHELL_POLICY_RULES"), *data = getenv("OPENSHELL_POLICY_DATA");
    const char *id = getenv("OPENSHELL_SANDBOX_ID"), *endpoint = getenv("OPENSHELL_ENDPOINT"), *why;
    if (rules && data) {
        load_file_policy(rules, data);
    } else if (id && endpoint) {
        if ((why = endpoint_problem(endpoint))) die_gateway("%s", why);
        if (strncmp(endpoint, "https://", 8) == 0) check_tls_files();
        acquire_token();                 /* upstream reads it once connected */
    } else {
        die("Sandbox policy required. Provide one of:\n"
            " - --policy-rules and --policy-data (or OPENSHELL_POLICY_RULES and OPENSHELL_POLICY_DATA env vars)\n"
            " - --sandbox-id and --openshell-endpoint (or OPENSHELL_SANDBOX_ID and OPENSHELL_ENDPOINT env vars)");
    }
    policy_knobs(p);
}

/* ================================================ account files (item 9) */

struct field { const char *p; size_t n; };

/* str::lines(): split at '\n', dropping a '\r' right before it. */
static bool next_line(const char **cur, const char *end, struct field *line)
{
    const char *nl;
    if (*cur >= end) return false;
    nl = memchr(*cur, '\n', end - *cur);
    line->p = *cur;
    if (nl) {
        line->n = nl - *cur;
        *cur = nl + 1;
        if (line->n && line->p[line->n - 1] == '\r') line->n--;
    } else {
        line->n = end - *cur;
        *cur = end;
    }
    return true;
}

/* Splits at ':' (or sep); stores up to max fields, returns how many there are. */
static size_t split_fields(struct field line, char sep, struct field *f, size_t max)
{
    size_t count = 0;
    const char *p = line.p, *end = line.p + line.n;
    for (;;) {
        const char *q = memchr(p, sep, end - p);
        if (count < max) { f[count].p = p; f[count].n = (q ? q : end) - p; }
        count++;
        if (!q) return count;
        p = q + 1;
    }
}

static bool field_is(struct field f, const char *s) { return f.n == strlen(s) && memcmp(f.p, s, f.n) == 0; }

/* The longest of a line's ':'-separated fields (all of them, not just the first few). */
static size_t longest_field(struct field line)
{
    size_t longest = 0, run = 0;
    for (size_t i = 0; i < line.n; i++) {
        if (line.p[i] == ':') run = 0;
        else if (++run > longest) longest = run;
    }
    return longest;
}

/* Whether a ','-separated list contains exactly name. */
static bool list_has(struct field list, const char *name)
{
    const char *p = list.p, *end = list.p + list.n;
    for (;;) {
        const char *comma = memchr(p, ',', end - p);
        struct field one = { p, (size_t)((comma ? comma : end) - p) };
        if (field_is(one, name)) return true;
        if (!comma) return false;
        p = comma + 1;
    }
}

struct account { const char *path; char *data; size_t len; };

/* The strict reader: O_NOFOLLOW, a regular file, at most 1 MiB, UTF-8. */
static char *read_account_file(const char *path, struct account *a)
{
    struct stat st;
    char chunk[65536];
    buf b = {0};
    ssize_t r;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    a->path = path;
    if (fd < 0) return fmt("failed to open '%s': %s", path, os_err(errno));
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); return os_err(e); }
    if (!S_ISREG(st.st_mode)) { close(fd); return fmt("account path '%s' is not a regular file", path); }
    if (st.st_size > ACCOUNT_FILE_MAX) { close(fd); return fmt("account file '%s' exceeds 1048576 bytes", path); }
    while (b.n <= ACCOUNT_FILE_MAX && (r = read(fd, chunk, sizeof chunk)) != 0) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { int e = errno; close(fd); return os_err(e); }
        b_add(&b, chunk, (size_t)r);
    }
    close(fd);
    if (b.n > ACCOUNT_FILE_MAX) return fmt("account file '%s' exceeds 1048576 bytes", path);
    if (!is_utf8n(b_take(&b), b.n)) return fmt("account file '%s' is not valid UTF-8", path);
    a->data = b.s;
    a->len = b.n;
    return NULL;
}

enum acct_query { PASSWD_BY_NAME, PASSWD_BY_UID, GROUP_BY_NAME };

/* One unique matching entry: 1 found (*id, *gid), 0 none, -1 error (*err). */
static int acct_find(enum acct_query q, const char *name, uint32_t uid, uint32_t *id, uint32_t *gid, char **err)
{
    bool group = q == GROUP_BY_NAME;
    const char *path = group ? "/etc/group" : "/etc/passwd", *cur, *end;
    struct account a;
    struct field line, f[8];
    int found = 0;
    if ((*err = read_account_file(path, &a))) return -1;
    for (cur = a.data, end = a.data + a.len; next_line(&cur, end, &line);) {
        size_t nf;
        uint32_t v, x = 0, y = 0;
        if (line.n == 0 || line.p[0] == '#') continue;
        if (line.n > ACCOUNT_LINE_MAX) { *err = fmt("account file '%s' contains an oversized line", path); return -1; }
        nf = split_fields(line, ':', f, 8);
        if (longest_field(line) > ACCOUNT_FIELD_MAX) {
            *err = fmt("account file '%s' contains an oversized field", path);
            return -1;
        }
        if (q == PASSWD_BY_UID ? !(nf > 2 && parse_u32n(f[2].p, f[2].n, &v) && v == uid) : !field_is(f[0], name))
            continue;
        if (!group && nf != 7) { *err = "matching /etc/passwd entry is malformed"; return -1; }
        if (group && nf != 4) { *err = "matching /etc/group entry is malformed"; return -1; }
        if (!group && !parse_u32n(f[2].p, f[2].n, &x)) { *err = "matching /etc/passwd UID is malformed"; return -1; }
        if (!parse_u32n(f[group ? 2 : 3].p, f[group ? 2 : 3].n, &y)) {
            *err = group ? "matching /etc/group GID is malformed" : "matching /etc/passwd GID is malformed";
            return -1;
        }
        if (found) { *err = fmt("account identity is ambiguous in '%s'", path); return -1; }
        found = 1;
        *id = group ? y : x;
        if (gid) *gid = y;
    }
    return found;
}

/* identity.rs validate_component: NULL, or the "is malformed" text. */
static char *component_problem(const char *value, const char *kind)
{
    char *trimmed = rust_trim(value);
    bool bad = !*value || strlen(value) > ACCOUNT_FIELD_MAX || strcmp(trimmed, value) != 0;
    for (const char *p = value; !bad && *p;) {
        uint32_t c = utf8_next(&p);
        bad = uni_control(c) || c == ':';
    }
    return bad ? fmt("%s component '%s' is malformed", kind, value) : NULL;
}

struct gidlist { uint32_t *v; size_t n; };

static void gid_push(struct gidlist *l, uint32_t g)
{
    for (size_t i = 0; i < l->n; i++) if (l->v[i] == g) return;
    l->v = xrealloc(l->v, (l->n + 1) * sizeof *l->v);
    l->v[l->n++] = g;
}

static int gid_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Supplementary groups of a named OCI user from /etc/group, strictly. */
static char *oci_groups(const char *user_decl, uint32_t primary, struct gidlist *out)
{
    char *user = xstrndup(user_decl, strcspn(user_decl, ":")), *err;
    const char *cur, *end;
    struct account a;
    struct field line, f[4];
    memset(out, 0, sizeof *out);
    if ((err = component_problem(user, "OCI user"))) return err;
    if (is_number(user)) return NULL;
    if ((err = read_account_file("/etc/group", &a))) return err;
    gid_push(out, primary);
    for (cur = a.data, end = a.data + a.len; next_line(&cur, end, &line);) {
        uint32_t gid;
        if (line.n == 0 || line.p[0] == '#') continue;
        if (line.n > ACCOUNT_LINE_MAX) return "account file '/etc/group' contains an oversized line";
        if (split_fields(line, ':', f, 4) != 4 || longest_field(line) > ACCOUNT_FIELD_MAX)
            return "group membership entry in '/etc/group' is malformed";
        if (!list_has(f[3], user)) continue;
        if (!parse_u32n(f[2].p, f[2].n, &gid)) return "group membership GID in '/etc/group' is malformed";
        if (gid == 0) return fmt("OCI user '%s' is a member of prohibited GID 0", user);
        gid_push(out, gid);
    }
    qsort(out->v, out->n, sizeof *out->v, gid_cmp);
    return NULL;
}

/* ---------------- the lenient NSS "files" view that glibc lookups would give */

struct pw { char *name, *dir; uint32_t uid, gid; };

static bool nss_passwd(const char *name, bool by_uid, uint32_t uid, struct pw *out)
{
    FILE *f = fopen("/etc/passwd", "re");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool found = false;
    if (!f) return false;
    while (!found && (n = getline(&line, &cap, f)) > 0) {
        struct field fl[7], ln = { line, (size_t)n };
        uint32_t u, g;
        if (line[n - 1] == '\n') ln.n--;
        if (ln.n == 0 || line[0] == '#' || split_fields(ln, ':', fl, 7) < 7) continue;
        if (!parse_u32n(fl[2].p, fl[2].n, &u) || !parse_u32n(fl[3].p, fl[3].n, &g)) continue;
        if (by_uid ? u != uid : !field_is(fl[0], name)) continue;
        out->name = xstrndup(fl[0].p, fl[0].n);
        out->dir = xstrndup(fl[5].p, fl[5].n);
        out->uid = u;
        out->gid = g;
        found = true;
    }
    free(line);
    fclose(f);
    return found;
}

/* getgrnam (by name) or getgrgid (by gid); with a user, getgrouplist. */
static bool nss_group(const char *name, uint32_t *gid, const char *member, struct gidlist *list)
{
    FILE *f = fopen("/etc/group", "re");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool found = false;
    if (!f) return false;
    while ((n = getline(&line, &cap, f)) > 0) {
        struct field fl[4], ln = { line, (size_t)n };
        uint32_t g;
        size_t nf;
        if (line[n - 1] == '\n') ln.n--;
        if (ln.n == 0 || line[0] == '#' || (nf = split_fields(ln, ':', fl, 4)) < 3) continue;
        if (!parse_u32n(fl[2].p, fl[2].n, &g)) continue;
        if (member) {
            if (nf > 3 && list_has(fl[3], member)) gid_push(list, g);
            continue;
        }
        if (name ? field_is(fl[0], name) : g == *gid) { *gid = g; found = true; break; }
    }
    free(line);
    fclose(f);
    return found;
}

/* initgroups()/getgrouplist(): the primary group plus every membership. */
static struct gidlist nss_grouplist(const char *user, uint32_t primary)
{
    struct gidlist l = {0};
    gid_push(&l, primary);
    nss_group(NULL, NULL, user, &l);
    return l;
}

/* ================================================= identity (items 8, 9) */

enum idmode { ID_OCI, ID_RESOLVED, ID_NONE };

struct identity {
    enum idmode mode;
    const char *declaration;             /* the raw OCI USER */
    bool has_uid, has_gid;               /* components resolved from OCI USER */
    uint32_t uid, gid;
};

static const char *identity_env(const char *name)
{
    const char *v = getenv(name);
    if (v && !is_utf8(v)) die("%s is not valid UTF-8", name);
    return v;
}

static uint32_t driver_id(const char *v, bool *ok)
{
    uint32_t n = 0;
    *ok = *ok && parse_u32(v, &n) && n >= 1 && n <= MAX_ID;
    return n;
}

/* DriverIdentity::from_env: which of the three modes the driver selected. */
static void driver_identity(struct identity *id, struct policy *p)
{
    const char *decl = identity_env("OPENSHELL_OCI_IMAGE_USER");
    const char *uid = identity_env("OPENSHELL_SANDBOX_UID"), *gid = identity_env("OPENSHELL_SANDBOX_GID");
    bool ok = true;
    if (!given(uid)) uid = NULL;
    if (!given(gid)) gid = NULL;
    if (decl && !*decl && (uid || gid)) decl = NULL;     /* the clearing rule */
    memset(id, 0, sizeof *id);
    if (decl && !uid && !gid) {
        id->mode = ID_OCI;
        id->declaration = decl;
    } else if (!decl && uid && gid) {
        uint32_t u = driver_id(uid, &ok), g = driver_id(gid, &ok);
        if (!ok) die("driver UID/GID must be numeric identities in range [1, 4294967294]");
        id->mode = ID_RESOLVED;
        p->user = fmt("%u", u);          /* the driver's numbers override the policy */
        p->group = fmt("%u", g);
    } else if (!decl && !uid && !gid) {
        id->mode = ID_NONE;
        if (!given(p->user)) p->user = "sandbox";
        if (!given(p->group)) p->group = "sandbox";
    } else if (decl) {
        die("OPENSHELL_OCI_IMAGE_USER conflicts with non-empty OPENSHELL_SANDBOX_UID/OPENSHELL_SANDBOX_GID driver identity");
    } else {
        die("OPENSHELL_SANDBOX_UID and OPENSHELL_SANDBOX_GID must be supplied together");
    }
}

static uint32_t acct_lookup(enum acct_query q, const char *name, uint32_t uid, uint32_t *gid, bool *found)
{
    uint32_t id = 0;
    char *err;
    int r = acct_find(q, name, uid, &id, gid, &err);
    if (r < 0) die("%s", err);
    *found = r == 1;
    return id;
}

/* The OCI user component; *primary set when a primary GID is required. */
static uint32_t resolve_oci_user(const char *user, const char *decl, bool need_primary, bool *has_primary, uint32_t *primary)
{
    uint32_t uid, gid = 0;
    bool found;
    char *err;
    *has_primary = false;
    if (!*user) die("OCI USER is required because run_as_user is omitted");
    if ((err = component_problem(user, "OCI user"))) die("%s", err);
    if (streq(user, "root")) die("OCI USER '%s' selects root", decl);
    if (parse_u32(user, &uid)) {
        if (uid == 0) die("OCI USER '%s' selects UID 0", decl);
        if (need_primary) {
            acct_lookup(PASSWD_BY_UID, NULL, uid, &gid, &found);
            *has_primary = found;
            *primary = gid;
        }
        if (*has_primary && gid == 0) die("OCI USER '%s' resolves to prohibited primary GID 0", decl);
        return uid;
    }
    uid = acct_lookup(PASSWD_BY_NAME, user, 0, &gid, &found);
    if (!found) die("OCI USER name '%s' was not found in /etc/passwd", user);
    if (uid == 0) die("OCI USER '%s' resolves to prohibited UID 0", decl);
    if (need_primary && gid == 0) die("OCI USER '%s' resolves to prohibited primary GID 0", decl);
    *has_primary = need_primary;
    *primary = gid;
    return uid;
}

static uint32_t resolve_oci_group(const char *group, const char *decl)
{
    uint32_t gid;
    bool found;
    char *err;
    if ((err = component_problem(group, "OCI group"))) die("%s", err);
    if (streq(group, "root")) die("OCI USER '%s' selects root group", decl);
    if (!parse_u32(group, &gid)) {
        gid = acct_lookup(GROUP_BY_NAME, group, 0, NULL, &found);
        if (!found) die("OCI group '%s' was not found in /etc/group", group);
    }
    if (gid == 0) die("OCI USER '%s' resolves to prohibited GID 0", decl);
    return gid;
}

/* OCI mode: explicit policy fields win, field by field. */
static void resolve_oci(struct identity *id, struct policy *p)
{
    const char *decl = id->declaration, *colon = strchr(decl, ':');
    const char *group = colon ? colon + 1 : NULL;
    char *user = colon ? xstrndup(decl, colon - decl) : (char *)decl;
    bool explicit_user = given(p->user), explicit_group = given(p->group), has_primary = false;
    bool need_primary = !explicit_group && !group;
    uint32_t uid = 0, primary = 0;
    if (explicit_user && explicit_group) return;       /* the image is not inspected */
    if (!explicit_user || need_primary) uid = resolve_oci_user(user, decl, need_primary, &has_primary, &primary);
    if (!explicit_user) {
        id->has_uid = true;
        id->uid = uid;
        p->user = user;
    }
    if (explicit_group) return;
    if (group && *group) {
        id->gid = resolve_oci_group(group, decl);
        p->group = group;
    } else if (group) {
        die("OCI USER '%s' has an empty group component", decl);
    } else {
        if (!has_primary)
            die("OCI USER '%s' uses a numeric UID without an explicit group, but /etc/passwd has no matching primary GID", decl);
        id->gid = primary;
        p->group = fmt("%u", primary);
    }
    id->has_gid = true;
}

/* ----------------------- the completed identity, checked again (item 9) */

static void validate_user(const struct identity *id, const struct policy *p)
{
    const char *u = p->user ? p->user : "sandbox";
    uint32_t n;
    struct pw pw;
    if (id->has_uid) {
        if (id->uid == 0) die("process user must not select UID 0");
        return;
    }
    if (parse_u32(u, &n)) {
        if (n < 1 || n > MAX_ID) die("process user UID must be in range [1, 4294967294]");
    } else if (streq(u, "sandbox")) {
        if (!nss_passwd("sandbox", false, 0, &pw)) die("explicit process user 'sandbox' was not found in the image");
    } else if (*u && !nss_passwd(u, false, 0, &pw)) {
        die("unrecognized sandbox identity '%s'; expected 'sandbox' or a numeric UID in range [1, 4294967294]", u);
    }
}

static void validate_group(const struct identity *id, const struct policy *p)
{
    const char *g = p->group ? p->group : "sandbox";
    uint32_t n;
    if (id->has_gid) {
        if (id->gid == 0) die("process group must not select GID 0");
        return;
    }
    if (parse_u32(g, &n)) {
        if (n < 1 || n > MAX_ID) die("process group GID must be in range [1, 4294967294]");
    } else if (streq(g, "sandbox")) {
        if (!nss_group("sandbox", &n, NULL, NULL)) die("explicit process group 'sandbox' was not found in the image");
    } else if (*g && !nss_group(g, &n, NULL, NULL)) {
        die("unrecognized sandbox group identity '%s'; expected 'sandbox' or a numeric GID in range [1, 4294967294]", g);
    }
}

/* resolve_filesystem_identity: uid/gid (when known) and supplementary groups. */
struct fs_identity { bool has_uid, has_gid; uint32_t uid, gid; struct gidlist groups; };

static char *filesystem_identity(const struct identity *id, const struct policy *p, struct fs_identity *fs)
{
    const char *user = given(p->user) ? p->user : NULL, *group = given(p->group) ? p->group : NULL;
    struct pw pw;
    uint32_t primary;
    memset(fs, 0, sizeof *fs);
    if ((fs->has_uid = id->has_uid)) fs->uid = id->uid;
    else if (user && parse_u32(user, &fs->uid)) fs->has_uid = true;
    else if (user && nss_passwd(user, false, 0, &pw)) { fs->has_uid = true; fs->uid = pw.uid; }
    if ((fs->has_gid = id->has_gid)) fs->gid = id->gid;
    else if (group && parse_u32(group, &fs->gid)) fs->has_gid = true;
    else if (group && nss_group(group, &fs->gid, NULL, NULL)) fs->has_gid = true;
    if (!user || is_number(user)) return NULL;
    if (fs->has_gid) primary = fs->gid;
    else if (!fs->has_uid) return fmt("Failed to resolve sandbox user '%s'", user);
    else if (!nss_passwd(NULL, true, fs->uid, &pw)) return fmt("Failed to resolve user from UID %u", fs->uid);
    else primary = pw.gid;
    if (id->has_uid) return oci_groups(user, primary, &fs->groups);
    fs->groups = nss_grouplist(user, primary);
    return NULL;
}

/* ============================ network namespace prerequisites (items 20, 22) */

static _Noreturn void netns_failed(const char *detail)
{
    die("Network namespace creation failed and proxy mode requires isolation. Ensure CAP_NET_ADMIN "
        "and CAP_SYS_ADMIN are available and iproute2 is installed. Error: %s", detail);
}

static const char *trusted_helper(const char *const *paths)
{
    struct stat st;
    for (; *paths; paths++)
        if (stat(*paths, &st) == 0 && S_ISREG(st.st_mode)) return *paths;
    return NULL;
}

static bool effective_caps(unsigned long long *caps)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    bool found = false;
    if (!f) return false;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "CapEff: %llx", caps) == 1;
    fclose(f);
    return found;
}

/* Upstream runs `ip netns add`, veth setup, then `nsenter --net=... ip`; the
 * stand-in checks what those need and creates nothing. */
static void netns_stage(void)
{
    static const char *const ip_paths[] = { "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip", NULL };
    static const char *const nsenter_paths[] = { "/usr/bin/nsenter", "/bin/nsenter", "/usr/sbin/nsenter", "/sbin/nsenter", NULL };
    const char *ip = trusted_helper(ip_paths);
    unsigned long long caps;
    if (!ip) netns_failed("trusted ip helper not found; checked /usr/sbin/ip, /sbin/ip, /usr/bin/ip, /bin/ip");
    if (geteuid() != 0)
        netns_failed(fmt("%s netns add failed: the supervisor must run as root (euid 0), it runs as euid %u",
                         ip, (unsigned)geteuid()));
    if (!effective_caps(&caps))
        netns_failed(fmt("%s netns add failed: cannot read CapEff from /proc/self/status", ip));
    if (!(caps >> CAP_NET_ADMIN_BIT & 1) || !(caps >> CAP_SYS_ADMIN_BIT & 1))
        netns_failed(fmt("%s netns add failed: Operation not permitted (effective capabilities %llx lack %s)", ip, caps,
                         !(caps >> CAP_NET_ADMIN_BIT & 1) && !(caps >> CAP_SYS_ADMIN_BIT & 1) ? "CAP_NET_ADMIN and CAP_SYS_ADMIN"
                         : !(caps >> CAP_NET_ADMIN_BIT & 1) ? "CAP_NET_ADMIN" : "CAP_SYS_ADMIN"));
    if (!trusted_helper(nsenter_paths))
        netns_failed("trusted nsenter helper not found; checked /usr/bin/nsenter, /bin/nsenter, /usr/sbin/nsenter, /sbin/nsenter");
}

static bool runtime_capability(const char *wanted)
{
    const char *list = env_var("OPENSHELL_NETWORK_RUNTIME_CAPABILITIES"), *p = list;
    while (p) {
        size_t n = strcspn(p, ",");
        if (streq(rust_trimn(p, n), wanted)) return true;
        p = p[n] ? p + n + 1 : NULL;
    }
    return false;
}

/* Policy DNS / transparent TCP (item 13). With the capability upstream also
 * needs nft in the namespace; the stand-in creates no namespace, and busybox
 * images have no nft, so that helper is deliberately not checked. */
static void tcp_stage(const struct policy *p, bool have_netns, bool sidecar_nftables)
{
    if (!p->tcp) return;
    if (!runtime_capability("policy-dns-transparent-tcp"))
        die("policy contains protocol: tcp endpoints, but the selected runtime does not advertise policy DNS and transparent TCP support");
    if (sidecar_nftables) die("policy DNS and transparent TCP are not yet supported by the sidecar topology");
    if (!have_netns) die("policy DNS and transparent TCP require a workload network namespace");
}

/* ====================================== process setup (items 9, 10, 23) */

/* Resolved mode: point the image's `sandbox` entries at the driver's ids. */
static void rewrite_account(const char *path, const char *uid, const char *gid)
{
    size_t len;
    char *err, *data = read_text(path, &len, &err);
    const char *cur, *end;
    struct field line, f[8];
    buf out = {0};
    bool found = false, passwd = uid != NULL, first = true;
    int fd;
    if (!data) die("%s", err);
    for (cur = data, end = data + len; next_line(&cur, end, &line); first = false) {
        size_t nf = split_fields(line, ':', f, 8);
        if (!first) b_chr(&out, '\n');
        if (line.n >= 8 && memcmp(line.p, "sandbox:", 8) == 0) {
            found = true;
            if (passwd && nf >= 7) {
                b_str(&out, fmt("%.*s:%.*s:%s:%s:%.*s:%.*s:%.*s", (int)f[0].n, f[0].p, (int)f[1].n, f[1].p, uid, gid,
                                (int)f[4].n, f[4].p, (int)f[5].n, f[5].p, (int)f[6].n, f[6].p));
                continue;
            }
            if (!passwd && nf >= 4) {
                b_str(&out, fmt("%.*s:%.*s:%s:%.*s", (int)f[0].n, f[0].p, (int)f[1].n, f[1].p, gid, (int)f[3].n, f[3].p));
                continue;
            }
        }
        b_add(&out, line.p, line.n);
    }
    if (!found) {
        if (!first) b_chr(&out, '\n');
        b_str(&out, passwd ? fmt("sandbox:x:%s:%s::/sandbox:/bin/sh", uid, gid) : fmt("sandbox:x:%s:", gid));
    }
    if ((len && data[len - 1] == '\n') || !found) b_chr(&out, '\n');
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0 || write(fd, b_take(&out), out.n) != (ssize_t)out.n) die("%s", os_err(errno));
    close(fd);
}

static void update_sandbox_accounts(void)
{
    const char *uid = env_var("OPENSHELL_SANDBOX_UID"), *gid = env_var("OPENSHELL_SANDBOX_GID");
    if (!given(uid)) return;
    if (!given(gid)) gid = uid;
    rewrite_account("/etc/passwd", uid, gid);
    rewrite_account("/etc/group", NULL, gid);
}

static void chown_or_die(const char *path, const struct fs_identity *fs, bool skip_rofs)
{
    if (lchown(path, fs->has_uid ? fs->uid : (uid_t)-1, fs->has_gid ? fs->gid : (gid_t)-1) == 0) return;
    if (skip_rofs && errno == EROFS) return;
    die("%s", nix_err(errno));
}

/* chown -R, skipping symlinks and read-only paths; unreadable dirs are skipped. */
static void chown_children(const char *dir, const struct fs_identity *fs)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d))) {
        struct stat st;
        char *path;
        if (streq(e->d_name, ".") || streq(e->d_name, "..")) continue;
        path = fmt("%s/%s", dir, e->d_name);
        if (lstat(path, &st) != 0) die("%s", os_err(errno));
        if (S_ISLNK(st.st_mode)) continue;
        chown_or_die(path, fs, true);
        if (S_ISDIR(st.st_mode)) chown_children(path, fs);
    }
    closedir(d);
}

static void chown_sandbox_home(const struct fs_identity *fs)
{
    struct stat st;
    if (lstat(WORKSPACE, &st) != 0) die("%s", os_err(errno));
    if (S_ISLNK(st.st_mode))
        die("path '" WORKSPACE "' is a symlink " EMDASH " refusing to chown (potential privilege escalation)");
    chown_or_die(WORKSPACE, fs, false);
    if (S_ISDIR(st.st_mode)) chown_children(WORKSPACE, fs);
}

/* OCI mode, --workdir /sandbox: only the directory itself is prepared. */
static void prepare_managed_workspace(const struct fs_identity *fs)
{
    struct stat st;
    if (lstat(WORKSPACE, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            die("workspace path component '" WORKSPACE "' is a symlink " EMDASH " refusing to follow it");
        if (!S_ISDIR(st.st_mode)) die("workspace path component '" WORKSPACE "' is not a directory");
    } else if (errno == ENOENT) {
        if (mkdir(WORKSPACE, 0777) != 0 || chmod(WORKSPACE, 0755) != 0) die("%s", os_err(errno));
    } else {
        die("%s", os_err(errno));
    }
    if (chown(WORKSPACE, fs->has_uid ? fs->uid : (uid_t)-1, fs->has_gid ? fs->gid : (gid_t)-1) != 0)
        die("%s", nix_err(errno));
    if (lstat(WORKSPACE, &st) != 0) die("%s", os_err(errno));
    if ((st.st_mode & 0300) != 0300 && chmod(WORKSPACE, (st.st_mode & 07777) | 0300) != 0) die("%s", os_err(errno));
}

/* Roots an image workdir must not overlap either way (driver_mounts.rs, container_paths.rs):
 * the OCI runtime's kernel mounts, OpenShell's control roots and, newer, the system's
 * executable and library roots (PR #2715 renames the first list "forbidden workspace root"). */
static const char *const RUNTIME_ROOTS[] = { "/proc", "/sys", "/dev", NULL };
static const char *const SYSTEM_ROOTS[] = { "/bin", "/sbin", "/lib", "/lib64", "/usr/bin", "/usr/sbin",
                                            "/usr/lib", "/usr/lib64", NULL };
static const char *const CONTROL_ROOTS[] = { "/opt/openshell", "/etc/openshell", "/etc/openshell-tls",
                                             "/run/openshell", "/run/openshell-sidecar", "/run/netns",
                                             "/var/run/netns", NULL };

static bool is_or_under(const char *path, const char *root)
{
    size_t n = strlen(root);
    return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static char *overlap_problem(const char *root, const char *const *roots, const char *what)
{
    for (; *roots; roots++)
        if (is_or_under(root, *roots) || is_or_under(*roots, root))
            return fmt("OCI WorkingDir '%s' conflicts with %s '%s'", root, what, *roots);
    return NULL;
}

/* resolve_oci_workspace_root and the non-fallback rule; NULL, or the text. */
static char *workdir_problem(const char *root)
{
    char *fallback = fmt("workspace path '%s' must be a normalized absolute non-fallback path", root), *trimmed, *why;
    if (!*root || streq(root, "/")) return fallback;
    if (strcmp(rust_trim(root), root) != 0) return "OCI WorkingDir must not contain surrounding whitespace";
    for (const char *p = root; *p;)
        if (uni_control(utf8_next(&p))) return "OCI WorkingDir must not contain control characters";
    if (root[0] != '/') return "OCI WorkingDir must be an absolute container path";
    for (const char *seg = root + 1;;) {
        size_t len = strcspn(seg, "/");
        bool last = seg[len] == '\0';
        if ((len == 0 && !last) || (len == 1 && seg[0] == '.') || (len == 2 && strncmp(seg, "..", 2) == 0))
            return "OCI WorkingDir must be normalized without empty, '.', or '..' path segments";
        if (last) break;
        seg += len + 1;
    }
    trimmed = xstrndup(root, strlen(root));
    while (strlen(trimmed) > 1 && trimmed[strlen(trimmed) - 1] == '/') trimmed[strlen(trimmed) - 1] = '\0';
    if (newer_supervisor()) {
        if ((why = overlap_problem(trimmed, RUNTIME_ROOTS, "forbidden workspace root"))
            || (why = overlap_problem(trimmed, SYSTEM_ROOTS, "forbidden workspace root")))
            return why;
    } else if ((why = overlap_problem(trimmed, RUNTIME_ROOTS, "OCI runtime mount"))) {
        return why;
    }
    if ((why = overlap_problem(trimmed, CONTROL_ROOTS, "OpenShell control path"))) return why;
    return streq(trimmed, WORKSPACE) ? fallback : NULL;
}

/* Newer (PR #2715): at start, before the policy and in every identity mode, an image
 * workdir other than /sandbox must exist as real directories all the way down; who may
 * write it is the image's business. Exit 1 with the first problem. */
static void check_workdir_structure(const char *root)
{
    char *problem, *path = "", *component, *rest;
    struct stat st;
    if (!root || streq(root, WORKSPACE)) return;
    if ((problem = workdir_problem(root))) die("%s", problem);
    for (rest = xstrndup(root + 1, strlen(root) - 1); (component = strsep(&rest, "/")) && *component;) {
        path = fmt("%s/%s", path, component);
        if (lstat(path, &st) != 0 && errno == ENOENT) die("image workspace path component '%s' does not exist", path);
        if (lstat(path, &st) != 0) die("failed to inspect image workspace path component '%s': %s", path, os_err(errno));
        if (S_ISLNK(st.st_mode)) die("workspace path component '%s' is a symlink " EMDASH " refusing to follow it", path);
        if (!S_ISDIR(st.st_mode)) die("workspace path component '%s' is not a directory", path);
    }
}

/* An image workdir other than /sandbox is checked as the final identity,
 * upstream by re-executing itself; here by a forked child. NULL, or the text. */
static char *image_workspace_problem(const char *root)
{
    char *problem = workdir_problem(root), *path = "", *component, *rest;
    struct stat st;
    int fd;
    if (problem) return problem;
    if ((fd = open("/", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) return os_err(errno);
    if (faccessat(fd, ".", X_OK, AT_EACCESS) != 0)
        return fmt("workspace path component '/' is not traversable by the sandbox identity in the image: %s", os_err(errno));
    for (rest = xstrndup(root + 1, strlen(root) - 1); (component = strsep(&rest, "/")) && *component;) {
        int next;
        path = fmt("%s/%s", path, component);
        if (fstatat(fd, component, &st, AT_SYMLINK_NOFOLLOW) != 0)
            return errno == ENOENT ? fmt("image workspace path component '%s' does not exist", path)
                                   : fmt("failed to inspect image workspace path component '%s': %s", path, os_err(errno));
        if (S_ISLNK(st.st_mode)) return fmt("workspace path component '%s' is a symlink " EMDASH " refusing to follow it", path);
        if (!S_ISDIR(st.st_mode)) return fmt("workspace path component '%s' is not a directory", path);
        if (faccessat(fd, component, X_OK, AT_EACCESS | AT_SYMLINK_NOFOLLOW) != 0)
            return fmt("workspace path component '%s' is not traversable by the sandbox identity in the image: %s", path, os_err(errno));
        if ((next = openat(fd, component, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
            return fmt("failed to open image workspace path component '%s': %s", path, os_err(errno));
        close(fd);
        fd = next;
    }
    if (faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) != 0)
        return fmt("workspace path component '%s' is not writable by the sandbox identity in the image: %s", path, os_err(errno));
    return NULL;
}

static void validate_image_workspace(const char *root, const struct fs_identity *fs)
{
    int out[2], status;
    char msg[4096];
    ssize_t n = 0, r;
    pid_t pid;
    if (!fs->has_uid) die("workspace validator UID is unresolved");
    if (!fs->has_gid) die("workspace validator GID is unresolved");
    if (pipe2(out, O_CLOEXEC) != 0 || (pid = fork()) < 0) die("%s", os_err(errno));
    if (pid == 0) {
        char *problem;
        close(out[0]);
        if (setgroups(fs->groups.n, fs->groups.v) != 0 || setgid(fs->gid) != 0 || setuid(fs->uid) != 0) _exit(126);
        if (!(problem = image_workspace_problem(root))) _exit(0);
        dprintf(out[1], "Error:   " TIMES " %s", problem);
        _exit(1);
    }
    close(out[1]);
    while ((r = read(out[0], msg + n, sizeof msg - 1 - n)) > 0 || (r < 0 && errno == EINTR)) if (r > 0) n += r;
    msg[n] = '\0';
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 126) die("%s", os_err(EPERM));
    if (!n) die("image workspace validation failed with status %d", status);
    die("image workspace validation failed: %s", msg);
}

static void prepare_filesystem(const struct identity *id, const struct policy *p, const char *workdir)
{
    struct fs_identity fs;
    char *err;
    if (!given(p->user) && !given(p->group)) return;
    if ((err = filesystem_identity(id, p, &fs))) die("%s", err);
    if (id->mode == ID_OCI) {
        char *root = workdir ? xstrndup(workdir, strlen(workdir)) : NULL;
        if (!root) die("local container driver did not supply a workspace workdir");
        while (strlen(root) > 1 && root[strlen(root) - 1] == '/') root[strlen(root) - 1] = '\0';
        if (streq(root, WORKSPACE)) prepare_managed_workspace(&fs);
        else if (!newer_supervisor()) validate_image_workspace(workdir, &fs);  /* newer: checked at start */
    }
    /* upstream also creates missing policy read_write paths; none here */
    if (given(env_var("OPENSHELL_SANDBOX_UID")) && access(WORKSPACE, F_OK) == 0) chown_sandbox_home(&fs);
}

/* item 23: /sys/fs/cgroup/pids.max, a warning unless a limit is required */
static void check_pid_limit(void)
{
    bool require = getenv("OPENSHELL_REQUIRE_RUNTIME_PID_LIMIT") != NULL;
    size_t len;
    char *err, *text = read_text("/sys/fs/cgroup/pids.max", &len, &err), *raw, *msg;
    const char *perr;
    if (!text) {
        msg = fmt("runtime cgroup pids.max is unavailable (%s); configure the compute driver or container runtime to enforce a PID limit", err);
    } else if (strcasecmp((raw = rust_trimn(text, len)), "max") == 0) {
        msg = "runtime cgroup pids.max is unlimited; configure the compute driver or container runtime to enforce a PID limit";
    } else if ((perr = parse_int(raw, false, NULL, NULL))) {
        msg = fmt("runtime cgroup pids.max is unavailable (invalid pids.max value %s: %s); configure the compute driver or container runtime to enforce a PID limit",
                  rust_debug(raw, strlen(raw)), perr);
    } else {
        return;
    }
    if (require) die("%s", msg);
    say("WARN %s", msg);
}

/* ========================================= the privilege drop (item 10) */

struct drop {
    bool ok;                             /* false: the child fails with EINVAL */
    uint32_t uid, gid;
    bool set_groups, set_user;
    struct gidlist groups;
};

/* The target uid: OCI-resolved, numeric, or the policy name's passwd entry. */
static bool plan_uid(const struct identity *id, const char *user, uint32_t *uid)
{
    struct pw pw;
    if (id->has_uid) { *uid = id->uid; return true; }
    if (!user) { *uid = geteuid(); return true; }
    if (parse_u32(user, uid)) return true;
    if (!nss_passwd(user, false, 0, &pw)) return false;
    *uid = pw.uid;
    return true;
}

/* The target gid: OCI-resolved, numeric, the group name, or the user's primary group. */
static bool plan_gid(const struct identity *id, const char *group, uint32_t uid, uint32_t *gid)
{
    struct pw pw;
    if (id->has_gid) { *gid = id->gid; return true; }
    if (group) return parse_u32(group, gid) || nss_group(group, gid, NULL, NULL);
    if (uid == 0) { *gid = getegid(); return true; }
    if (!nss_passwd(NULL, true, uid, &pw)) return false;
    *gid = pw.gid;
    if (!nss_group(NULL, gid, NULL, NULL)) *gid = getegid();   /* no such group: upstream keeps its own */
    return true;
}

/* Supplementary groups: the bounded OCI list when any component came from OCI
 * USER, initgroups for a policy name, otherwise left as the supervisor's. */
static bool plan_groups(const struct identity *id, const struct policy *p, const char *user, struct drop *d)
{
    struct fs_identity fs;
    struct pw pw;
    if (id->has_uid || id->has_gid) {
        d->set_groups = true;
        if (filesystem_identity(id, p, &fs)) return false;
        d->groups = fs.groups;
    } else if (user && !is_number(user)) {
        d->set_groups = true;
        if (!nss_passwd(NULL, true, d->uid, &pw)) return false;
        d->groups = nss_grouplist(pw.name, d->gid);
    }
    return true;
}

/* Everything drop_privileges would look up, resolved before the fork; a
 * lookup failure makes the child fail the way upstream's pre_exec does. */
static struct drop drop_plan(const struct identity *id, const struct policy *p)
{
    const char *user = given(p->user) ? p->user : NULL, *group = given(p->group) ? p->group : NULL;
    struct drop d = { .ok = true };
    if (!user && !group) user = group = "sandbox";
    d.set_user = user != NULL;
    d.ok = plan_uid(id, user, &d.uid) && plan_gid(id, group, d.uid, &d.gid);
    if (d.ok && d.uid != geteuid()) d.ok = plan_groups(id, p, user, &d);
    return d;
}

/* PR_CAPBSET_DROP for every capability the kernel knows. */
static bool clear_bounding_set(void)
{
    int err = 0, cap;
    bool remaining = false;
    for (cap = 0; cap < 64 && prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
        if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && !err) err = errno;
    for (cap = 0; cap < 64 && prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
        remaining |= prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1;
    return err ? err == EPERM && !remaining : !remaining;
}

/* In the child: groups, gid, bounding set, uid, then proof root is gone. */
static bool drop_privileges(const struct drop *d)
{
    if (!d->ok) return false;
    if (d->set_groups && setgroups(d->groups.n, d->groups.v) != 0) return false;
    if (d->gid != getegid() && setgid(d->gid) != 0) return false;
    if (getegid() != d->gid) return false;
    if (geteuid() == 0 && !clear_bounding_set()) return false;
    if (!d->set_user) return true;
    if (d->uid != geteuid() && setuid(d->uid) != 0) return false;
    if (geteuid() != d->uid) return false;
    return !(setuid(0) == 0 && d->uid != 0);
}

static char *gid_text(const uint32_t *v, size_t n)
{
    buf b = {0};
    struct gidlist sorted = {0};
    for (size_t i = 0; i < n; i++) gid_push(&sorted, v[i]);
    qsort(sorted.v, sorted.n, sizeof *sorted.v, gid_cmp);
    for (size_t i = 0; i < sorted.n; i++) b_str(&b, fmt("%s%u", i ? "," : "", sorted.v[i]));
    return b_take(&b);
}

static void log_identity(enum idmode mode, const struct drop *d, bool full)
{
    static const char *const names[] = { "oci", "resolved", "none" };
    gid_t cur[NGROUPS_MAX];
    int n = getgroups(NGROUPS_MAX, cur);
    uint32_t mine[NGROUPS_MAX];
    for (int i = 0; i < n; i++) mine[i] = cur[i];
    if (!full) {
        say("identity mode=%s uid=%u gid=%u groups=%s (sidecar topology: no privilege drop)", names[mode],
            (unsigned)geteuid(), (unsigned)getegid(), gid_text(mine, n > 0 ? n : 0));
        return;
    }
    say("identity mode=%s uid=%u gid=%u groups=%s", names[mode], d->uid, d->gid,
        d->set_groups ? gid_text(d->groups.v, d->groups.n) : gid_text(mine, n > 0 ? n : 0));
}

/* ====================================== the main process (items 11, 14) */

static const char *const supervisor_only_env[] = {
    "OPENSHELL_OCI_IMAGE_USER", "OPENSHELL_SANDBOX_UID", "OPENSHELL_SANDBOX_GID",
    "OPENSHELL_SANDBOX_TOKEN", "OPENSHELL_SANDBOX_TOKEN_FILE", "OPENSHELL_K8S_SA_TOKEN_FILE",
    "OPENSHELL_TLS_CA", "OPENSHELL_TLS_CERT", "OPENSHELL_TLS_KEY",
    "OPENSHELL_PROVIDER_SPIFFE_WORKLOAD_API_SOCKET", "OPENSHELL_NETWORK_RUNTIME_CAPABILITIES", NULL,
};

struct envlist { char **v; size_t n; };

static size_t key_len(const char *entry) { return strcspn(entry, "="); }

static void env_put(struct envlist *e, char *entry)
{
    size_t k = key_len(entry);
    for (size_t i = 0; i < e->n; i++)
        if (key_len(e->v[i]) == k && strncmp(e->v[i], entry, k) == 0) { e->v[i] = entry; return; }
    e->v = xrealloc(e->v, (e->n + 2) * sizeof *e->v);
    e->v[e->n++] = entry;
    e->v[e->n] = NULL;
}

static int env_cmp(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    size_t kx = key_len(x), ky = key_len(y);
    int c = memcmp(x, y, kx < ky ? kx : ky);
    return c ? c : (kx > ky) - (kx < ky);
}

static bool supervisor_only(const char *entry)
{
    for (const char *const *k = supervisor_only_env; *k; k++)
        if (key_len(entry) == strlen(*k) && strncmp(entry, *k, strlen(*k)) == 0) return true;
    return false;
}

/* The canonical environment: inherited, minus supervisor-only variables,
 * plus OPENSHELL_SANDBOX=1 and HOME/USER/SHELL/TERM defaults unless the
 * user environment names them (its values never reach the main process). */
static char **child_environment(const struct policy *p, const char *home_workdir, bool tty)
{
    struct envlist e = {0};
    const char *user = given(p->user) ? p->user : NULL, *user_env = env_var("OPENSHELL_USER_ENVIRONMENT");
    const char *session_user = "sandbox", *home = WORKSPACE;
    const char *defaults[4][2] = { { "HOME", NULL }, { "USER", NULL }, { "SHELL", "/bin/bash" },
                                   { "TERM", tty ? "xterm-256color" : "dumb" } };
    struct pw pw;
    for (char **v = environ; *v; v++)
        if (strchr(*v, '=') && !supervisor_only(*v)) env_put(&e, *v);
    env_put(&e, "OPENSHELL_SANDBOX=1");
    if (user) {
        session_user = user;
        if (!is_number(user)) home = nss_passwd(user, false, 0, &pw) ? pw.dir : fmt("/home/%s", user);
    }
    if (home_workdir) home = home_workdir;
    defaults[0][1] = home;
    defaults[1][1] = session_user;
    for (int i = 0; i < 4; i++) {
        bool valid = false, named = user_env && user_env_has(user_env, defaults[i][0], &valid);
        if (!(valid && named)) env_put(&e, fmt("%s=%s", defaults[i][0], defaults[i][1]));
    }
    qsort(e.v, e.n, sizeof *e.v, env_cmp);
    return e.v;
}

struct launch {
    char **argv, **envp;
    const char *workdir;
    bool tty, drop;
    struct drop plan;
};

struct running { pid_t pid; int keep, drain[2]; };

static _Noreturn void child_failed(int report, int e)
{
    ssize_t ignored = write(report, &e, sizeof e);
    (void)ignored;
    _exit(1);
}

/* The child, in std::process::Command's order, then the pre_exec hook:
 * stdio, chdir (as root), signal mask, session/process group, privilege drop,
 * hardening, exec without a shell. pre_exec's own errors reach the parent as
 * EINVAL only (item 0). */
static _Noreturn void child_main(const struct launch *l, const int stdio[3], int report)
{
    sigset_t none;
    for (int fd = 0; fd < 3; fd++)
        if (dup2(stdio[fd], fd) < 0) child_failed(report, errno);
    if (l->workdir && chdir(l->workdir) != 0) child_failed(report, errno);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (l->tty) {
        if (setsid() < 0 || ioctl(0, TIOCSCTTY, 0) != 0) child_failed(report, errno);
    } else if (setpgid(0, 0) != 0) {
        child_failed(report, errno);
    }
    if (l->drop && !drop_privileges(&l->plan)) child_failed(report, EINVAL);
    struct rlimit none_core = { 0, 0 };
    if (setrlimit(RLIMIT_CORE, &none_core) != 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        child_failed(report, EINVAL);
    environ = l->envp;
    execvp(l->argv[0], l->argv);
    child_failed(report, errno);
}

/* stdio: a pty for tty mode, else pipes; the supervisor keeps its ends. */
static void make_stdio(bool tty, int child[3], struct running *r)
{
    int in[2], out[2], err[2];
    if (tty) {
        struct winsize ws = { .ws_row = 24, .ws_col = 80 };
        char name[128];
        int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), s;
        if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0 || ptsname_r(m, name, sizeof name) != 0 ||
            (s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 || ioctl(s, TIOCSWINSZ, &ws) != 0)
            die("%s", os_err(errno));
        child[0] = child[1] = child[2] = s;
        r->keep = -1;
        r->drain[0] = m;
        r->drain[1] = -1;
        return;
    }
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) die("%s", os_err(errno));
    child[0] = in[0];
    child[1] = out[1];
    child[2] = err[1];
    r->keep = in[1];                     /* stdin stays open and is never written */
    r->drain[0] = out[0];
    r->drain[1] = err[0];
}

static struct running spawn_main(const struct launch *l)
{
    struct running r;
    int stdio[3], report[2], e;
    ssize_t n;
    make_stdio(l->tty, stdio, &r);
    if (pipe2(report, O_CLOEXEC) != 0 || (r.pid = fork()) < 0) die("%s", os_err(errno));
    if (r.pid == 0) child_main(l, stdio, report[1]);
    close(report[1]);
    close(stdio[0]);
    if (!l->tty) { close(stdio[1]); close(stdio[2]); }
    while ((n = read(report[0], &e, sizeof e)) < 0 && errno == EINTR) {}
    close(report[0]);
    if (n == sizeof e) {
        while (waitpid(r.pid, NULL, 0) < 0 && errno == EINTR) {}
        die("%s", os_err(e));
    }
    return r;
}

/* ======================================== the SSH socket (items 12, 25) */

/* Path::parent(): NULL for "" and "/", "" for a bare name. */
static char *path_parent(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    if (n == 0 || (n == 1 && path[0] == '/')) return NULL;
    while (n > 0 && path[n - 1] != '/') n--;
    while (n > 1 && path[n - 1] == '/') n--;
    return xstrndup(path, n);
}

/* std::fs::create_dir_all; 0 or an errno. */
static int create_dir_all(const char *dir)
{
    struct stat st;
    char *parent;
    if (!*dir) return 0;
    if (mkdir(dir, 0777) == 0) return 0;
    if (errno != ENOENT) return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : errno;
    if ((parent = path_parent(dir)) && create_dir_all(parent)) return errno;
    if (mkdir(dir, 0777) == 0) return 0;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : errno;
}

/* ssh_server_init; the socket's fd, or -1 with *cause set. */
static int ssh_listen(const char *path, bool private_parent, bool shared, char **cause)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    bool abstract = path[0] == '@';
    const char *name = abstract ? path + 1 : path;
    size_t len = strlen(name);
    socklen_t salen;
    char *parent = abstract ? NULL : path_parent(path);
    struct stat st;
    int fd, e;
    if (parent && (e = create_dir_all(parent))) { *cause = os_err(e); return -1; }
    if (parent && private_parent && chmod(parent, 0700) != 0) { *cause = os_err(errno); return -1; }
    if (!abstract && stat(path, &st) == 0 && unlink(path) != 0) { *cause = os_err(errno); return -1; }
    if (abstract ? len + 1 > sizeof sa.sun_path : len >= sizeof sa.sun_path) {
        *cause = abstract ? "abstract socket name must be shorter than SUN_LEN" : "path must be shorter than SUN_LEN";
        return -1;
    }
    memcpy(sa.sun_path + (abstract ? 1 : 0), name, len);
    salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (abstract || len ? 1 : 0));
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, salen) != 0 || listen(fd, 1024) != 0) {
        *cause = os_err(errno);
        return -1;
    }
    if (!abstract && chmod(path, shared ? 0660 : 0600) != 0) { *cause = os_err(errno); return -1; }
    return fd;
}

/* ================================================= PID 1 (items 1, 24) */

static int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

static void drain(int *fd)
{
    char chunk[65536];
    ssize_t n = read(*fd, chunk, sizeof chunk);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) { close(*fd); *fd = -1; }
}

/* Reap everything; forward the first SIGTERM to the main process group;
 * leave with the main process's status. Output is read and dropped (upstream
 * buffers it for gateway attach; it never reaches the container log). */
static _Noreturn void supervise(struct running *r, int sigfd)
{
    bool forwarded = false;
    for (;;) {
        struct pollfd fds[3] = { { sigfd, POLLIN, 0 }, { r->drain[0], POLLIN, 0 }, { r->drain[1], POLLIN, 0 } };
        struct signalfd_siginfo si;
        if (poll(fds, 3, -1) < 0) continue;
        for (int k = 1; k < 3; k++) if (fds[k].revents) drain(&r->drain[k - 1]);
        if (!fds[0].revents || read(sigfd, &si, sizeof si) != sizeof si) continue;
        if (si.ssi_signo == SIGTERM && !forwarded) {
            forwarded = true;
            if (kill(-r->pid, SIGTERM) != 0)
                say("WARN failed to signal entrypoint process group pid=%d signal=SIGTERM reason=SIGTERM error=%s",
                    (int)r->pid, nix_err(errno));
        }
        if (si.ssi_signo == SIGCHLD) {
            int status;
            pid_t pid;
            while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
                if (pid == r->pid) exit(exit_code(status));   /* upstream then reports the exit to the gateway */
        }
    }
}

static int signal_fd(int fd, const int *signals)
{
    sigset_t set;
    sigemptyset(&set);
    for (; *signals; signals++) sigaddset(&set, *signals);
    sigprocmask(SIG_BLOCK, &set, NULL);
    return signalfd(fd, &set, SFD_CLOEXEC);
}

/* --mode=network: no main process; wait for SIGINT or SIGTERM, exit 0. */
static _Noreturn void network_only(void)
{
    static const int sigs[] = { SIGINT, SIGTERM, 0 };
    struct signalfd_siginfo si;
    int fd = signal_fd(-1, sigs);
    say("ready (network only)");
    while (read(fd, &si, sizeof si) != sizeof si) {}
    exit(0);
}

/* ===================================================== corporate proxy (item 2) */

/* The proxy URL as upstream's parse_upstream_proxy_url takes it (exactly
 * http://host:port); NULL or UpstreamProxyUrlError's text. */
static const char *proxy_url_problem(const char *raw, char **host_out, char **port_out)
{
    char *url = rust_trim(raw), *sep = strstr(url, "://"), *rest, *authority, *at, *host, *port = "";
    size_t n, i;
    if (!*url) return "proxy URL is empty";
    if (!sep) return "proxy URL must include an explicit scheme, e.g. http://proxy.corp.com:3128";
    for (i = 0; url + i < sep; i++)
        if (!(isalpha((unsigned char)url[i]) || (i && (isdigit((unsigned char)url[i]) || strchr("+-.", url[i])))))
            return "not a valid proxy URL: relative URL without a base";
    if (sep == url) return "not a valid proxy URL: relative URL without a base";
    rest = sep + 3;
    n = strcspn(rest, "/?#");
    authority = xstrndup(rest, n);
    at = strrchr(authority, '@');
    host = at ? at + 1 : authority;
    if (*host == '[') {
        char *close = strchr(host, ']');
        if (close) { port = close[1] == ':' ? close + 2 : ""; close[1] = '\0'; }
    } else if (strchr(host, ':')) {
        port = strchr(host, ':') + 1;
        port[-1] = '\0';
    }
    if (!*host) return "not a valid proxy URL: empty host";
    if (*host == '[') {
        unsigned char a6[16];
        size_t hl = strlen(host);
        if (hl < 2 || host[hl - 1] != ']' || inet_pton(AF_INET6, xstrndup(host + 1, hl - 2), a6) != 1)
            return "not a valid proxy URL: invalid IPv6 address";
    } else {
        for (i = 0; host[i]; i++)
            if ((unsigned char)host[i] <= ' ' || strchr("#%/:<>?@[\\]^|\x7f", host[i]))
                return "not a valid proxy URL: invalid domain character";
    }
    if (*port && (strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 || atol(port) > 65535))
        return "not a valid proxy URL: invalid port number";
    for (i = 0; url + i < sep; i++) url[i] = (char)tolower((unsigned char)url[i]);
    if (newer_supervisor() && strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
        return fmt("unsupported proxy scheme '%.*s': only http:// and https:// forward proxies are supported by "
                   "the sandbox supervisor", (int)(sep - url), url);
    if (!newer_supervisor() && strncmp(url, "http://", 7) != 0)
        return fmt("unsupported proxy scheme '%.*s': only http:// forward proxies are supported by the sandbox "
                   "supervisor", (int)(sep - url), url);
    if (at && at != authority) return "proxy URL must not embed credentials; supply them via the proxy auth file";
    rest += n;
    if (*rest == '/' && rest[1] && rest[1] != '?' && rest[1] != '#')
        return "proxy URL must not contain a path; use scheme://host:port only";
    if (strchr(rest, '?') && (!strchr(rest, '#') || strchr(rest, '?') < strchr(rest, '#')))
        return "proxy URL must not contain a query; use scheme://host:port only";
    if (strchr(rest, '#')) return "proxy URL must not contain a fragment; use scheme://host:port only";
    if (!*port) return "proxy URL must include an explicit proxy port, e.g. http://proxy.corp.com:3128";
    if (atol(port) == 0) return "proxy URL port must not be 0";
    *host_out = host;
    *port_out = port;
    return NULL;
}

/* parse_upstream_proxy_credential: NULL or its text (never the credential). */
static const char *credential_problem(const char *raw)
{
    char *cred = rust_trim(raw), *colon;
    const char *p = cred;
    if (!*cred) return "credential is empty";
    while (*p) if (uni_control(utf8_next(&p))) return "credential contains control characters";
    if (!(colon = strchr(cred, ':'))) return "credential must use the user:pass form (missing ':')";
    if (colon == cred) return "credential must use the user:pass form (empty user)";
    return NULL;
}

static _Noreturn void proxy_invalid(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    die("invalid upstream corporate proxy configuration: %s", vfmt(f, ap));
}

/* read_upstream_proxy_credential_file: a regular file of at most 4096 bytes, opened
 * without blocking on a FIFO; the credential itself is never printed. */
static void check_auth_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    char data[4097];
    ssize_t n;
    const char *problem;
    if (fd < 0) proxy_invalid("failed to open proxy auth file '%s': %s", path, os_err(errno));
    if (fstat(fd, &st) != 0) proxy_invalid("failed to stat proxy auth file '%s': %s", path, os_err(errno));
    if (!S_ISREG(st.st_mode)) proxy_invalid("proxy auth file '%s' is not a regular file", path);
    if (st.st_size > 4096) proxy_invalid("proxy auth file '%s' exceeds the 4096-byte limit", path);
    n = read(fd, data, sizeof data - 1);
    close(fd);
    if (n < 0) proxy_invalid("failed to read proxy auth file '%s': %s", path, os_err(errno));
    data[n] = '\0';
    if ((size_t)n != strlen(data) || !is_utf8(data))
        proxy_invalid("failed to read proxy auth file '%s': stream did not contain valid UTF-8", path);
    if ((problem = credential_problem(data)))
        proxy_invalid("invalid credential in upstream proxy auth file '%s': %s", path, problem);
}

static void check_ca_bundle(const char *path)
{
    size_t len;
    char *err, *pem = read_text(path, &len, &err);
    if (!pem) proxy_invalid("--upstream-proxy-ca-bundle '%s' could not be read: %s", path, err);
    if (!strstr(pem, "-----BEGIN CERTIFICATE-----"))
        proxy_invalid("--upstream-proxy-ca-bundle '%s' contains no PEM certificate blocks", path);
}

/* UpstreamProxyConfig::from_args: fail closed on anything present but unusable, and
 * never consult HTTPS_PROXY and friends (the sandbox's own). Logged without the
 * credential, so the tests can see what the driver passed. */
static void proxy_stage(const struct opts *o)
{
    const char *aux[][2] = {
        { "--upstream-proxy-auth-file", o->proxy_auth_file },
        { "--upstream-proxy-auth-allow-insecure", o->proxy_auth_allow_insecure ? "true" : NULL },
        { "--upstream-proxy-connect-by-hostname", o->proxy_connect_by_hostname ? "true" : NULL },
        { "--upstream-no-proxy", o->no_proxy },
        { "--upstream-proxy-ca-bundle", o->proxy_ca_bundle },
    };
    const char *problem;
    char *host = NULL, *port = NULL;
    size_t i;
    bool secure;
    if (o->proxy && !*rust_trim(o->proxy)) proxy_invalid("--upstream-proxy must not be empty when set");
    if (o->proxy && (problem = proxy_url_problem(o->proxy, &host, &port)))
        proxy_invalid("--upstream-proxy is invalid: %s", problem);
    for (i = 0; i < sizeof aux / sizeof *aux; i++)
        if (aux[i][1] && !*rust_trim(aux[i][1])) proxy_invalid("%s must not be empty when set", aux[i][0]);
    if (!o->proxy) {
        for (i = 0; i < sizeof aux / sizeof *aux; i++)
            if (aux[i][1]) proxy_invalid("%s is set but no upstream proxy is configured", aux[i][0]);
        return;
    }
    if (o->proxy_auth_allow_insecure && !o->proxy_auth_file)
        proxy_invalid("--upstream-proxy-auth-allow-insecure is set but no --upstream-proxy-auth-file is configured");
    secure = strncasecmp(rust_trim(o->proxy), "https://", 8) == 0;
    if (o->proxy_auth_file && !o->proxy_auth_allow_insecure && !secure)
        proxy_invalid("--upstream-proxy-auth-file sends the credential as cleartext Basic auth over the plain-TCP "
                      "proxy connection; refusing without --upstream-proxy-auth-allow-insecure");
    if (o->proxy_auth_file) check_auth_file(o->proxy_auth_file);
    if (o->proxy_ca_bundle) check_ca_bundle(o->proxy_ca_bundle);
    say("upstream proxy %s:%s no_proxy=%s auth_file=%s allow_insecure=%s connect_target=%s ca_bundle=%s",
        host, port, o->no_proxy ? o->no_proxy : "-", o->proxy_auth_file ? o->proxy_auth_file : "-",
        o->proxy_auth_allow_insecure ? "true" : "false", o->proxy_connect_by_hostname ? "hostname" : "validated-ip",
        o->proxy_ca_bundle ? o->proxy_ca_bundle : "-");
    if (secure) say("upstream proxy %s:%s is dialled over TLS", host, port);
}

/* ========================================================== startup */

static bool env_is(const char *name, const char *value) { return streq(env_var(name), value); }

static void sidecar_process_only(void)
{
    if (!given(env_var("OPENSHELL_SIDECAR_CONTROL_SOCKET")))
        die("OPENSHELL_SIDECAR_CONTROL_SOCKET is required for process-only sidecar topology");
    die("the openshell-sandbox test stand-in does not implement the sidecar control channel");
}

static void sidecar_network(void)
{
    if (!given(env_var("OPENSHELL_SIDECAR_CONTROL_SOCKET")))
        die("OPENSHELL_SIDECAR_CONTROL_SOCKET is required for sidecar topology");
    die("the openshell-sandbox test stand-in does not implement the sidecar control channel");
}

/* Items 9-12, 23, 24: prepare, spawn, bind the SSH socket, then supervise. */
static _Noreturn void run_process(const struct opts *o, const struct mainproc *m, const struct identity *id,
                                  const struct policy *p, bool full, bool sidecar_nftables)
{
    static const int chld[] = { SIGCHLD, 0 }, chld_term[] = { SIGCHLD, SIGTERM, 0 };
    const char *ssh = getenv("OPENSHELL_SSH_SOCKET_PATH"), *spiffe;
    struct launch l = { .argv = m->argv, .workdir = o->workdir, .tty = m->tty, .drop = full };
    struct running r;
    char *cause;
    int sigfd = signal_fd(-1, chld);
    if (full) {
        update_sandbox_accounts();
        validate_user(id, p);
        validate_group(id, p);
        prepare_filesystem(id, p, o->workdir);
    }
    check_pid_limit();
    if (!full) say("WARN OPENSHELL_SUPERVISOR_TOPOLOGY=sidecar: network-only process enforcement, no privilege drop");
    l.plan = drop_plan(id, p);
    l.envp = child_environment(p, id->mode == ID_OCI ? o->workdir : NULL, m->tty);
    spiffe = env_var("OPENSHELL_PROVIDER_SPIFFE_WORKLOAD_API_SOCKET");
    if (full && spiffe && *rust_trim(spiffe))
        die("Failed to prepare supervisor identity isolation: supervisor identity mount namespace was not prepared before startup hardening");
    if (m->nul) die("nul byte found in provided data");
    log_identity(id->mode, &l.plan, full);
    r = spawn_main(&l);
    if (ssh && ssh_listen(ssh, full && !sidecar_nftables, sidecar_nftables, &cause) < 0) {
        kill(r.pid, SIGKILL);            /* the handle is dropped with kill_on_drop */
        die_cause("SSH server failed during startup", cause);
    }
    if (!ssh) say("WARN OPENSHELL_SSH_SOCKET_PATH is not set: no SSH server and no supervisor session, so the gateway can never reach this sandbox");
    sigfd = signal_fd(sigfd, chld_term);  /* from here on SIGTERM has a handler */
    say("ready");
    supervise(&r, sigfd);
}

int main(int argc, char **argv)
{
    struct opts o = {0};
    struct mainproc m;
    struct policy p = {0};
    struct identity id;
    bool sidecar_nftables, full, have_netns;
    parse_argv(argc, argv, &o);                               /* clap, exit 2 */
    if (o.network_init) die("the openshell-sandbox test stand-in does not implement --mode=network-init");
    if (newer_supervisor()) check_workdir_structure(o.workdir);  /* before logging and the policy */
    resolve_command(&o, &m);                                  /* before any gateway contact */
    sidecar_nftables = env_is("OPENSHELL_NETWORK_ENFORCEMENT_MODE", "sidecar-nftables");
    full = !env_is("OPENSHELL_SUPERVISOR_TOPOLOGY", "sidecar");
    if (o.process && !o.network && sidecar_nftables) sidecar_process_only();
    load_policy(&p);                                          /* policy source, gateway, token */
    driver_identity(&id, &p);                                 /* after the policy */
    if (id.mode == ID_OCI) resolve_oci(&id, &p);
    have_netns = o.network && !sidecar_nftables;
    if (have_netns) netns_stage();
    tcp_stage(&p, have_netns, sidecar_nftables);
    if (o.network) proxy_stage(&o);                           /* the network side's proxy start-up */
    if (o.network && sidecar_nftables) sidecar_network();
    if (!o.process) network_only();
    run_process(&o, &m, &id, &p, full, sidecar_nftables);
}
