/*
 * tlsbench_wolfssl: the TLS connection-time benchmark's helper over wolfSSL 5.5 (Debian's
 * libwolfssl-dev), with the same command line and output as tlsbench_openssl:
 *
 *   tlsbench_wolfssl server PORT CERT KEY PSKHEX
 *   tlsbench_wolfssl speed SECONDS
 *       wolfCrypt's primitives (fig. 2), each for SECONDS: lines "F NAME UNIT VALUE".
 *   tlsbench_wolfssl echo PORT CERT KEY PSKHEX
 *   tlsbench_wolfssl payload HOST PORT SIZE WINDOW CAFILE
 *   tlsbench_wolfssl client HOST PORT K MODE GROUP PSKHEX CAFILE [SUITE [WINDOW]]
 *   tlsbench_wolfssl dtls-server PORT CERT KEY PSKHEX
 *   tlsbench_wolfssl dtls-client HOST PORT K MODE PSKHEX CAFILE
 *       DTLS 1.2 (Debian's build has no DTLS 1.3 and no connection IDs), the modes as
 *       pion's in the bench: full ECDHE-ECDSA-AES128-GCM-SHA256 with X25519, resume
 *       (session id), psk_ke PSK-CHACHA20-POLY1305 (Debian's build has no plain-PSK
 *       AES-GCM suite), psk_dhe_ke ECDHE-PSK-AES128-CBC-SHA256 with P-256 (its ECDHE-PSK
 *       refuses X25519). Bytes are counted in the I/O callbacks (UDP has no
 *       kernel counters per socket).
 *
 * MODE is full, resume, psk_ke or psk_dhe_ke; GROUP is X25519, P-256, P-384 or P-521;
 * SUITE a TLS 1.3 suite by its IANA name. Bytes are read from the kernel's TCP counters
 * (tcp_info).
 */
#include <wolfssl/options.h>
#include <wolfssl/ssl.h>
#include <wolfssl/wolfcrypt/aes.h>
#include <wolfssl/wolfcrypt/chacha20_poly1305.h>
#include <wolfssl/wolfcrypt/curve25519.h>
#include <wolfssl/wolfcrypt/ecc.h>
#include <wolfssl/wolfcrypt/ed25519.h>
#include <wolfssl/wolfcrypt/hmac.h>
#include <wolfssl/wolfcrypt/random.h>
#include <wolfssl/wolfcrypt/rsa.h>
#include <wolfssl/wolfcrypt/sha256.h>

#include <errno.h>
#include <linux/tcp.h> /* tcp_info with byte counters */
#include <sys/time.h>

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

/* server_ctx makes a server context of method with the certificate and key files. */
static WOLFSSL_CTX *server_ctx(WOLFSSL_METHOD *method, const char *cert, const char *key) {
	WOLFSSL_CTX *ctx = wolfSSL_CTX_new(method);
	if (!ctx || wolfSSL_CTX_use_certificate_chain_file(ctx, cert) != WOLFSSL_SUCCESS ||
	    wolfSSL_CTX_use_PrivateKey_file(ctx, key, WOLFSSL_FILETYPE_PEM) != WOLFSSL_SUCCESS)
		die("server certificate");
	return ctx;
}

/* handshake_failed says why a client's handshake ended in r, and exits. */
static void handshake_failed(WOLFSSL *ssl, int r, const char *what) {
	char msg[128];
	int e = wolfSSL_get_error(ssl, r);
	wolfSSL_ERR_error_string_n(e, msg, sizeof msg);
	fprintf(stderr, "tlsbench_wolfssl: %s: %s (%d)\n", what, msg, e);
	exit(1);
}

