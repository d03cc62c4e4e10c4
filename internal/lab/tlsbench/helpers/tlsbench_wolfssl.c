/*
 * tlsbench_wolfssl: the TLS connection-time benchmark's helper over wolfSSL 5.5 (Debian's
 * libwolfssl-dev), with the same command line and output as tlsbench_openssl:
 *
 *   tlsbench_wolfssl server PORT CERT KEY PSKHEX
 *   tlsbench_wolfssl echo PORT CERT KEY PSKHEX
 *   tlsbench_wolfssl payload HOST PORT SIZE WINDOW CAFILE
 *   tlsbench_wolfssl client HOST PORT K MODE GROUP PSKHEX CAFILE [SUITE [WINDOW]]
 *
 * MODE is full, resume, psk_ke or psk_dhe_ke; GROUP is X25519, P-256, P-384 or P-521;
 * SUITE a TLS 1.3 suite by its IANA name. Bytes are read from the kernel's TCP counters
 * (tcp_info).
 */
#include <wolfssl/options.h>
#include <wolfssl/ssl.h>

#include <linux/tcp.h> /* tcp_info with byte counters */

#define HELPER_NAME "tlsbench_wolfssl"
#include "tlsbench_common.h"

static void helper_errors(void) {}

static const char *suite = "TLS13-AES128-GCM-SHA256";

static unsigned int server_psk(WOLFSSL *ssl, const char *id, unsigned char *key, unsigned int max, const char **cs) {
	(void)ssl;
	if (strcmp(id, "iotsafe") != 0 || psk_len > max) return 0;
	memcpy(key, psk, psk_len);
	*cs = suite;
	return (unsigned int)psk_len;
}

static unsigned int client_psk(WOLFSSL *ssl, const char *hint, char *id, unsigned int idmax, unsigned char *key, unsigned int max, const char **cs) {
	(void)ssl;
	(void)hint;
	if (idmax < 8 || psk_len > max) return 0;
	strcpy(id, "iotsafe");
	memcpy(key, psk, psk_len);
	*cs = suite;
	return (unsigned int)psk_len;
}

static int server(int argc, char **argv) {
	int echo = !strcmp(argv[1], "echo");
	if (argc != 6) die("usage: server|echo PORT CERT KEY PSKHEX");
	parse_psk(argv[5]);
	WOLFSSL_CTX *ctx = wolfSSL_CTX_new(wolfTLSv1_3_server_method());
	if (!ctx || wolfSSL_CTX_use_certificate_chain_file(ctx, argv[3]) != WOLFSSL_SUCCESS ||
	    wolfSSL_CTX_use_PrivateKey_file(ctx, argv[4], WOLFSSL_FILETYPE_PEM) != WOLFSSL_SUCCESS)
		die("server certificate");
	wolfSSL_CTX_set_psk_server_tls13_callback(ctx, server_psk);
	int ls = listen_loopback(argv[2]);
	for (;;) {
		int c = accept_nodelay(ls);
		if (c < 0) continue;
		WOLFSSL *ssl = wolfSSL_new(ctx);
		wolfSSL_set_fd(ssl, c);
		if (wolfSSL_accept(ssl) == WOLFSSL_SUCCESS) {
			if (echo) {
				static char buf[16384];
				int n;
				while ((n = wolfSSL_read(ssl, buf, sizeof buf)) > 0)
					if (wolfSSL_write(ssl, buf, n) != n) break;
			} else {
				wolfSSL_write(ssl, "k", 1);
			}
			wolfSSL_shutdown(ssl);
		}
		wolfSSL_free(ssl);
		close(c);
	}
	return 0;
}

