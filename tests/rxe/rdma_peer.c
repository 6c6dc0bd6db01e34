/*
 * rdma_peer: the soft-RoCE (rxe) side of the VM stage's RDMA WRITE / READ interop case
 * (tests/qemu/l1-rxe.sh), built in the stage against the system's libibverbs:
 *     cc -O2 -o rdma_peer rdma_peer.c -libverbs
 * Its counterpart on the model's side is tests/src/bin/roce_rdma/main.rs; the two speak the same
 * TCP exchange (below), and either can face a copy of itself.
 *
 *   rdma_peer -d DEV -g GIDIDX [-p PORT] [-s LEN] [-m MTU] [-t SECONDS] [-a]          (server)
 *   rdma_peer -d DEV -g GIDIDX [-p PORT] [-s LEN] [-m MTU] [-t SECONDS] [-a] HOST     (client)
 *
 * One RC QP per process, one MR over [wbuf 2*LEN | rbuf LEN | src LEN | dst LEN | scratch |
 * atom 2*8 | result 3*8] (atom 8-byte aligned) with LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ |
 * REMOTE_ATOMIC. Each side fills rbuf and src with its own
 * pattern (seeded by the seed it announces), then, as requester:
 *   RDMA WRITE          src -> peer's wbuf[0, LEN)
 *   RDMA READ           peer's rbuf -> dst
 *   RDMA WRITE with imm src -> peer's wbuf[LEN, 2*LEN), immediate 0x5eed0000 | seed
 * and as responder it posts one receive for the immediate. RC ordering makes the WRITE land
 * before the WRITE-with-immediate completes, so the receive completion says both are in place.
 * Each side checks the bytes it owns and prints one line per check:
 *   CHECK read ok|FAIL        (dst holds the peer's pattern: our READ worked)
 *   CHECK write ok|FAIL       (wbuf[0, LEN) holds the peer's pattern: the peer's WRITE worked)
 *   CHECK write_imm ok|FAIL   (wbuf[LEN, 2*LEN), the RECV_RDMA_WITH_IMM completion, its
 *                              byte_len and immediate: the peer's WRITE with immediate worked)
 * With -a (both sides must give it) each side then, as requester, posts on the peer's atom words
 *   FETCH ADD  word 0 += atom_add(seed)                   (returns atom_init0(peer seed))
 *   COMP SWAP  word 1: atom_init1(peer seed) -> atom_swap(seed)      (matches: returns the former)
 *   COMP SWAP  word 1: atom_init1(peer seed) -> ~0               (no match: returns atom_swap(seed))
 * exchanges the 8-byte token "atomic" and prints
 *   CHECK fetch_add ok|FAIL         (its FETCH ADD completed as such and returned the original)
 *   CHECK cmp_swap ok|FAIL          (both COMP SWAPs completed as such and returned the originals)
 *   CHECK fetch_add_memory ok|FAIL  (its word 0 is atom_init0(seed) + atom_add(peer seed))
 *   CHECK cmp_swap_memory ok|FAIL   (its word 1 is atom_swap(peer seed))
 * Values are 64-bit in host order (the wire's AtomicETH / AtomicAckETH are big-endian).
 * Exit status 0 only when every work completion succeeded and every check passed.
 *
 * TCP exchange (port 18516 by default): each side sends a 128-byte NUL-padded text message
 *   "RDMAPEER1 <qpn %06x> <psn %06x> <gid 32 hex digits> <va %016x> <rkey %08x> <len %08x> <seed %04x>"
 * (client first, then the server), then after RTS each sends the 8-byte token "ready", and
 * after its own checks the 8-byte token "done", and waits for the peer's: no side tears its
 * QP down while the peer's READ may still need its responder.
 * QP attributes as ibv_rc_pingpong sets them (hop limit 1, min RNR timer 12, timeout 14,
 * retry_cnt 7, rnr_retry 7), with 4 outstanding RDMA READs either way.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define MSG_LEN 128
#define TOKEN_LEN 8
#define SCRATCH 64
#define IMM_BASE 0x5eed0000u

enum { WR_WRITE = 1, WR_READ = 2, WR_WRITE_IMM = 3, WR_RECV = 4, WR_FADD = 5, WR_CAS = 6, WR_CAS_MISS = 7 };

struct dest {
	uint32_t qpn, psn, rkey, len, seed;
	uint64_t va;
	union ibv_gid gid;
};

static struct {
	const char *dev, *host;
	int gid_idx, port, mtu, timeout_s, atomics;
	uint32_t len;
} opt = { NULL, NULL, -1, 18516, 1024, 30, 0, 10000 };

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "rdma_peer: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

/* Byte i of the pattern a side with this seed writes and serves. */
static uint8_t pattern(uint32_t seed, size_t i)
{
	return (uint8_t)(i * 131u + (i >> 8) * 7u + seed * 29u + 1u);
}

