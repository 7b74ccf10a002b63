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

// hec_cm_event is one connection-manager event, copied out and acked.
typedef struct {
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	int event;  // enum rdma_cm_event_type
	int status;
	int private_len;
	uint8_t private_data[HEC_CM_PRIVATE_MAX];
} hec_cm_event;

const char *hec_cm_load(void);
// hec_cm_channel makes a non-blocking event channel; *fd is its file.
struct rdma_event_channel *hec_cm_channel(int *fd);
void hec_cm_channel_close(struct rdma_event_channel *ch);
struct rdma_cm_id *hec_cm_id(struct rdma_event_channel *ch);
int hec_cm_destroy_id(struct rdma_cm_id *id);
int hec_cm_migrate(struct rdma_cm_id *id, struct rdma_event_channel *ch);
// Addresses are IPv4, network order.
int hec_cm_listen(struct rdma_cm_id *id, uint32_t ip, uint16_t port, int backlog);
int hec_cm_resolve_addr(struct rdma_cm_id *id, uint32_t ip, uint16_t port, int timeout_ms);
int hec_cm_resolve_route(struct rdma_cm_id *id, int timeout_ms);
// hec_cm_get_event returns 0 with an event, else an errno (EAGAIN: none yet).
int hec_cm_get_event(struct rdma_event_channel *ch, hec_cm_event *out);
int hec_cm_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq, int depth, int max_inline);
void hec_cm_destroy_qp(struct rdma_cm_id *id);
int hec_cm_connect(struct rdma_cm_id *id, const void *priv, int len);
int hec_cm_accept(struct rdma_cm_id *id, const void *priv, int len);
int hec_cm_reject(struct rdma_cm_id *id);
int hec_cm_disconnect(struct rdma_cm_id *id);
struct ibv_context *hec_cm_verbs(struct rdma_cm_id *id);
struct ibv_qp *hec_cm_qp(struct rdma_cm_id *id);
uint8_t hec_cm_port(struct rdma_cm_id *id);
const char *hec_cm_event_str(int event);

#endif