static int client(int argc, char **argv) {
	if (argc < 9 || argc > 11) die("usage: client HOST PORT K MODE GROUP PSKHEX CAFILE [SUITE [WINDOW]]");
	const char *want = argc > 9 ? argv[9] : "TLS_AES_128_GCM_SHA256";
	double window = argc > 10 ? atof(argv[10]) : 0;
	/* wolfSSL names the TLS 1.3 suites its own way. */
	const char *iana[] = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"};
	const char *wolf[] = {"TLS13-AES128-GCM-SHA256", "TLS13-AES256-GCM-SHA384", "TLS13-CHACHA20-POLY1305-SHA256"};
	const char *client_suite = NULL;
	for (int j = 0; j < 3; j++)
		if (!strcmp(want, iana[j])) client_suite = wolf[j];
	if (!client_suite) unsupported("suite", want);
	int k = atoi(argv[4]);
	const char *mode = argv[5];
	parse_psk(argv[7]);
	int resume = !strcmp(mode, "resume"), use_psk = !strncmp(mode, "psk", 3);
	if (!resume && !use_psk && strcmp(mode, "full")) die("MODE: full, resume, psk_ke or psk_dhe_ke");
	const char *gnames[] = {"X25519", "P-256", "P-384", "P-521"};
	const int gids[] = {WOLFSSL_ECC_X25519, WOLFSSL_ECC_SECP256R1, WOLFSSL_ECC_SECP384R1, WOLFSSL_ECC_SECP521R1};
	int group = -1;
	for (int j = 0; j < 4; j++)
		if (!strcmp(argv[6], gnames[j])) group = gids[j];
	if (group < 0) unsupported("group", argv[6]);
	WOLFSSL_CTX *ctx = wolfSSL_CTX_new(wolfTLSv1_3_client_method());
	if (wolfSSL_CTX_load_verify_locations(ctx, argv[8], NULL) != WOLFSSL_SUCCESS) die("CAFILE");
	wolfSSL_CTX_set_verify(ctx, WOLFSSL_VERIFY_PEER, NULL);
	if (wolfSSL_CTX_set_cipher_list(ctx, use_psk ? suite : client_suite) != WOLFSSL_SUCCESS) unsupported("suite", want);
	if (use_psk) {
		wolfSSL_CTX_set_psk_client_tls13_callback(ctx, client_psk);
		if (!strcmp(mode, "psk_ke") && wolfSSL_CTX_no_dhe_psk(ctx) != 0) die("psk_ke");
	}
	struct sockaddr_in a = server_addr(argv[2], argv[3]);
	WOLFSSL_SESSION *sess = NULL;
	long resumed = 0, sent = 0, recvd = 0;
	double start = now();
	int i;
	for (i = 0; i < k && (window <= 0 || now() - start < window); i++) {
		int s = connect_nodelay(&a);
		WOLFSSL *ssl = wolfSSL_new(ctx);
		wolfSSL_set_fd(ssl, s);
		wolfSSL_UseSNI(ssl, WOLFSSL_SNI_HOST_NAME, "lab", 3);
		wolfSSL_check_domain_name(ssl, "lab");
		if (wolfSSL_UseSupportedCurve(ssl, (word16)group) != WOLFSSL_SUCCESS) unsupported("group", argv[6]);
		if (wolfSSL_UseKeyShare(ssl, (word16)group) != WOLFSSL_SUCCESS) unsupported("group", argv[6]);
		if (resume && sess) wolfSSL_set_session(ssl, sess);
		if (wolfSSL_connect(ssl) != WOLFSSL_SUCCESS) {
			char msg[128];
			wolfSSL_ERR_error_string_n(wolfSSL_get_error(ssl, 0), msg, sizeof msg);
			fprintf(stderr, "tlsbench_wolfssl: handshake: %s\n", msg);
			exit(1);
		}
		char c;
		if (wolfSSL_read(ssl, &c, 1) != 1) die("read"); /* also takes the ticket */
		/* wolfSSL does not count an external PSK as a reused session: no certificate
		 * in the handshake says it was used. */
		if (wolfSSL_session_reused(ssl) || (use_psk && wolfSSL_get_chain_count(wolfSSL_get_peer_chain(ssl)) == 0)) resumed++;
		if (resume) {
			if (sess) wolfSSL_SESSION_free(sess);
			sess = wolfSSL_get1_session(ssl);
		}
		struct tcp_info ti;
		socklen_t tl = sizeof ti;
		if (getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0) {
			sent += (long)ti.tcpi_bytes_acked;
			recvd += (long)ti.tcpi_bytes_received;
		}
		wolfSSL_shutdown(ssl);
		wolfSSL_free(ssl);
		close(s);
	}
	printf("ok %d %.6f %ld %ld %ld\n", i, now() - start, resumed, sent, recvd);
	return 0;
}

static long tcp_counter(int s, int sent) {
	struct tcp_info ti;
	socklen_t tl = sizeof ti;
	if (getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0) return 0;
	return sent ? (long)ti.tcpi_bytes_acked : (long)ti.tcpi_bytes_received;
}

static int payload(int argc, char **argv) {
	if (argc != 7) die("usage: payload HOST PORT SIZE WINDOW CAFILE");
	int size = atoi(argv[4]);
	double window = atof(argv[5]);
	if (size < 1 || size > 1 << 20) die("SIZE: 1 to 1048576");
	WOLFSSL_CTX *ctx = wolfSSL_CTX_new(wolfTLSv1_3_client_method());
	if (wolfSSL_CTX_load_verify_locations(ctx, argv[6], NULL) != WOLFSSL_SUCCESS) die("CAFILE");
	wolfSSL_CTX_set_verify(ctx, WOLFSSL_VERIFY_PEER, NULL);
	if (wolfSSL_CTX_set_cipher_list(ctx, suite) != WOLFSSL_SUCCESS) die("suite");
	struct sockaddr_in a = server_addr(argv[2], argv[3]);
	int s = connect_nodelay(&a);
	WOLFSSL *ssl = wolfSSL_new(ctx);
	wolfSSL_set_fd(ssl, s);
	wolfSSL_UseSNI(ssl, WOLFSSL_SNI_HOST_NAME, "lab", 3);
	wolfSSL_check_domain_name(ssl, "lab");
	if (wolfSSL_UseKeyShare(ssl, WOLFSSL_ECC_X25519) != WOLFSSL_SUCCESS) die("key share");
	if (wolfSSL_connect(ssl) != WOLFSSL_SUCCESS) die("handshake");
	char *msg = calloc(1, size), *back = malloc(size);
	long sent0 = tcp_counter(s, 1), recvd0 = tcp_counter(s, 0);
	int n = 0;
	double start = now();
	while (now() - start < window) {
		if (wolfSSL_write(ssl, msg, size) != size) die("write");
		for (int got = 0; got < size;) {
			int r = wolfSSL_read(ssl, back + got, size - got);
			if (r <= 0) die("read");
			got += r;
		}
		n++;
	}
	printf("ok %d %.6f 0 %ld %ld\n", n, now() - start, tcp_counter(s, 1) - sent0, tcp_counter(s, 0) - recvd0);
	wolfSSL_shutdown(ssl);
	return 0;
}

int main(int argc, char **argv) {
	wolfSSL_Init();
	if (argc > 1 && (!strcmp(argv[1], "server") || !strcmp(argv[1], "echo"))) return server(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "payload")) return payload(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "client")) return client(argc, argv);
	die("usage: server ... | client ...");
	return 1;
}
