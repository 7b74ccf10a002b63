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

// hecv_wc is one completion, as Go reads it.
typedef struct {
	uint64_t id;
	uint32_t status;   // enum ibv_wc_status: 0 success
	uint32_t opcode;   // enum ibv_wc_opcode
	uint32_t bytes;
	uint32_t imm;
	uint32_t flags;    // IBV_WC_WITH_IMM
	uint32_t pad;
} hecv_wc;

// hecv_load opens libibverbs; it returns NULL or why not (a static string).
const char *hecv_load(void);

// hecv_open opens the device named (the first when name is empty); errno
// says why not.
struct ibv_context *hecv_open(const char *name, char *got, size_t gotlen);
int hecv_close(struct ibv_context *c);
struct ibv_pd *hecv_alloc_pd(struct ibv_context *c);
int hecv_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *hecv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
int hecv_dereg_mr(struct ibv_mr *mr);
uint32_t hecv_mr_lkey(struct ibv_mr *mr);
uint32_t hecv_mr_rkey(struct ibv_mr *mr);
// hecv_create_cq makes a completion queue with a completion channel of
// its own (its fd non-blocking, in *fd): a poller that found nothing arms
// it (hecv_cq_arm) and sleeps in poll(2) until the next completion.
struct ibv_cq *hecv_create_cq(struct ibv_context *c, int depth, int *fd);
int hecv_destroy_cq(struct ibv_cq *cq);
int hecv_cq_arm(struct ibv_cq *cq);
// hecv_cq_events takes (and acknowledges) the channel's events: how many.
int hecv_cq_events(struct ibv_cq *cq);
struct ibv_qp *hecv_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth, int max_inline);
int hecv_destroy_qp(struct ibv_qp *qp);
uint32_t hecv_qp_num(struct ibv_qp *qp);
int hecv_query_gid(struct ibv_context *c, int port, int index, uint8_t gid[16]);
int hecv_port_active_mtu(struct ibv_context *c, int port);
int hecv_qp_init(struct ibv_qp *qp, int port);
int hecv_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t remote_qpn, uint32_t remote_psn, const uint8_t gid[16], int sgid_index);
int hecv_qp_rts(struct ibv_qp *qp, uint32_t psn);
int hecv_post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey);
// op: 0 send, 1 RDMA write, 2 RDMA read, 3 write with immediate.
int hecv_post_send(struct ibv_qp *qp, int op, uint64_t id, void *addr, uint32_t len, uint32_t lkey,
	uint64_t raddr, uint32_t rkey, uint32_t imm, int signaled, int inline_data);
int hecv_poll_cq(struct ibv_cq *cq, hecv_wc *out, int max);
const char *hecv_wc_status_str(uint32_t status);

#endif