static void fill(uint8_t *p, uint32_t seed, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern(seed, i);
}

/* Index of the first byte that differs from the pattern, or -1. */
static long first_diff(const uint8_t *p, uint32_t seed, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern(seed, i))
			return (long)i;
	return -1;
}

/* The atomics' values: each crosses a 32-bit boundary, so a 32-bit or byte-swapped path shows. */
static uint64_t atom_init0(uint32_t seed) { return 0x11110000fffffff0ull + seed; }
static uint64_t atom_add(uint32_t seed) { return 0x0000000100000010ull + ((uint64_t)seed << 36); }
static uint64_t atom_init1(uint32_t seed) { return 0xc0c0000000000000ull | (uint64_t)seed << 16 | seed; }
static uint64_t atom_swap(uint32_t seed) { return 0x5a5a000000000000ull | (uint64_t)seed << 24 | seed; }

/* Offset of the atom words in the MR (8-byte aligned), then the three results. */
static size_t atom_off(size_t len) { return (5 * len + SCRATCH + 7) & ~(size_t)7; }

static enum ibv_mtu mtu_enum(int bytes)
{
	switch (bytes) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	default: die("invalid MTU %d (256, 512, 1024, 2048, 4096)", bytes);
	}
	return 0;
}

static void write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);

		if (w <= 0)
			die("TCP write: %s", w < 0 ? strerror(errno) : "closed");
		p += w;
		n -= (size_t)w;
	}
}

static void read_all(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);

		if (r <= 0)
			die("TCP read: %s", r < 0 ? strerror(errno) : "peer closed the connection");
		p += r;
		n -= (size_t)r;
	}
}

static void token(int fd, const char *mine)
{
	char out[TOKEN_LEN] = { 0 }, in[TOKEN_LEN + 1] = { 0 };

	strncpy(out, mine, TOKEN_LEN - 1);
	write_all(fd, out, TOKEN_LEN);
	read_all(fd, in, TOKEN_LEN);
	if (strcmp(in, mine))
		die("expected the peer's \"%s\", got \"%s\"", mine, in);
}

/* A TCP connection: accept one on the port (any address, IPv6 and IPv4), or connect to host. */
static int tcp_connect(void)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *t;
	char service[16];
	int fd = -1, one = 1;

	snprintf(service, sizeof service, "%d", opt.port);
	if (opt.host) {
		int rc = getaddrinfo(opt.host, service, &hints, &res);

		if (rc)
			die("%s: %s", opt.host, gai_strerror(rc));
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
	struct sockaddr_in6 any = { .sin6_family = AF_INET6, .sin6_port = htons(opt.port),
				    .sin6_addr = IN6ADDR_ANY_INIT };
	int zero = 0, lfd = socket(AF_INET6, SOCK_STREAM, 0);

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

static void send_dest(int fd, const struct dest *d)
{
	char msg[MSG_LEN] = { 0 }, gid[33];

	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", d->gid.raw[i]);
	snprintf(msg, sizeof msg, "RDMAPEER1 %06x %06x %s %016" PRIx64 " %08x %08x %04x",
		 d->qpn, d->psn, gid, d->va, d->rkey, d->len, d->seed);
	write_all(fd, msg, MSG_LEN);
}

static void recv_dest(int fd, struct dest *d)
{
	char msg[MSG_LEN + 1] = { 0 }, gid[33] = { 0 };

	read_all(fd, msg, MSG_LEN);
	if (sscanf(msg, "RDMAPEER1 %x %x %32s %" SCNx64 " %x %x %x", &d->qpn, &d->psn, gid,
		   &d->va, &d->rkey, &d->len, &d->seed) != 7 || strlen(gid) != 32)
		die("malformed peer message \"%.*s\"", MSG_LEN, msg);
	for (int i = 0; i < 16; i++) {
		unsigned int b;

		if (sscanf(gid + 2 * i, "%2x", &b) != 1)
			die("malformed GID %s", gid);
		d->gid.raw[i] = (uint8_t)b;
	}
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

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, const char *what)
{
	int rc = ibv_modify_qp(qp, a, mask);

	if (rc)
		die("modify QP to %s: %s", what, strerror(rc));
}

static void to_rtr_rts(struct ibv_qp *qp, const struct dest *me, const struct dest *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = mtu_enum(opt.mtu), .dest_qp_num = peer->qpn,
		.rq_psn = peer->psn, .max_dest_rd_atomic = 4, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = peer->gid, .sgid_index = (uint8_t)opt.gid_idx, .hop_limit = 1 } },
	};

	modify(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me->psn;
	a.max_rd_atomic = 4;
	modify(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC, "RTS");
}

