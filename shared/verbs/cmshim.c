#include "cmshim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <netinet/in.h>

#if HEC_HAVE_CM

static struct {
	struct rdma_event_channel *(*create_event_channel)(void);
	void (*destroy_event_channel)(struct rdma_event_channel *);
	int (*create_id)(struct rdma_event_channel *, struct rdma_cm_id **, void *, enum rdma_port_space);
	int (*destroy_id)(struct rdma_cm_id *);
	int (*migrate_id)(struct rdma_cm_id *, struct rdma_event_channel *);
	int (*bind_addr)(struct rdma_cm_id *, struct sockaddr *);
	int (*listen)(struct rdma_cm_id *, int);
	int (*resolve_addr)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int);
	int (*resolve_route)(struct rdma_cm_id *, int);
	int (*get_cm_event)(struct rdma_event_channel *, struct rdma_cm_event **);
	int (*ack_cm_event)(struct rdma_cm_event *);
	int (*create_qp)(struct rdma_cm_id *, struct ibv_pd *, struct ibv_qp_init_attr *);
	void (*destroy_qp)(struct rdma_cm_id *);
	int (*connect)(struct rdma_cm_id *, struct rdma_conn_param *);
	int (*accept)(struct rdma_cm_id *, struct rdma_conn_param *);
	int (*reject)(struct rdma_cm_id *, const void *, uint8_t);
	int (*disconnect)(struct rdma_cm_id *);
	int (*set_option)(struct rdma_cm_id *, int, int, void *, size_t); // optional
	const char *(*event_str)(enum rdma_cm_event_type);
} cm;

static const char *cm_loaded;
static int cm_tried;

#define CMSYM(field, name) do { *(void **)&cm.field = dlsym(h, name); if (!cm.field) return "librdmacm.so.1 lacks " name; } while (0)

static const char *cm_load(void) {
	const char *why = hecv_load();
	if (why) {
		return why;
	}
	void *h = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		return "librdmacm.so.1 not found (install rdma-core's librdmacm1)";
	}
	CMSYM(create_event_channel, "rdma_create_event_channel");
	CMSYM(destroy_event_channel, "rdma_destroy_event_channel");
	CMSYM(create_id, "rdma_create_id");
	CMSYM(destroy_id, "rdma_destroy_id");
	CMSYM(migrate_id, "rdma_migrate_id");
	CMSYM(bind_addr, "rdma_bind_addr");
	CMSYM(listen, "rdma_listen");
	CMSYM(resolve_addr, "rdma_resolve_addr");
	CMSYM(resolve_route, "rdma_resolve_route");
	CMSYM(get_cm_event, "rdma_get_cm_event");
	CMSYM(ack_cm_event, "rdma_ack_cm_event");
	CMSYM(create_qp, "rdma_create_qp");
	*(void **)&cm.set_option = dlsym(h, "rdma_set_option");
	CMSYM(destroy_qp, "rdma_destroy_qp");
	CMSYM(connect, "rdma_connect");
	CMSYM(accept, "rdma_accept");
	CMSYM(reject, "rdma_reject");
	CMSYM(disconnect, "rdma_disconnect");
	CMSYM(event_str, "rdma_event_str");
	return NULL;
}

const char *hecv_cm_load(void) {
	if (!cm_tried) {
		cm_loaded = cm_load();
		cm_tried = 1;
	}
	return cm_loaded;
}

struct rdma_event_channel *hecv_cm_channel(int *fd) {
	struct rdma_event_channel *ch = cm.create_event_channel();
	if (!ch) {
		return NULL;
	}
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	*fd = ch->fd;
	return ch;
}

void hecv_cm_channel_close(struct rdma_event_channel *ch) { cm.destroy_event_channel(ch); }

struct rdma_cm_id *hecv_cm_id(struct rdma_event_channel *ch) {
	struct rdma_cm_id *id = NULL;
	if (cm.create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) {
		return NULL;
	}
	return id;
}

int hecv_cm_destroy_id(struct rdma_cm_id *id) { return cm.destroy_id(id) ? errno : 0; }
int hecv_cm_migrate(struct rdma_cm_id *id, struct rdma_event_channel *ch) { return cm.migrate_id(id, ch) ? errno : 0; }

static struct sockaddr_in sin4(uint32_t ip, uint16_t port) {
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = ip;
	a.sin_port = port;
	return a;
}

int hecv_cm_listen(struct rdma_cm_id *id, uint32_t ip, uint16_t port, int backlog) {
	struct sockaddr_in a = sin4(ip, port);
	if (cm.bind_addr(id, (struct sockaddr *)&a) != 0) {
		return errno;
	}
	return cm.listen(id, backlog) ? errno : 0;
}

int hecv_cm_resolve_addr(struct rdma_cm_id *id, uint32_t ip, uint16_t port, int timeout_ms) {
	struct sockaddr_in a = sin4(ip, port);
	return cm.resolve_addr(id, NULL, (struct sockaddr *)&a, timeout_ms) ? errno : 0;
}

int hecv_cm_resolve_route(struct rdma_cm_id *id, int timeout_ms) { return cm.resolve_route(id, timeout_ms) ? errno : 0; }