static int server(int argc, char **argv) {
	int echo = !strcmp(argv[1], "echo");
	if (argc != 6) die("usage: server|echo PORT CERT KEY PSKHEX");
	parse_psk(argv[5]);
	WOLFSSL_CTX *ctx = server_ctx(wolfTLSv1_3_server_method(), argv[3], argv[4]);
	wolfSSL_CTX_set_psk_server_tls13_callback(ctx, server_psk);
	int ls = listen_on(argv[2]);
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
	addr_t a = server_addr(argv[2], argv[3]);
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
		int r = wolfSSL_connect(ssl);
		if (r != WOLFSSL_SUCCESS) handshake_failed(ssl, r, "handshake");
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

/* TIMED runs BODY for secs, 16 at a time, and prints its rate (ops/s, or MB/s of
 * `bytes` per call when bytes > 0). */
#define TIMED(name, secs, bytes, BODY) do { \
	long n_ = 0; double t0_ = now(), el_; \
	do { for (int i_ = 0; i_ < 16; i_++) { BODY; } n_ += 16; } while ((el_ = now() - t0_) < (secs)); \
	if ((bytes) > 0) printf("F %s MB/s %.1f\n", name, n_ * (double)(bytes) / el_ / 1e6); \
	else printf("F %s ops/s %.1f\n", name, n_ / el_); \
} while (0)

