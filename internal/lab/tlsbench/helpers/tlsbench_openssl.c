/*
 * tlsbench_openssl: one side of iotsafe's TLS connection-time benchmark (paper 003,
 * fig. 5) over OpenSSL 3.0. Built by the lab with the system's compiler and libssl-dev.
 *
 *   tlsbench_openssl server PORT CERT KEY PSKHEX
 *       listens on 127.0.0.1:PORT (0: any), prints "ready PORT", and for each connection
 *       does the handshake, writes one byte (so a TLS 1.3 client reads its tickets) and
 *       closes. An external PSK (identity "iotsafe") is accepted alongside certificates.
 *   tlsbench_openssl echo PORT CERT KEY PSKHEX
 *       as server, but after the handshake sends back every byte it reads (fig. 6).
 *   tlsbench_openssl payload HOST PORT SIZE WINDOW CAFILE
 *       one connection (X25519, TLS_AES_128_GCM_SHA256); SIZE-byte messages written and
 *       read back, one after the other, for WINDOW seconds. Prints "ok N SECONDS 0 SENT
 *       RECEIVED" (bytes after the handshake).
 *   tlsbench_openssl client HOST PORT K MODE GROUP PSKHEX CAFILE [SUITE [WINDOW]]
 *       makes K connections one after the other, verifying the server's certificate
 *       against CAFILE as a real client would (name "lab"); MODE is full, resume,
 *       psk_ke or psk_dhe_ke; GROUP an OpenSSL group name; SUITE a TLS 1.3 suite (default
 *       TLS_AES_128_GCM_SHA256); WINDOW > 0: as many connections as fit in WINDOW
 *       seconds (K is then a cap). Prints "ok N SECONDS RESUMED SENT RECEIVED" (bytes on
 *       the sockets, TLS included).
 */
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define HELPER_NAME "tlsbench_openssl"
#include "tlsbench_common.h"

static void helper_errors(void) { ERR_print_errors_fp(stderr); }

static const unsigned char tls13_aes128gcmsha256_id[] = {0x13, 0x01};

/* A TLS 1.3 session that stands for the external PSK. */
static SSL_SESSION *psk_session(SSL *ssl) {
	const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, tls13_aes128gcmsha256_id);
	SSL_SESSION *s = SSL_SESSION_new();
	if (!s || !cipher || !SSL_SESSION_set1_master_key(s, psk, psk_len) || !SSL_SESSION_set_cipher(s, cipher) ||
	    !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION))
		die("PSK session");
	return s;
}

static int client_psk_cb(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen, SSL_SESSION **sess) {
	(void)md;
	*sess = psk_session(ssl);
	*id = (const unsigned char *)"iotsafe";
	*idlen = 7;
	return 1;
}

static int server_psk_cb(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess) {
	if (idlen != 7 || memcmp(id, "iotsafe", 7) != 0) {
		*sess = NULL;
		return 1; /* unknown identity: fall back to a certificate handshake */
	}
	*sess = psk_session(ssl);
	return 1;
}

static int server(int argc, char **argv) {
	int echo = !strcmp(argv[1], "echo");
	if (argc != 6) die("usage: server|echo PORT CERT KEY PSKHEX");
	parse_psk(argv[5]);
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, argv[3]) != 1 || SSL_CTX_use_PrivateKey_file(ctx, argv[4], SSL_FILETYPE_PEM) != 1)
		die("server certificate");
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	SSL_CTX_set_psk_find_session_callback(ctx, server_psk_cb);
	/* psk_ke is allowed when the client asks for it (SSL_OP_ALLOW_NO_DHE_KEX). */
	SSL_CTX_set_options(ctx, SSL_OP_ALLOW_NO_DHE_KEX);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
	int ls = listen_on(argv[2]);
	for (;;) {
		int c = accept_nodelay(ls);
		if (c < 0) continue;
		SSL *ssl = SSL_new(ctx);
		SSL_set_fd(ssl, c);
		if (SSL_accept(ssl) == 1 && echo) {
			static char buf[16384];
			int n;
			while ((n = SSL_read(ssl, buf, sizeof buf)) > 0)
				if (SSL_write(ssl, buf, n) != n) break;
			SSL_shutdown(ssl);
		} else if (!echo && SSL_is_init_finished(ssl)) {
			SSL_write(ssl, "k", 1);
			SSL_shutdown(ssl);
		} else {
			ERR_clear_error();
		}
		SSL_free(ssl);
		close(c);
	}
	return 0;
}

