// The RDMA connection manager (librdmacm), opened with dlopen as
// libibverbs is (shim.h).
#ifndef HEC_CM_SHIM_H
#define HEC_CM_SHIM_H

#include "shim.h"

#if HEC_HAVE_VERBS && __has_include(<rdma/rdma_cma.h>)
#define HEC_HAVE_CM 1
#include <rdma/rdma_cma.h>
#else
#define HEC_HAVE_CM 0
struct rdma_event_channel;
struct rdma_cm_id;
#endif

#define HEC_CM_PRIVATE_MAX 196

// hecv_cm_event is one connection-manager event, copied out and acked.
typedef struct {
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	int event;  // enum rdma_cm_event_type
	int status;
	int private_len;
	uint8_t private_data[HEC_CM_PRIVATE_MAX];
} hecv_cm_event;

const char *hecv_cm_load(void);
// hecv_cm_channel makes a non-blocking event channel; *fd is its file.
struct rdma_event_channel *hecv_cm_channel(int *fd);
void hecv_cm_channel_close(struct rdma_event_channel *ch);
struct rdma_cm_id *hecv_cm_id(struct rdma_event_channel *ch);
int hecv_cm_destroy_id(struct rdma_cm_id *id);
int hecv_cm_migrate(struct rdma_cm_id *id, struct rdma_event_channel *ch);
// Addresses are IPv4, network order.
int hecv_cm_listen(struct rdma_cm_id *id, uint32_t ip, uint16_t port, int backlog);
int hecv_cm_resolve_addr(struct rdma_cm_id *id, uint32_t ip, uint16_t port, int timeout_ms);
int hecv_cm_resolve_route(struct rdma_cm_id *id, int timeout_ms);
// hecv_cm_get_event returns 0 with an event, else an errno (EAGAIN: none yet).
int hecv_cm_get_event(struct rdma_event_channel *ch, hecv_cm_event *out);
int hecv_cm_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq, int depth, int max_inline);
void hecv_cm_destroy_qp(struct rdma_cm_id *id);
int hecv_cm_connect(struct rdma_cm_id *id, const void *priv, int len);
int hecv_cm_accept(struct rdma_cm_id *id, const void *priv, int len);
int hecv_cm_reject(struct rdma_cm_id *id);
int hecv_cm_disconnect(struct rdma_cm_id *id);
struct ibv_context *hecv_cm_verbs(struct rdma_cm_id *id);
struct ibv_qp *hecv_cm_qp(struct rdma_cm_id *id);
uint8_t hecv_cm_port(struct rdma_cm_id *id);
const char *hecv_cm_event_str(int event);

#endif