static int speed(int argc, char **argv) {
	if (argc != 3) die("usage: speed SECONDS");
	double secs = atof(argv[2]);
	WC_RNG rng;
	if (wc_InitRng(&rng) != 0) die("rng");
	static byte in[1024], out[1024 + 16], key[32], iv[12], tag[16], hash[32], secret[80], sig[600];
	word32 len;
	int res;
	for (int bits = 128; bits <= 256; bits += 128) {
		Aes aes;
		if (wc_AesInit(&aes, NULL, INVALID_DEVID) || wc_AesGcmSetKey(&aes, key, bits / 8)) die("aes");
		TIMED(bits == 128 ? "AES-128-GCM" : "AES-256-GCM", secs, sizeof in,
		      wc_AesGcmEncrypt(&aes, out, in, sizeof in, iv, sizeof iv, tag, sizeof tag, NULL, 0));
		wc_AesFree(&aes);
	}
	TIMED("ChaCha20-Poly1305", secs, sizeof in, wc_ChaCha20Poly1305_Encrypt(key, iv, NULL, 0, in, sizeof in, out, tag));
	TIMED("SHA-256", secs, sizeof in, wc_Sha256Hash(in, sizeof in, hash));

	curve25519_key xa, xb;
	wc_curve25519_init(&xa);
	wc_curve25519_init(&xb);
	if (wc_curve25519_make_key(&rng, 32, &xa) || wc_curve25519_make_key(&rng, 32, &xb)) die("x25519");
	TIMED("X25519", secs, 0, len = sizeof secret; wc_curve25519_shared_secret(&xa, &xb, secret, &len));

	const struct { const char *name; int id, size; } curves[] = {{"ECDH P-256", ECC_SECP256R1, 32}, {"ECDH P-384", ECC_SECP384R1, 48}, {"ECDH P-521", ECC_SECP521R1, 66}};
	for (int c = 0; c < 3; c++) {
		ecc_key a, b;
		wc_ecc_init(&a);
		wc_ecc_init(&b);
		if (wc_ecc_make_key_ex(&rng, curves[c].size, &a, curves[c].id) || wc_ecc_make_key_ex(&rng, curves[c].size, &b, curves[c].id)) {
			printf("U %s not built\n", curves[c].name);
			continue;
		}
		wc_ecc_set_rng(&a, &rng);
		TIMED(curves[c].name, secs, 0, len = sizeof secret; wc_ecc_shared_secret(&a, &b, secret, &len));
		if (c == 0) {
			word32 slen = sizeof sig;
			if (wc_ecc_sign_hash(hash, sizeof hash, sig, &slen, &rng, &a)) die("ecdsa");
			TIMED("ECDSA P-256 sign", secs, 0, len = sizeof sig; wc_ecc_sign_hash(hash, sizeof hash, sig + 300, &len, &rng, &a));
			TIMED("ECDSA P-256 verify", secs, 0, wc_ecc_verify_hash(sig, slen, hash, sizeof hash, &res, &a));
		}
		wc_ecc_free(&a);
		wc_ecc_free(&b);
	}

	ed25519_key ek;
	wc_ed25519_init(&ek);
	if (wc_ed25519_make_key(&rng, 32, &ek)) die("ed25519");
	word32 elen = 64;
	if (wc_ed25519_sign_msg(hash, sizeof hash, sig, &elen, &ek)) die("ed25519 sign");
	TIMED("Ed25519 sign", secs, 0, len = 64; wc_ed25519_sign_msg(hash, sizeof hash, sig + 300, &len, &ek));
	TIMED("Ed25519 verify", secs, 0, wc_ed25519_verify_msg(sig, elen, hash, sizeof hash, &res, &ek));

	RsaKey rk;
	wc_InitRsaKey(&rk, NULL);
	if (wc_MakeRsaKey(&rk, 2048, WC_RSA_EXPONENT, &rng)) die("rsa");
	wc_RsaSetRNG(&rk, &rng);
	int rlen = wc_RsaSSL_Sign(hash, sizeof hash, sig, 256, &rk, &rng);
	if (rlen <= 0) die("rsa sign");
	TIMED("RSA-2048 sign", secs, 0, wc_RsaSSL_Sign(hash, sizeof hash, sig + 300, 256, &rk, &rng));
	TIMED("RSA-2048 verify", secs, 0, wc_RsaSSL_Verify(sig, rlen, secret, sizeof secret, &rk));
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
	addr_t a = server_addr(argv[2], argv[3]);
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

static unsigned int dtls_server_psk(WOLFSSL *ssl, const char *id, unsigned char *key, unsigned int max) {
	(void)ssl;
	if (strcmp(id, "iotsafe") != 0 || psk_len > max) return 0;
	memcpy(key, psk, psk_len);
	return (unsigned int)psk_len;
}

static unsigned int dtls_client_psk(WOLFSSL *ssl, const char *hint, char *id, unsigned int idmax, unsigned char *key, unsigned int max) {
	(void)ssl;
	(void)hint;
	if (idmax < 8 || psk_len > max) return 0;
	strcpy(id, "iotsafe");
	memcpy(key, psk, psk_len);
	return (unsigned int)psk_len;
}

static const char *dtls_suites = "ECDHE-ECDSA-AES128-GCM-SHA256:PSK-CHACHA20-POLY1305:ECDHE-PSK-AES128-CBC-SHA256";

/* dtls_retry says whether a DTLS call that returned r should be called again: wolfSSL's
 * blocking DTLS returns WANT_READ when its retransmission timer fires (a datagram lost,
 * or slow to come over the emulated link), and the caller must ask it to resend. */
static int dtls_retry(WOLFSSL *ssl, int r) {
	int e = wolfSSL_get_error(ssl, r);
	return (e == WOLFSSL_ERROR_WANT_READ || e == WOLFSSL_ERROR_WANT_WRITE) && wolfSSL_dtls_got_timeout(ssl) == WOLFSSL_SUCCESS;
}

/* The ClientHello the server's listening socket read, handed to wolfSSL first. */
static unsigned char pending[2048];
static int pending_len;

static long io_sent, io_recvd;

/* The DTLS I/O callbacks of both ends, on connected sockets: the kernel keeps other
 * peers' datagrams out. wolfSSL's own (EmbedReceiveFrom) check the peer themselves, and
 * Debian's build has no IPv6 in its I/O layer: they drop every IPv6 datagram, so the
 * helper could not run on the emulated link (IPv6) with them. */
static int dgram_recv(WOLFSSL *ssl, char *buf, int sz, void *c) {
	(void)c;
	if (pending_len > 0) { /* the ClientHello the server's listening socket read */
		int n = pending_len < sz ? pending_len : sz;
		memcpy(buf, pending, n);
		pending_len = 0;
		return n;
	}
	int fd = wolfSSL_get_fd(ssl);
	struct timeval tv = {.tv_sec = wolfSSL_dtls_get_current_timeout(ssl)};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	ssize_t n = recv(fd, buf, (size_t)sz, 0);
	if (n >= 0) {
		io_recvd += n;
		return (int)n;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK) return WOLFSSL_CBIO_ERR_TIMEOUT;
	if (errno == EINTR) return WOLFSSL_CBIO_ERR_ISR;
	if (errno == ECONNREFUSED) return WOLFSSL_CBIO_ERR_WANT_READ; /* an ICMP error: wait for the retransmission */
	return WOLFSSL_CBIO_ERR_GENERAL;
}

static int dgram_send(WOLFSSL *ssl, char *buf, int sz, void *c) {
	(void)c;
	ssize_t n = send(wolfSSL_get_fd(ssl), buf, (size_t)sz, 0);
	if (n >= 0) {
		io_sent += n;
		return (int)n;
	}
	if (errno == EINTR) return WOLFSSL_CBIO_ERR_ISR;
	return WOLFSSL_CBIO_ERR_GENERAL;
}

/* cookie_key keys the server's cookies; a cookie is an HMAC of the client's address. */
static unsigned char cookie_key[32];

static int dtls_cookie(WOLFSSL *ssl, unsigned char *buf, int sz, void *c) {
	(void)c;
	struct sockaddr_storage peer;
	socklen_t pl = sizeof peer;
	memset(&peer, 0, sizeof peer);
	if (getpeername(wolfSSL_get_fd(ssl), (struct sockaddr *)&peer, &pl)) return GEN_COOKIE_E;
	Hmac h;
	byte mac[WC_SHA256_DIGEST_SIZE];
	if (wc_HmacSetKey(&h, WC_SHA256, cookie_key, sizeof cookie_key) || wc_HmacUpdate(&h, (byte *)&peer, pl) || wc_HmacFinal(&h, mac))
		return GEN_COOKIE_E;
	if (sz > (int)sizeof mac) sz = sizeof mac;
	memcpy(buf, mac, (size_t)sz);
	return sz;
}

/* udp_socket opens a UDP socket bound to a (port 0: any), shareable with others bound
 * to the same port. */
static int udp_socket(addr_t *a) {
	int fd = socket(a->ss.ss_family, SOCK_DGRAM, 0), one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&a->ss, a->len) || getsockname(fd, (struct sockaddr *)&a->ss, &a->len)) die("bind");
	return fd;
}