static int client(int argc, char **argv) {
	if (argc < 9 || argc > 11) die("usage: client HOST PORT K MODE GROUP PSKHEX CAFILE [SUITE [WINDOW]]");
	const char *suite = argc > 9 ? argv[9] : "TLS_AES_128_GCM_SHA256";
	double window = argc > 10 ? atof(argv[10]) : 0;
	int k = atoi(argv[4]);
	const char *mode = argv[5];
	parse_psk(argv[7]);
	int resume = !strcmp(mode, "resume"), use_psk = !strncmp(mode, "psk", 3);
	if (!resume && !use_psk && strcmp(mode, "full")) die("MODE: full, resume, psk_ke or psk_dhe_ke");
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	if (SSL_CTX_set1_groups_list(ctx, argv[6]) != 1) unsupported("group", argv[6]);
	/* One suite for every mode unless told: the PSK's hash is SHA-256. */
	if (SSL_CTX_set_ciphersuites(ctx, suite) != 1) unsupported("suite", suite);
	if (SSL_CTX_load_verify_locations(ctx, argv[8], NULL) != 1) die("CAFILE");
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (use_psk) {
		SSL_CTX_set_psk_use_session_callback(ctx, client_psk_cb);
		if (!strcmp(mode, "psk_ke")) SSL_CTX_set_options(ctx, SSL_OP_ALLOW_NO_DHE_KEX);
	}
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	addr_t a = server_addr(argv[2], argv[3]);
	SSL_SESSION *sess = NULL;
	long resumed = 0, sent = 0, recvd = 0;
	double start = now();
	int i;
	for (i = 0; i < k && (window <= 0 || now() - start < window); i++) {
		int s = connect_nodelay(&a);
		BIO *b = BIO_new_socket(s, BIO_NOCLOSE);
		SSL *ssl = SSL_new(ctx);
		SSL_set_bio(ssl, b, b);
		SSL_set_tlsext_host_name(ssl, "lab");
		SSL_set1_host(ssl, "lab");
		if (resume && sess) SSL_set_session(ssl, sess);
		if (SSL_connect(ssl) != 1) die("handshake");
		char c;
		if (SSL_read(ssl, &c, 1) != 1) die("read"); /* also takes the tickets */
		if (SSL_session_reused(ssl)) resumed++;
		if (resume) {
			if (sess) SSL_SESSION_free(sess);
			sess = SSL_get1_session(ssl);
		}
		sent += BIO_number_written(b);
		recvd += BIO_number_read(b);
		SSL_shutdown(ssl);
		SSL_free(ssl);
		close(s);
	}
	printf("ok %d %.6f %ld %ld %ld\n", i, now() - start, resumed, sent, recvd);
	return 0;
}

static int payload(int argc, char **argv) {
	if (argc != 7) die("usage: payload HOST PORT SIZE WINDOW CAFILE");
	int size = atoi(argv[4]);
	double window = atof(argv[5]);
	if (size < 1 || size > 1 << 20) die("SIZE: 1 to 1048576");
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	if (SSL_CTX_set1_groups_list(ctx, "X25519") != 1 || SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256") != 1) die("group or suite");
	if (SSL_CTX_load_verify_locations(ctx, argv[6], NULL) != 1) die("CAFILE");
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	addr_t a = server_addr(argv[2], argv[3]);
	int s = connect_nodelay(&a);
	BIO *b = BIO_new_socket(s, BIO_NOCLOSE);
	SSL *ssl = SSL_new(ctx);
	SSL_set_bio(ssl, b, b);
	SSL_set_tlsext_host_name(ssl, "lab");
	SSL_set1_host(ssl, "lab");
	if (SSL_connect(ssl) != 1) die("handshake");
	char *msg = calloc(1, size), *back = malloc(size);
	long sent0 = BIO_number_written(b), recvd0 = BIO_number_read(b);
	int n = 0;
	double start = now();
	while (now() - start < window) {
		if (SSL_write(ssl, msg, size) != size) die("write");
		for (int got = 0; got < size;) {
			int r = SSL_read(ssl, back + got, size - got);
			if (r <= 0) die("read");
			got += r;
		}
		n++;
	}
	printf("ok %d %.6f 0 %ld %ld\n", n, now() - start, (long)BIO_number_written(b) - sent0, (long)BIO_number_read(b) - recvd0);
	SSL_shutdown(ssl);
	return 0;
}

int main(int argc, char **argv) {
	if (argc > 1 && (!strcmp(argv[1], "server") || !strcmp(argv[1], "echo"))) return server(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "payload")) return payload(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "client")) return client(argc, argv);
	die("usage: server ... | client ...");
	return 1;
}
