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

/* listen_loopback listens on 127.0.0.1:port (0: any) and prints "ready PORT". */
static int listen_loopback(const char *port) {
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(port))};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t alen = sizeof a;
	if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 512) || getsockname(ls, (struct sockaddr *)&a, &alen))
		die("listen");
	printf("ready %d\n", ntohs(a.sin_port));
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
static struct sockaddr_in server_addr(const char *host, const char *port) {
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(port))};
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1) die("HOST: an IPv4 address");
	return a;
}

/* connect_nodelay opens one TCP connection to a. */
static int connect_nodelay(const struct sockaddr_in *a) {
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(s, (const struct sockaddr *)a, sizeof *a)) die("connect");
	return s;
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}