/* dtls_server answers one DTLS client at a time. Its listening socket reads each new
 * ClientHello; the handshake then runs on a socket of its own, bound to the same port
 * and connected to the client (the kernel gives a connected socket its peer's
 * datagrams), so the next client's ClientHello reaches the listening socket even while
 * the last connection is closing. wolfSSL's server asks for a cookie first. */
static int dtls_server(int argc, char **argv) {
	if (argc != 6) die("usage: dtls-server PORT CERT KEY PSKHEX");
	parse_psk(argv[5]);
	WOLFSSL_CTX *ctx = server_ctx(wolfDTLSv1_2_server_method(), argv[3], argv[4]);
	wolfSSL_CTX_set_psk_server_callback(ctx, dtls_server_psk);
	wolfSSL_CTX_use_psk_identity_hint(ctx, "iotsafe");
	if (wolfSSL_CTX_set_cipher_list(ctx, dtls_suites) != WOLFSSL_SUCCESS) die("DTLS suites");
	wolfSSL_CTX_SetIORecv(ctx, dgram_recv);
	wolfSSL_CTX_SetIOSend(ctx, dgram_send);
	wolfSSL_CTX_SetGenCookie(ctx, dtls_cookie);
	WC_RNG rng;
	if (wc_InitRng(&rng) || wc_RNG_GenerateBlock(&rng, cookie_key, sizeof cookie_key)) die("rng");
	addr_t a = listen_addr(argv[2]);
	int lfd = udp_socket(&a);
	printf("ready %d\n", addr_port(&a));
	fflush(stdout);
	for (;;) {
		struct sockaddr_storage peer;
		socklen_t pl = sizeof peer;
		int n = (int)recvfrom(lfd, pending, sizeof pending, 0, (struct sockaddr *)&peer, &pl);
		if (n < 14 || pending[0] != 22 || pending[13] != 1) continue; /* not a ClientHello: a late alert */
		pending_len = n;
		int fd = udp_socket(&a);
		if (connect(fd, (struct sockaddr *)&peer, pl)) {
			close(fd);
			continue;
		}
		WOLFSSL *ssl = wolfSSL_new(ctx);
		/* No wolfSSL_dtls_set_peer: the socket is connected, so the kernel filters by
		 * peer, and Debian's wolfSSL is built without IPv6 in its I/O layer (its own peer
		 * check drops every IPv6 datagram, as on the emulated link). */
		wolfSSL_set_fd(ssl, fd);
		int r;
		while ((r = wolfSSL_accept(ssl)) != WOLFSSL_SUCCESS && dtls_retry(ssl, r))
			;
		if (r == WOLFSSL_SUCCESS) {
			wolfSSL_write(ssl, "k", 1);
			wolfSSL_shutdown(ssl);
		}
		wolfSSL_free(ssl);
		close(fd);
	}
	return 0;
}