int hecv_cm_get_event(struct rdma_event_channel *ch, hecv_cm_event *out) {
	struct rdma_cm_event *e = NULL;
	if (cm.get_cm_event(ch, &e) != 0) {
		return errno;
	}
	out->id = e->id;
	out->listen_id = e->listen_id;
	out->event = e->event;
	out->status = e->status;
	out->private_len = 0;
	if ((e->event == RDMA_CM_EVENT_CONNECT_REQUEST || e->event == RDMA_CM_EVENT_ESTABLISHED ||
	     e->event == RDMA_CM_EVENT_REJECTED) && e->param.conn.private_data) {
		int n = e->param.conn.private_data_len;
		if (n > HEC_CM_PRIVATE_MAX) {
			n = HEC_CM_PRIVATE_MAX;
		}
		memcpy(out->private_data, e->param.conn.private_data, n);
		out->private_len = n;
	}
	cm.ack_cm_event(e);
	return 0;
}

int hecv_cm_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq, int depth, int max_inline) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = depth;
	a.cap.max_recv_wr = depth;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = max_inline;
	return cm.create_qp(id, pd, &a) ? errno : 0;
}

void hecv_cm_destroy_qp(struct rdma_cm_id *id) { cm.destroy_qp(id); }

static struct rdma_conn_param param(const void *priv, int len) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = priv;
	p.private_data_len = (uint8_t)len;
	// RDMA READs in flight each way: the RDMA handoff's agent reads a
	// large span as several (16: what common NICs take; rxe takes more).
	p.responder_resources = 16;
	p.initiator_depth = 16;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	return p;
}

// ackTimeout is the queue pair's local ACK timeout, 4.096 µs × 2^14 =
// 67 ms: how long a sender (or a reader, of its READ's responses) waits
// before it sends again what was lost. The connection manager's default
// follows the path's packet lifetime, seconds on some links; soft-RoCE
// in VMs loses packets under load, and each loss cost that much.
static void set_ack_timeout(struct rdma_cm_id *id) {
	if (cm.set_option) {
		uint8_t t = 14;
		cm.set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof t);
	}
}

int hecv_cm_connect(struct rdma_cm_id *id, const void *priv, int len) {
	set_ack_timeout(id);
	struct rdma_conn_param p = param(priv, len);
	return cm.connect(id, &p) ? errno : 0;
}

int hecv_cm_accept(struct rdma_cm_id *id, const void *priv, int len) {
	set_ack_timeout(id);
	struct rdma_conn_param p = param(priv, len);
	return cm.accept(id, &p) ? errno : 0;
}

int hecv_cm_reject(struct rdma_cm_id *id) { return cm.reject(id, NULL, 0) ? errno : 0; }
int hecv_cm_disconnect(struct rdma_cm_id *id) { return cm.disconnect(id) ? errno : 0; }
struct ibv_context *hecv_cm_verbs(struct rdma_cm_id *id) { return id->verbs; }
struct ibv_qp *hecv_cm_qp(struct rdma_cm_id *id) { return id->qp; }
uint8_t hecv_cm_port(struct rdma_cm_id *id) { return id->port_num; }
const char *hecv_cm_event_str(int event) { return cm.event_str((enum rdma_cm_event_type)event); }

#else

const char *hecv_cm_load(void) { return "built without librdmacm's headers (install librdmacm-dev and build again)"; }
struct rdma_event_channel *hecv_cm_channel(int *fd) { errno = ENOSYS; return NULL; }
void hecv_cm_channel_close(struct rdma_event_channel *ch) {}
struct rdma_cm_id *hecv_cm_id(struct rdma_event_channel *ch) { errno = ENOSYS; return NULL; }
int hecv_cm_destroy_id(struct rdma_cm_id *id) { return ENOSYS; }
int hecv_cm_migrate(struct rdma_cm_id *id, struct rdma_event_channel *ch) { return ENOSYS; }
int hecv_cm_listen(struct rdma_cm_id *id, uint32_t ip, uint16_t port, int backlog) { return ENOSYS; }
int hecv_cm_resolve_addr(struct rdma_cm_id *id, uint32_t ip, uint16_t port, int timeout_ms) { return ENOSYS; }
int hecv_cm_resolve_route(struct rdma_cm_id *id, int timeout_ms) { return ENOSYS; }
int hecv_cm_get_event(struct rdma_event_channel *ch, hecv_cm_event *out) { return ENOSYS; }
int hecv_cm_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq, int depth, int max_inline) { return ENOSYS; }
void hecv_cm_destroy_qp(struct rdma_cm_id *id) {}
int hecv_cm_connect(struct rdma_cm_id *id, const void *priv, int len) { return ENOSYS; }
int hecv_cm_accept(struct rdma_cm_id *id, const void *priv, int len) { return ENOSYS; }
int hecv_cm_reject(struct rdma_cm_id *id) { return ENOSYS; }
int hecv_cm_disconnect(struct rdma_cm_id *id) { return ENOSYS; }
struct ibv_context *hecv_cm_verbs(struct rdma_cm_id *id) { return NULL; }
struct ibv_qp *hecv_cm_qp(struct rdma_cm_id *id) { return NULL; }
uint8_t hecv_cm_port(struct rdma_cm_id *id) { return 0; }
const char *hecv_cm_event_str(int event) { return "unknown"; }

#endif