static void post_rdma(struct ibv_qp *qp, struct ibv_mr *mr, uint64_t wr_id, enum ibv_wr_opcode op,
		      uint8_t *local, uint64_t remote, const struct dest *peer, uint32_t imm)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = opt.len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int rc;

	wr.wr.rdma.remote_addr = remote;
	wr.wr.rdma.rkey = peer->rkey;
	if (op == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = htobe32(imm);
	rc = ibv_post_send(qp, &wr, &bad);
	if (rc)
		die("ibv_post_send (wr_id %" PRIu64 "): %s", wr_id, strerror(rc));
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Polls until `want` completions arrived (the three sends and the one receive, or the three
 * atomics); returns how many failed. The receive's completion goes to imm_wc, each atomic's
 * opcode to opcodes[wr_id - WR_FADD]. */
static int wait_completions(struct ibv_cq *cq, int want, struct ibv_wc *imm_wc, int *opcodes)
{
	int done = 0, failed = 0;
	double deadline = now_s() + opt.timeout_s;

	while (done < want) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			die("ibv_poll_cq failed");
		if (n == 0) {
			if (now_s() > deadline)
				die("only %d of %d completions after %d s", done, want, opt.timeout_s);
			continue;
		}
		done++;
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "rdma_peer: wr_id %" PRIu64 " completed with %s (%d), vendor_err 0x%x\n",
				wc.wr_id, ibv_wc_status_str(wc.status), wc.status, wc.vendor_err);
			failed++;
		}
		if (wc.wr_id == WR_RECV)
			*imm_wc = wc;
		if (wc.wr_id >= WR_FADD && wc.wr_id <= WR_CAS_MISS)
			opcodes[wc.wr_id - WR_FADD] = wc.opcode;
	}
	return failed;
}

static int check(const char *name, int ok, const char *why)
{
	printf("CHECK %s %s%s%s\n", name, ok ? "ok" : "FAIL", ok ? "" : ": ", ok ? "" : why);
	return ok;
}

static int check_bytes(const char *name, const uint8_t *p, uint32_t seed)
{
	char why[96];
	long at = first_diff(p, seed, opt.len);

	snprintf(why, sizeof why, "byte %ld differs from the peer's pattern", at);
	return check(name, at < 0, why);
}

static int check_imm(const uint8_t *wbuf, const struct ibv_wc *wc, const struct dest *peer)
{
	char why[128];
	uint32_t imm = be32toh(wc->imm_data), want = IMM_BASE | peer->seed;

	if (wc->status != IBV_WC_SUCCESS || wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
	    !(wc->wc_flags & IBV_WC_WITH_IMM)) {
		snprintf(why, sizeof why, "receive completion status %d opcode %d flags 0x%x", wc->status,
			 wc->opcode, wc->wc_flags);
		return check("write_imm", 0, why);
	}
	if (wc->byte_len != opt.len || imm != want) {
		snprintf(why, sizeof why, "byte_len %u (want %u), immediate 0x%08x (want 0x%08x)",
			 wc->byte_len, opt.len, imm, want);
		return check("write_imm", 0, why);
	}
	return check_bytes("write_imm", wbuf + opt.len, peer->seed);
}

