/*
 * ud_peer: the VM stage's UD address case (tests/qemu/l1-rxe.sh): each side answers the other's
 * datagram through an address handle made from what it received (ibv_create_ah_from_wc), so
 * each side's GRH area must be one the other's libibverbs reads right. Built in the stage
 * against the system's libibverbs and run twice: on rxe0 through that library, and in the
 * model's namespace through ours (LD_LIBRARY_PATH), which has the same C ABI.
 *     cc -O2 -o ud_peer ud_peer.c -libverbs
 *
 *   ud_peer -d DEV -g GIDIDX [-p PORT] [-s LEN] [-t SECONDS]          (server)
 *   ud_peer -d DEV -g GIDIDX [-p PORT] [-s LEN] [-t SECONDS] HOST     (client)
 *
 * One UD QP (Q_Key 0x11111111), receives of 40 + LEN bytes. The client sends message 1 through
 * an AH built from the peer's GID (as ibv_ud_pingpong does); the server answers it with message
 * 2 through ibv_create_ah_from_wc on message 1; the client answers message 2 with message 3 the
 * same way. Message n of a side with seed S holds pattern(S + n). Every receive is checked:
 *   CHECK grh ok|FAIL       (IBV_WC_GRH set, and the 40-byte GRH area holds the IP header of the
 *                            packet: IPv6 (version 6, next header UDP, source the peer's GID,
 *                            destination ours) in bytes 0-39, or for IPv4-mapped GIDs an IPv4
 *                            header (0x45, protocol UDP, a good checksum, the peer's and our
 *                            address) in bytes 20-39 (rdma-core's ibv_init_ah_from_wc reads
 *                            exactly that))
 *   CHECK payload ok|FAIL   (the source QP, byte_len 40 + LEN and the bytes after the GRH)
 *   CHECK ah_from_wc ok|FAIL (ibv_create_ah_from_wc on every receive, its send completed)
 * The peer receiving the answer is what proves the AH right. Exit status 0 only when every
 * check passed and every completion succeeded.
 *
 * TCP exchange (port 18517 by default): 64-byte NUL-padded text messages
 *   "UDPEER1 <qpn %06x> <gid 32 hex digits> <seed %04x>"
 * (client first), then the 8-byte tokens "ready" (receives posted) and, at the end, "done".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define MSG_LEN 64
#define TOKEN_LEN 8
#define GRH 40
#define QKEY 0x11111111u
#define NRECV 2

struct dest {
	uint32_t qpn, seed;
	union ibv_gid gid;
};

static struct {
	const char *dev, *host;
	int gid_idx, port, timeout_s;
	uint32_t len;
} opt = { NULL, NULL, -1, 18517, 30, 64 };

static int ok = 1;

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "ud_peer: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

static uint8_t pattern(uint32_t seed, size_t i)
{
	return (uint8_t)(i * 131u + (i >> 8) * 7u + seed * 29u + 1u);
}

static void check(const char *name, int good, const char *fmt, ...)
{
	va_list ap;

	printf("CHECK %s %s", name, good ? "ok" : "FAIL: ");
	if (!good) {
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		ok = 0;
	}
	printf("\n");
	fflush(stdout);
}

static void io_all(int fd, void *buf, size_t n, int out)
{
	char *p = buf;

	while (n) {
		ssize_t r = out ? write(fd, p, n) : read(fd, p, n);

		if (r <= 0)
			die("TCP %s: %s", out ? "write" : "read", r < 0 ? strerror(errno) : "closed");
		p += r;
		n -= (size_t)r;
	}
}

static void token(int fd, const char *mine)
{
	char out[TOKEN_LEN] = { 0 }, in[TOKEN_LEN + 1] = { 0 };

	strncpy(out, mine, TOKEN_LEN - 1);
	io_all(fd, out, TOKEN_LEN, 1);
	io_all(fd, in, TOKEN_LEN, 0);
	if (strcmp(in, mine))
		die("expected the peer's \"%s\", got \"%s\"", mine, in);
}

static int tcp_connect(void)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *t;
	char service[16];
	int fd = -1, one = 1, zero = 0;

	snprintf(service, sizeof service, "%d", opt.port);
	if (opt.host) {
		if (getaddrinfo(opt.host, service, &hints, &res))
			die("cannot resolve %s", opt.host);
		for (t = res; t && fd < 0; t = t->ai_next) {
			fd = socket(t->ai_family, t->ai_socktype, t->ai_protocol);
			if (fd >= 0 && connect(fd, t->ai_addr, t->ai_addrlen)) {
				close(fd);
				fd = -1;
			}
		}
		freeaddrinfo(res);
		if (fd < 0)
			die("cannot connect to %s port %d", opt.host, opt.port);
		return fd;
	}
	struct sockaddr_in6 any = { .sin6_family = AF_INET6, .sin6_port = htons(opt.port) };
	int lfd = socket(AF_INET6, SOCK_STREAM, 0);

	if (lfd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
	if (bind(lfd, (struct sockaddr *)&any, sizeof any) || listen(lfd, 1))
		die("cannot listen on port %d: %s", opt.port, strerror(errno));
	fd = accept(lfd, NULL, NULL);
	close(lfd);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	return fd;
}

static void exchange(int fd, const struct dest *me, struct dest *peer)
{
	char out[MSG_LEN] = { 0 }, in[MSG_LEN + 1] = { 0 }, gid[33] = { 0 };

	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", me->gid.raw[i]);
	snprintf(out, sizeof out, "UDPEER1 %06x %s %04x", me->qpn, gid, me->seed);
	if (opt.host)
		io_all(fd, out, MSG_LEN, 1);
	io_all(fd, in, MSG_LEN, 0);
	if (!opt.host)
		io_all(fd, out, MSG_LEN, 1);
	if (sscanf(in, "UDPEER1 %x %32s %x", &peer->qpn, gid, &peer->seed) != 3 || strlen(gid) != 32)
		die("malformed peer message \"%.*s\"", MSG_LEN, in);
	for (int i = 0; i < 16; i++) {
		unsigned int b;

		if (sscanf(gid + 2 * i, "%2x", &b) != 1)
			die("malformed GID %s", gid);
		peer->gid.raw[i] = (uint8_t)b;
	}
}

static int v4_mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return !memcmp(g->raw, prefix, sizeof prefix);
}

static uint16_t ipv4_sum(const uint8_t *h)
{
	uint32_t s = 0;

	for (int i = 0; i < 20; i += 2)
		s += (uint32_t)h[i] << 8 | h[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* Why the GRH area g of a datagram from peer to me is wrong, or NULL. */