static int dtls_client(int argc, char **argv) {
	if (argc != 8) die("usage: dtls-client HOST PORT K MODE PSKHEX CAFILE");
	int k = atoi(argv[4]);
	const char *mode = argv[5], *want;
	parse_psk(argv[6]);
	if (!strcmp(mode, "full") || !strcmp(mode, "resume")) want = "ECDHE-ECDSA-AES128-GCM-SHA256";
	else if (!strcmp(mode, "psk_ke")) want = "PSK-CHACHA20-POLY1305"; /* the build's only plain-PSK AEAD */
	else if (!strcmp(mode, "psk_dhe_ke")) want = "ECDHE-PSK-AES128-CBC-SHA256";
	else unsupported("DTLS mode", mode);
	int resume = !strcmp(mode, "resume"), use_psk = !strncmp(mode, "psk", 3);
	WOLFSSL_CTX *ctx = wolfSSL_CTX_new(wolfDTLSv1_2_client_method());
	if (wolfSSL_CTX_load_verify_locations(ctx, argv[7], NULL) != WOLFSSL_SUCCESS) die("CAFILE");
	wolfSSL_CTX_set_verify(ctx, WOLFSSL_VERIFY_PEER, NULL);
	if (wolfSSL_CTX_set_cipher_list(ctx, want) != WOLFSSL_SUCCESS) unsupported("suite", want);
	if (use_psk) wolfSSL_CTX_set_psk_client_callback(ctx, dtls_client_psk);
	wolfSSL_CTX_SetIORecv(ctx, dgram_recv);
	wolfSSL_CTX_SetIOSend(ctx, dgram_send);
	addr_t a = server_addr(argv[2], argv[3]);
	WOLFSSL_SESSION *sess = NULL;
	long resumed = 0;
	double start = now();
	int i;
	for (i = 0; i < k; i++) {
		int s = socket(a.ss.ss_family, SOCK_DGRAM, 0);
		if (connect(s, (const struct sockaddr *)&a.ss, a.len)) die("connect");
		WOLFSSL *ssl = wolfSSL_new(ctx);
		wolfSSL_set_fd(ssl, s); /* connected: no wolfSSL_dtls_set_peer (see dtls_server) */
		if (!use_psk) wolfSSL_check_domain_name(ssl, "lab");
		/* X25519 as pion; wolfSSL 5.5's ECDHE-PSK takes only NIST curves: P-256 there. */
		word16 curve = use_psk ? WOLFSSL_ECC_SECP256R1 : WOLFSSL_ECC_X25519;
		if (wolfSSL_UseSupportedCurve(ssl, curve) != WOLFSSL_SUCCESS) unsupported("group", use_psk ? "P-256" : "X25519");
		if (resume && sess) wolfSSL_set_session(ssl, sess);
		int r;
		while ((r = wolfSSL_connect(ssl)) != WOLFSSL_SUCCESS && dtls_retry(ssl, r))
			;
		if (r != WOLFSSL_SUCCESS) handshake_failed(ssl, r, "DTLS handshake");
		char c;
		while ((r = wolfSSL_read(ssl, &c, 1)) != 1)
			if (!dtls_retry(ssl, r)) die("read");
		if (wolfSSL_session_reused(ssl) || use_psk) resumed++;
		if (resume) {
			if (sess) wolfSSL_SESSION_free(sess);
			sess = wolfSSL_get1_session(ssl);
		}
		wolfSSL_shutdown(ssl);
		wolfSSL_free(ssl);
		close(s);
	}
	printf("ok %d %.6f %ld %ld %ld\n", i, now() - start, resumed, io_sent, io_recvd);
	return 0;
}

int main(int argc, char **argv) {
	wolfSSL_Init();
	if (argc > 1 && (!strcmp(argv[1], "server") || !strcmp(argv[1], "echo"))) return server(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "payload")) return payload(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "speed")) return speed(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "client")) return client(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "dtls-server")) return dtls_server(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "dtls-client")) return dtls_client(argc, argv);
	die("usage: server ... | client ...");
	return 1;
}
