#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#if HEC_HAVE_VERBS

// The library's functions, found with dlsym. The data path (post_send,
// post_recv, poll_cq) goes through the device's ops as verbs.h's inline
// functions do: no symbol needed.
static struct {
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
	int (*destroy_cq)(struct ibv_cq *);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*destroy_qp)(struct ibv_qp *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
	const char *(*wc_status_str)(enum ibv_wc_status);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *);
	int (*destroy_comp_channel)(struct ibv_comp_channel *);
	int (*get_cq_event)(struct ibv_comp_channel *, struct ibv_cq **, void **);
	void (*ack_cq_events)(struct ibv_cq *, unsigned int);
} lib;

static const char *loaded;
static int tried;

#define SYM(field, name) do { *(void **)&lib.field = dlsym(h, name); if (!lib.field) return "libibverbs.so.1 lacks " name; } while (0)

static const char *load(void) {
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		return "libibverbs.so.1 not found (install rdma-core's libibverbs1 and ibverbs-providers)";
	}
	SYM(get_device_list, "ibv_get_device_list");
	SYM(free_device_list, "ibv_free_device_list");
	SYM(get_device_name, "ibv_get_device_name");
	SYM(open_device, "ibv_open_device");
	SYM(close_device, "ibv_close_device");
	SYM(alloc_pd, "ibv_alloc_pd");
	SYM(dealloc_pd, "ibv_dealloc_pd");
	SYM(reg_mr, "ibv_reg_mr");
	SYM(dereg_mr, "ibv_dereg_mr");
	SYM(create_cq, "ibv_create_cq");
	SYM(destroy_cq, "ibv_destroy_cq");
	SYM(create_qp, "ibv_create_qp");
	SYM(destroy_qp, "ibv_destroy_qp");
	SYM(modify_qp, "ibv_modify_qp");
	SYM(query_gid, "ibv_query_gid");
	SYM(query_port, "ibv_query_port");
	SYM(wc_status_str, "ibv_wc_status_str");
	SYM(create_comp_channel, "ibv_create_comp_channel");
	SYM(destroy_comp_channel, "ibv_destroy_comp_channel");
	SYM(get_cq_event, "ibv_get_cq_event");
	SYM(ack_cq_events, "ibv_ack_cq_events");
	return NULL;
}

const char *hecv_load(void) {
	if (!tried) {
		loaded = load();
		tried = 1;
	}
	return loaded;
}

struct ibv_context *hecv_open(const char *name, char *got, size_t gotlen) {
	int n = 0;
	struct ibv_device **list = lib.get_device_list(&n);
	if (!list) {
		return NULL;
	}
	struct ibv_context *c = NULL;
	errno = ENODEV;
	for (int i = 0; i < n; i++) {
		const char *dn = lib.get_device_name(list[i]);
		if (name[0] == 0 || strcmp(dn, name) == 0) {
			strncpy(got, dn, gotlen - 1);
			got[gotlen - 1] = 0;
			c = lib.open_device(list[i]);
			break;
		}
	}
	int saved = errno;
	lib.free_device_list(list);
	errno = saved;
	return c;
}

int hecv_close(struct ibv_context *c) { return lib.close_device(c); }
struct ibv_pd *hecv_alloc_pd(struct ibv_context *c) { return lib.alloc_pd(c); }
int hecv_dealloc_pd(struct ibv_pd *pd) { return lib.dealloc_pd(pd); }
struct ibv_mr *hecv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) { return lib.reg_mr(pd, addr, len, access); }
int hecv_dereg_mr(struct ibv_mr *mr) { return lib.dereg_mr(mr); }
uint32_t hecv_mr_lkey(struct ibv_mr *mr) { return mr->lkey; }
uint32_t hecv_mr_rkey(struct ibv_mr *mr) { return mr->rkey; }
struct ibv_cq *hecv_create_cq(struct ibv_context *c, int depth, int *fd) {
	struct ibv_comp_channel *ch = lib.create_comp_channel(c);
	if (!ch) {
		return NULL;
	}
	int fl = fcntl(ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int saved = errno;
		lib.destroy_comp_channel(ch);
		errno = saved;
		return NULL;
	}
	struct ibv_cq *cq = lib.create_cq(c, depth, NULL, ch, 0);
	if (!cq) {
		int saved = errno;
		lib.destroy_comp_channel(ch);
		errno = saved;
		return NULL;
	}
	*fd = ch->fd;
	return cq;
}

int hecv_destroy_cq(struct ibv_cq *cq) {
	hecv_cq_events(cq); // a queue with events not acknowledged cannot go
	struct ibv_comp_channel *ch = cq->channel;
	int rc = lib.destroy_cq(cq);
	if (rc == 0 && ch) {
		lib.destroy_comp_channel(ch);
	}
	return rc;
}

int hecv_cq_arm(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

int hecv_cq_events(struct ibv_cq *cq) {
	int n = 0;
	struct ibv_cq *ev;
	void *ctx;
	while (cq->channel && lib.get_cq_event(cq->channel, &ev, &ctx) == 0) {
		lib.ack_cq_events(ev, 1);
		n++;
	}
	return n;
}

struct ibv_qp *hecv_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth, int max_inline) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	a.cap.max_send_wr = depth;
	a.cap.max_recv_wr = depth;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = max_inline;
	return lib.create_qp(pd, &a);
}

