// The C side of package verbs: libibverbs, opened with dlopen when first
// used, so that hecd neither needs it to build (without its headers the
// shim only says so) nor to start (without the library, Open says so).
#ifndef HEC_VERBS_SHIM_H
#define HEC_VERBS_SHIM_H

#include <stdint.h>
#include <stddef.h>

#if __has_include(<infiniband/verbs.h>)
#define HEC_HAVE_VERBS 1
#include <infiniband/verbs.h>
#else
#define HEC_HAVE_VERBS 0
struct ibv_context;
struct ibv_pd;
struct ibv_mr;
struct ibv_cq;
struct ibv_qp;
#endif

// hec_wc is one completion, as Go reads it.
typedef struct {
	uint64_t id;
	uint32_t status;   // enum ibv_wc_status: 0 success
	uint32_t opcode;   // enum ibv_wc_opcode
	uint32_t bytes;
	uint32_t imm;
	uint32_t flags;    // IBV_WC_WITH_IMM
	uint32_t pad;
} hec_wc;

// hec_load opens libibverbs; it returns NULL or why not (a static string).
const char *hec_load(void);

// hec_open opens the device named (the first when name is empty); errno
// says why not.
struct ibv_context *hec_open(const char *name, char *got, size_t gotlen);
int hec_close(struct ibv_context *c);
struct ibv_pd *hec_alloc_pd(struct ibv_context *c);
int hec_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *hec_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
int hec_dereg_mr(struct ibv_mr *mr);
uint32_t hec_mr_lkey(struct ibv_mr *mr);
uint32_t hec_mr_rkey(struct ibv_mr *mr);
// hec_create_cq makes a completion queue with a completion channel of
// its own (its fd non-blocking, in *fd): a poller that found nothing arms
// it (hec_cq_arm) and sleeps in poll(2) until the next completion.
struct ibv_cq *hec_create_cq(struct ibv_context *c, int depth, int *fd);
int hec_destroy_cq(struct ibv_cq *cq);
int hec_cq_arm(struct ibv_cq *cq);
// hec_cq_events takes (and acknowledges) the channel's events: how many.
int hec_cq_events(struct ibv_cq *cq);
struct ibv_qp *hec_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth, int max_inline);
int hec_destroy_qp(struct ibv_qp *qp);
uint32_t hec_qp_num(struct ibv_qp *qp);
int hec_query_gid(struct ibv_context *c, int port, int index, uint8_t gid[16]);
int hec_port_active_mtu(struct ibv_context *c, int port);
int hec_qp_init(struct ibv_qp *qp, int port);
int hec_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t remote_qpn, uint32_t remote_psn, const uint8_t gid[16], int sgid_index);
int hec_qp_rts(struct ibv_qp *qp, uint32_t psn);
int hec_post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey);
// op: 0 send, 1 RDMA write, 2 RDMA read, 3 write with immediate.
int hec_post_send(struct ibv_qp *qp, int op, uint64_t id, void *addr, uint32_t len, uint32_t lkey,
	uint64_t raddr, uint32_t rkey, uint32_t imm, int signaled, int inline_data);
int hec_poll_cq(struct ibv_cq *cq, hec_wc *out, int max);
const char *hec_wc_status_str(uint32_t status);

#endif