static const char *grh_wrong(const uint8_t *g, const struct dest *me, const struct dest *peer)
{
	if (v4_mapped(&peer->gid)) {
		const uint8_t *h = g + 20;

		if (h[0] != 0x45 || h[9] != IPPROTO_UDP)
			return "bytes 20-39 are not an IPv4 header of a UDP packet";
		if (ipv4_sum(h))
			return "the IPv4 header's checksum is wrong";
		if (memcmp(h + 12, peer->gid.raw + 12, 4) || memcmp(h + 16, me->gid.raw + 12, 4))
			return "the IPv4 header's addresses are not the peer's and ours";
		return NULL;
	}
	if (g[0] >> 4 != 6 || g[6] != IPPROTO_UDP)
		return "bytes 0-39 are not an IPv6 header of a UDP packet";
	if (memcmp(g + 8, peer->gid.raw, 16) || memcmp(g + 24, me->gid.raw, 16))
		return "the IPv6 header's addresses are not the peer's GID and ours";
	return NULL;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static struct ibv_wc poll_one(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	double deadline = now_s() + opt.timeout_s;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		if (now_s() > deadline)
			die("no completion (%s) after %d s", what, opt.timeout_s);
	if (n < 0)
		die("ibv_poll_cq failed");
	if (wc.status != IBV_WC_SUCCESS)
		die("%s completed with %s (%d)", what, ibv_wc_status_str(wc.status), wc.status);
	return wc;
}

struct ctx {
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf; /* NRECV receive slots of GRH + len, then the send slot */
};

static void send_msg(struct ctx *c, struct ibv_ah *ah, uint32_t qpn, uint32_t seed)
{
	uint8_t *s = c->buf + NRECV * (GRH + opt.len);
	struct ibv_sge sge = { .addr = (uintptr_t)s, .length = opt.len, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	for (size_t i = 0; i < opt.len; i++)
		s[i] = pattern(seed, i);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = QKEY;
	if (ibv_post_send(c->qp, &wr, &bad))
		die("ibv_post_send failed");
	poll_one(c->scq, "send");
}

/* Waits for message n of the peer, checks it, and answers it (unless last) with message n + 1
 * of ours through an AH made from it. */
static void receive(struct ctx *c, const struct dest *me, const struct dest *peer, int n, int last)
{
	struct ibv_wc wc = poll_one(c->rcq, "receive");
	uint8_t *slot = c->buf + wc.wr_id * (GRH + opt.len);
	const char *why = grh_wrong(slot, me, peer);
	long bad = -1;

	check("grh", (wc.wc_flags & IBV_WC_GRH) && !why, "message %d: %s", n,
	      !(wc.wc_flags & IBV_WC_GRH) ? "no IBV_WC_GRH" : why);
	for (size_t i = 0; i < opt.len && bad < 0; i++)
		if (slot[GRH + i] != pattern(peer->seed + n, i))
			bad = (long)i;
	check("payload", wc.src_qp == peer->qpn && wc.byte_len == GRH + opt.len && bad < 0,
	      "message %d: source QP 0x%06x (want 0x%06x), byte_len %u (want %u), byte %ld differs",
	      n, wc.src_qp, peer->qpn, wc.byte_len, GRH + opt.len, bad);
	if (last)
		return;
	struct ibv_ah *ah = ibv_create_ah_from_wc(c->pd, &wc, (struct ibv_grh *)slot, 1);

	check("ah_from_wc", ah != NULL, "ibv_create_ah_from_wc on message %d: %s", n, strerror(errno));
	if (!ah)
		return;
	send_msg(c, ah, wc.src_qp, me->seed + n + 1);
	ibv_destroy_ah(ah);
}

static struct ibv_context *open_dev(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;

	if (!list)
		die("ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), opt.dev))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		die("IB device %s not found", opt.dev);
	return ctx;
}

static void setup(struct ctx *c, struct ibv_context *dev)
{
	size_t total = (NRECV + 1) * (GRH + opt.len);

	c->buf = calloc(1, total);
	c->pd = c->buf ? ibv_alloc_pd(dev) : NULL;
	c->mr = c->pd ? ibv_reg_mr(c->pd, c->buf, total, IBV_ACCESS_LOCAL_WRITE) : NULL;
	c->scq = c->mr ? ibv_create_cq(dev, 4, NULL, NULL, 0) : NULL;
	c->rcq = c->scq ? ibv_create_cq(dev, 4, NULL, NULL, 0) : NULL;
	if (!c->rcq)
		die("buffer, PD, MR or CQs: %s", strerror(errno));
	struct ibv_qp_init_attr qia = {
		.send_cq = c->scq, .recv_cq = c->rcq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 2, .max_recv_wr = NRECV, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	c->qp = ibv_create_qp(c->pd, &qia);
	if (!c->qp)
		die("ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };

	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("modify QP to INIT failed");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE))
		die("modify QP to RTR failed");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("modify QP to RTS failed");
	for (uint64_t i = 0; i < NRECV; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(c->buf + i * (GRH + opt.len)),
				       .length = GRH + opt.len, .lkey = c->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(c->qp, &wr, &bad))
			die("ibv_post_recv failed");
	}
}

int main(int argc, char **argv)
{
	struct dest me = { 0 }, peer = { 0 };
	struct ctx c = { 0 };
	int ch;

	while ((ch = getopt(argc, argv, "d:g:p:s:t:")) != -1) {
		switch (ch) {
		case 'd': opt.dev = optarg; break;
		case 'g': opt.gid_idx = atoi(optarg); break;
		case 'p': opt.port = atoi(optarg); break;
		case 's': opt.len = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 't': opt.timeout_s = atoi(optarg); break;
		default: die("usage: ud_peer -d DEV -g GIDIDX [-p PORT] [-s LEN] [-t S] [HOST]");
		}
	}
	if (optind == argc - 1)
		opt.host = argv[optind];
	if (!opt.dev || opt.gid_idx < 0 || optind < argc - 1 || !opt.len || opt.len > 4096 || opt.timeout_s <= 0)
		die("usage: ud_peer -d DEV -g GIDIDX [-p PORT] [-s LEN] [-t S] [HOST]");
	srand48(getpid() ^ time(NULL));
	struct ibv_context *dev = open_dev();

	setup(&c, dev);
	if (ibv_query_gid(dev, 1, opt.gid_idx, &me.gid))
		die("can't read sgid of index %d", opt.gid_idx);
	me.qpn = c.qp->qp_num;
	me.seed = (uint32_t)(lrand48() & 0xfff) + 1;
	int fd = tcp_connect();

	exchange(fd, &me, &peer);
	printf("local  QPN 0x%06x seed 0x%04x\nremote QPN 0x%06x seed 0x%04x\n", me.qpn, me.seed,
	       peer.qpn, peer.seed);
	token(fd, "ready");
	if (opt.host) {
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
					  .grh = { .dgid = peer.gid, .sgid_index = (uint8_t)opt.gid_idx,
						   .hop_limit = 64 } };
		struct ibv_ah *ah = ibv_create_ah(c.pd, &aa);

		if (!ah)
			die("ibv_create_ah: %s", strerror(errno));
		send_msg(&c, ah, peer.qpn, me.seed + 1);
		ibv_destroy_ah(ah);
		receive(&c, &me, &peer, 2, 0);
	} else {
		receive(&c, &me, &peer, 1, 0);
		receive(&c, &me, &peer, 3, 1);
	}
	token(fd, "done");
	close(fd);
	ibv_destroy_qp(c.qp);
	ibv_destroy_cq(c.rcq);
	ibv_destroy_cq(c.scq);
	ibv_dereg_mr(c.mr);
	ibv_dealloc_pd(c.pd);
	ibv_close_device(dev);
	free(c.buf);
	printf("ud_peer: %s\n", ok ? "all checks passed" : "FAILED");
	return ok ? 0 : 1;
}