int hecv_destroy_qp(struct ibv_qp *qp) { return lib.destroy_qp(qp); }
uint32_t hecv_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

int hecv_query_gid(struct ibv_context *c, int port, int index, uint8_t gid[16]) {
	union ibv_gid g;
	int rc = lib.query_gid(c, (uint8_t)port, index, &g);
	if (rc == 0) {
		memcpy(gid, g.raw, 16);
	}
	return rc;
}

int hecv_port_active_mtu(struct ibv_context *c, int port) {
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	if (lib.query_port(c, (uint8_t)port, &a) != 0) {
		return -1;
	}
	return (int)a.active_mtu;
}

int hecv_qp_init(struct ibv_qp *qp, int port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	return lib.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int hecv_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t remote_qpn, uint32_t remote_psn, const uint8_t gid[16], int sgid_index) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)mtu;
	a.dest_qp_num = remote_qpn;
	a.rq_psn = remote_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = (uint8_t)port;
	return lib.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int hecv_qp_rts(struct ibv_qp *qp, uint32_t psn) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 1;
	return lib.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int hecv_post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

int hecv_post_send(struct ibv_qp *qp, int op, uint64_t id, void *addr, uint32_t len, uint32_t lkey,
	uint64_t raddr, uint32_t rkey, uint32_t imm, int signaled, int inline_data) {
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = len ? 1 : 0;
	switch (op) {
	case 0: wr.opcode = IBV_WR_SEND; break;
	case 1: wr.opcode = IBV_WR_RDMA_WRITE; break;
	case 2: wr.opcode = IBV_WR_RDMA_READ; break;
	case 3: wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM; wr.imm_data = imm; break;
	default: return EINVAL;
	}
	if (op != 0) {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	wr.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) | (inline_data ? IBV_SEND_INLINE : 0);
	return ibv_post_send(qp, &wr, &bad);
}

int hecv_poll_cq(struct ibv_cq *cq, hecv_wc *out, int max) {
	struct ibv_wc wc[16];
	if (max > 16) {
		max = 16;
	}
	int n = ibv_poll_cq(cq, max, wc);
	for (int i = 0; i < n; i++) {
		out[i].id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].bytes = wc[i].byte_len;
		out[i].imm = wc[i].imm_data;
		out[i].flags = wc[i].wc_flags;
	}
	return n;
}

const char *hecv_wc_status_str(uint32_t status) { return lib.wc_status_str((enum ibv_wc_status)status); }

#else // no <infiniband/verbs.h> at build time

const char *hecv_load(void) { return "built without libibverbs' headers (install libibverbs-dev and build again)"; }
struct ibv_context *hecv_open(const char *name, char *got, size_t gotlen) { errno = ENOSYS; return NULL; }
int hecv_close(struct ibv_context *c) { return ENOSYS; }
struct ibv_pd *hecv_alloc_pd(struct ibv_context *c) { errno = ENOSYS; return NULL; }
int hecv_dealloc_pd(struct ibv_pd *pd) { return ENOSYS; }
struct ibv_mr *hecv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) { errno = ENOSYS; return NULL; }
int hecv_dereg_mr(struct ibv_mr *mr) { return ENOSYS; }
uint32_t hecv_mr_lkey(struct ibv_mr *mr) { return 0; }
uint32_t hecv_mr_rkey(struct ibv_mr *mr) { return 0; }
struct ibv_cq *hecv_create_cq(struct ibv_context *c, int depth, int *fd) { errno = ENOSYS; return NULL; }
int hecv_destroy_cq(struct ibv_cq *cq) { return ENOSYS; }
int hecv_cq_arm(struct ibv_cq *cq) { return ENOSYS; }
int hecv_cq_events(struct ibv_cq *cq) { return 0; }
struct ibv_qp *hecv_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth, int max_inline) { errno = ENOSYS; return NULL; }
int hecv_destroy_qp(struct ibv_qp *qp) { return ENOSYS; }
uint32_t hecv_qp_num(struct ibv_qp *qp) { return 0; }
int hecv_query_gid(struct ibv_context *c, int port, int index, uint8_t gid[16]) { return ENOSYS; }
int hecv_port_active_mtu(struct ibv_context *c, int port) { return -1; }
int hecv_qp_init(struct ibv_qp *qp, int port) { return ENOSYS; }
int hecv_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t remote_qpn, uint32_t remote_psn, const uint8_t gid[16], int sgid_index) { return ENOSYS; }
int hecv_qp_rts(struct ibv_qp *qp, uint32_t psn) { return ENOSYS; }
int hecv_post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey) { return ENOSYS; }
int hecv_post_send(struct ibv_qp *qp, int op, uint64_t id, void *addr, uint32_t len, uint32_t lkey,
	uint64_t raddr, uint32_t rkey, uint32_t imm, int signaled, int inline_data) { return ENOSYS; }
int hecv_poll_cq(struct ibv_cq *cq, hecv_wc *out, int max) { return -ENOSYS; }
const char *hecv_wc_status_str(uint32_t status) { return "unknown"; }

#endif
