/*
 * tlsbench_common.h: what both TLS helpers share (command line, sockets, time). Include
 * it after the headers that define IPPROTO_TCP and TCP_NODELAY, and define
 * HELPER_NAME and helper_errors() (the library's error queue) first.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void helper_errors(void);

static unsigned char psk[64];
static size_t psk_len;

static void die(const char *what) {
	fprintf(stderr, "%s: %s\n", HELPER_NAME, what);
	helper_errors();
	exit(1);
}

/* unsupported says the library here cannot do what was asked (the bench shows the cell as
 * not supported, with this line) and exits with status 2. */
static void unsupported(const char *what, const char *name) {
	fprintf(stderr, "%s: unsupported %s %s\n", HELPER_NAME, what, name);
	exit(2);
}

static int hexval(char c) {
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

/* parse_psk reads the external PSK from hex. */
static void parse_psk(const char *hex) {
	size_t n = strlen(hex);
	if (n % 2 || n / 2 > sizeof psk) die("PSKHEX: an even number of hex digits, at most 128");
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0) die("PSKHEX: not hex");
		psk[i] = (unsigned char)(hi << 4 | lo);
	}
	psk_len = n / 2;
}

/* addr is a socket address of either family. */
typedef struct {
	struct sockaddr_storage ss;
	socklen_t len;
} addr_t;

/* make_addr reads HOST (an IPv4 or IPv6 address) and PORT. */
static addr_t make_addr(const char *host, const char *port) {
	addr_t a;
	memset(&a, 0, sizeof a);
	struct sockaddr_in *v4 = (struct sockaddr_in *)&a.ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&a.ss;
	if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(atoi(port));
		a.len = sizeof *v4;
	} else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(atoi(port));
		a.len = sizeof *v6;
	} else {
		die("HOST: an IPv4 or IPv6 address");
	}
	return a;
}

/* listen_addr reads a server's PORT argument: PORT on 127.0.0.1, or ADDR:PORT and
 * [ADDR6]:PORT elsewhere (the lab's emulated link). */
static addr_t listen_addr(const char *arg) {
	char host[64] = "127.0.0.1";
	const char *colon = strrchr(arg, ':'), *port = arg;
	if (colon) {
		const char *h = arg;
		size_t n = (size_t)(colon - arg);
		if (n >= 2 && h[0] == '[' && h[n - 1] == ']') h++, n -= 2;
		if (n >= sizeof host) die("listen address too long");
		memcpy(host, h, n);
		host[n] = 0;
		port = colon + 1;
	}
	return make_addr(host, port);
}

static int addr_port(const addr_t *a) {
	return ntohs(a->ss.ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)&a->ss)->sin6_port : ((const struct sockaddr_in *)&a->ss)->sin_port);
}

/* listen_on listens on the server's PORT argument (port 0: any) and prints "ready PORT". */
static int listen_on(const char *arg) {
	addr_t a = listen_addr(arg);
	int ls = socket(a.ss.ss_family, SOCK_STREAM, 0), one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(ls, (struct sockaddr *)&a.ss, a.len) || listen(ls, 512) || getsockname(ls, (struct sockaddr *)&a.ss, &a.len))
		die("listen");
	printf("ready %d\n", addr_port(&a));
	fflush(stdout);
	return ls;
}

/* accept_nodelay waits for the next connection (-1 on a failed accept). */
static int accept_nodelay(int ls) {
	int c = accept(ls, NULL, NULL), one = 1;
	if (c >= 0) setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return c;
}

/* server_addr reads the client's HOST and PORT arguments. */
static addr_t server_addr(const char *host, const char *port) { return make_addr(host, port); }

/* connect_nodelay opens one TCP connection to a. */
static int connect_nodelay(const addr_t *a) {
	int s = socket(a->ss.ss_family, SOCK_STREAM, 0), one = 1;
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(s, (const struct sockaddr *)&a->ss, a->len)) die("connect");
	return s;
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}