static void post_atomic(struct ibv_qp *qp, struct ibv_mr *mr, uint64_t wr_id, enum ibv_wr_opcode op,
			uint64_t *result, uint64_t remote, const struct dest *peer, uint64_t cmp_add,
			uint64_t swap)
{
	struct ibv_sge sge = { .addr = (uintptr_t)result, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int rc;

	wr.wr.atomic.remote_addr = remote;
	wr.wr.atomic.rkey = peer->rkey;
	wr.wr.atomic.compare_add = cmp_add;
	wr.wr.atomic.swap = swap;
	rc = ibv_post_send(qp, &wr, &bad);
	if (rc)
		die("ibv_post_send (wr_id %" PRIu64 "): %s", wr_id, strerror(rc));
}

static int check_u64(const char *name, const char *what, uint64_t got, uint64_t want)
{
	char why[128];

	snprintf(why, sizeof why, "%s 0x%016" PRIx64 " (want 0x%016" PRIx64 ")", what, got, want);
	return check(name, got == want, why);
}

/* The -a part: three atomics on the peer's atom words, then the checks of what they returned
 * and (after the "atomic" token) of this side's own words. */
static int atomics(int fd, struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, uint8_t *buf,
		   const struct dest *me, const struct dest *peer)
{
	volatile uint64_t *atom = (uint64_t *)(buf + atom_off(opt.len)), *res = atom + 2;
	uint64_t remote = peer->va + atom_off(peer->len);
	int opcodes[3] = { -1, -1, -1 }, ok;

	post_atomic(qp, mr, WR_FADD, IBV_WR_ATOMIC_FETCH_AND_ADD, (uint64_t *)&res[0], remote, peer,
		    atom_add(me->seed), 0);
	post_atomic(qp, mr, WR_CAS, IBV_WR_ATOMIC_CMP_AND_SWP, (uint64_t *)&res[1], remote + 8, peer,
		    atom_init1(peer->seed), atom_swap(me->seed));
	post_atomic(qp, mr, WR_CAS_MISS, IBV_WR_ATOMIC_CMP_AND_SWP, (uint64_t *)&res[2], remote + 8,
		    peer, atom_init1(peer->seed), ~0ull);
	ok = wait_completions(cq, 3, NULL, opcodes) == 0;
	if (opcodes[0] != IBV_WC_FETCH_ADD)
		ok &= check("fetch_add", 0, "no IBV_WC_FETCH_ADD completion");
	else
		ok &= check_u64("fetch_add", "returned", res[0], atom_init0(peer->seed));
	if (opcodes[1] != IBV_WC_COMP_SWAP || opcodes[2] != IBV_WC_COMP_SWAP)
		ok &= check("cmp_swap", 0, "no two IBV_WC_COMP_SWAP completions");
	else if (res[1] != atom_init1(peer->seed))
		ok &= check_u64("cmp_swap", "the matching one returned", res[1], atom_init1(peer->seed));
	else
		ok &= check_u64("cmp_swap", "the missing one returned", res[2], atom_swap(me->seed));
	token(fd, "atomic");
	ok &= check_u64("fetch_add_memory", "word 0 holds", atom[0], atom_init0(me->seed) + atom_add(peer->seed));
	ok &= check_u64("cmp_swap_memory", "word 1 holds", atom[1], atom_swap(peer->seed));
	return ok;
}

static void parse(int argc, char **argv)
{
	int c;

	while ((c = getopt(argc, argv, "d:g:p:s:m:t:a")) != -1) {
		switch (c) {
		case 'd': opt.dev = optarg; break;
		case 'g': opt.gid_idx = atoi(optarg); break;
		case 'p': opt.port = atoi(optarg); break;
		case 's': opt.len = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'm': opt.mtu = atoi(optarg); break;
		case 't': opt.timeout_s = atoi(optarg); break;
		case 'a': opt.atomics = 1; break;
		default: die("usage: rdma_peer -d DEV -g GIDIDX [-p PORT] [-s LEN] [-m MTU] [-t S] [-a] [HOST]");
		}
	}
	if (optind == argc - 1)
		opt.host = argv[optind];
	if (!opt.dev || opt.gid_idx < 0 || optind < argc - 1 || opt.len == 0 || opt.timeout_s <= 0)
		die("usage: rdma_peer -d DEV -g GIDIDX [-p PORT] [-s LEN] [-m MTU] [-t S] [-a] [HOST]");
	mtu_enum(opt.mtu);
}

int main(int argc, char **argv)
{
	struct dest me = { 0 }, peer = { 0 };
	struct ibv_wc imm_wc = { 0 };
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;

	parse(argc, argv);
	srand48(getpid() ^ time(NULL));
	size_t L = opt.len, total = atom_off(L) + 5 * 8;
	uint8_t *buf = aligned_alloc(4096, (total + 4095) / 4096 * 4096);
	if (!buf)
		die("out of memory");
	uint8_t *wbuf = buf, *rbuf = buf + 2 * L, *src = buf + 3 * L, *dst = buf + 4 * L;

	memset(buf, 0, total);
	me.seed = (uint32_t)(lrand48() & 0xfff) + 1;
	fill(rbuf, me.seed, L);
	fill(src, me.seed, L);
	((uint64_t *)(buf + atom_off(L)))[0] = atom_init0(me.seed);
	((uint64_t *)(buf + atom_off(L)))[1] = atom_init1(me.seed);

	struct ibv_context *ctx = open_dev();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, total, access) : NULL;
	struct ibv_cq *cq = mr ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq)
		die("PD, MR or CQ: %s", strerror(errno));
	struct ibv_qp_init_attr qia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	if (!qp)
		die("ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	modify(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");

	struct ibv_sge rsge = { .addr = (uintptr_t)(buf + 5 * L), .length = SCRATCH, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = WR_RECV, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(qp, &rwr, &rbad))
		die("ibv_post_recv failed");
	if (ibv_query_gid(ctx, 1, opt.gid_idx, &me.gid))
		die("can't read sgid of index %d", opt.gid_idx);
	me.qpn = qp->qp_num;
	me.psn = (uint32_t)lrand48() & 0xffffff;
	me.va = (uintptr_t)buf;
	me.rkey = mr->rkey;
	me.len = (uint32_t)L;

	int fd = tcp_connect();
	if (opt.host) {
		send_dest(fd, &me);
		recv_dest(fd, &peer);
	} else {
		recv_dest(fd, &peer);
		send_dest(fd, &me);
	}
	if (peer.len != L)
		die("the peer's length %u differs from ours (%zu)", peer.len, L);
	printf("local  QPN 0x%06x PSN 0x%06x seed 0x%04x\nremote QPN 0x%06x PSN 0x%06x seed 0x%04x\n",
	       me.qpn, me.psn, me.seed, peer.qpn, peer.psn, peer.seed);
	to_rtr_rts(qp, &me, &peer);
	token(fd, "ready");

	post_rdma(qp, mr, WR_WRITE, IBV_WR_RDMA_WRITE, src, peer.va, &peer, 0);
	post_rdma(qp, mr, WR_READ, IBV_WR_RDMA_READ, dst, peer.va + 2 * L, &peer, 0);
	post_rdma(qp, mr, WR_WRITE_IMM, IBV_WR_RDMA_WRITE_WITH_IMM, src, peer.va + L, &peer,
		  IMM_BASE | me.seed);
	int opcodes[3];
	int failed = wait_completions(cq, 4, &imm_wc, opcodes);
	int ok = failed == 0;

	ok &= check_bytes("read", dst, peer.seed);
	ok &= check_bytes("write", wbuf, peer.seed);
	ok &= check_imm(wbuf, &imm_wc, &peer);
	if (opt.atomics)
		ok &= atomics(fd, qp, cq, mr, buf, &me, &peer);
	token(fd, "done");
	close(fd);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	printf("rdma_peer: %s\n", ok ? "all checks passed" : "FAILED");
	return ok ? 0 : 1;
}
