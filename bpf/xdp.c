//go:build ignore

// The agent's XDP program: parse, classify, count, filter, sample, and
// answer hot UDP GETs from a BPF map. See doc.go for the contract with the
// loader; the structs here are mirrored in Go by bpf2go (-type).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual MIT/GPL";

enum hec_class {
	CLASS_RESP = 0,
	CLASS_UDPGET = 1,
	CLASS_PEER = 2,
	CLASS_MGMT = 3,
	CLASS_OTHER = 4,
	NCLASS = 5,
};

enum hec_drop {
	DROP_ACL = 0,       // source not allowed on a service port
	DROP_MALFORMED = 1, // a length field points past the packet
	NDROP = 2,
};

enum hec_verdict {
	VERDICT_PASS = 0,
	VERDICT_DROP = 1,
	VERDICT_ANSWER = 2,
};

enum hec_acl_action {
	ACL_ALLOW = 1,
	ACL_DENY = 2,
};

#define SNAP_MAX 256
#define HOT_SLOTS 4096
#define HOT_KEY_MAX 60
#define HOT_BODY_MAX 1024
#define VLAN_MAX 2
#define IPV6_EXT_MAX 6

// config is the loader's settings (one entry).
struct config {
	__u16 port[4];           // service ports by class (RESP, UDP GET, peer, mgmt); 0: none
	__u32 acl_default_deny;  // 1: a source not in the allow-list is dropped on service ports
	__u32 sample_every;      // sample one packet in this many; 0: off
	__u32 snaplen;           // bytes of each sampled packet (<= SNAP_MAX)
	__u32 hot_on;            // answer hot GETs
	__u32 sample_classes;    // bit per class to sample; 0: every class
};

struct class_stats {
	__u64 packets;
	__u64 bytes;
	__u64 passed;
	__u64 answered;
	__u64 dropped[NDROP];
	__u64 hot_miss;    // UDP GETs passed up: not held, expired, or being replaced
	__u64 hot_torn;    // of those, the entry changed while read
};

struct acl4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct acl6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

// talker is one bucket of the per-CPU talker table: the source that holds
// it and its traffic. A source whose bucket is held by another wears the
// holder's packet count down by one per packet and takes the bucket when
// it reaches zero (a Misra-Gries summary per bucket): a heavy source keeps
// its bucket, and a count is exact while the source has it to itself.
struct talker {
	__u8 addr[16]; // IPv4 as ::ffff:a.b.c.d
	__u64 packets;
	__u64 bytes;
};

struct sample {
	__u64 ts_ns;  // bpf_ktime_get_ns
	__u32 len;    // the packet's length
	__u32 caplen; // bytes in data
	__u32 ifindex;
	__u8 class;
	__u8 verdict;
	__u16 pad;
	__u8 data[SNAP_MAX];
};

// Referenced so that its type reaches BTF and bpf2go.
const struct sample *unused_sample __attribute__((unused));

struct hot_key {
	__u8 b[HOT_KEY_MAX]; // zero-padded
	__u32 len;
};

// A key may sit in one of two slots, chosen by its hash (hot.go has the
// same function): hot_hash over the key's words (little-endian, the last
// zero-padded), then its length.
static __always_inline __u64 hot_hash(struct hot_key *k)
{
	__u64 *w = (__u64 *)k->b;
	__u64 h = 0x9e3779b97f4a7c15ULL;
#pragma unroll
	for (int i = 0; i < 8; i++) {
		if (i * 8 < k->len) {
			h ^= w[i];
			h *= 0xff51afd7ed558ccdULL;
			h ^= h >> 29;
		}
	}
	h ^= k->len;
	h *= 0xff51afd7ed558ccdULL;
	return h ^ (h >> 32);
}

// hot_slot is one held key, written by the agent through the mmapped
// array under a sequence count: odd while being written or invalid.
struct hot_slot {
	__u64 seq;
	__u32 body_len; // bytes of body, the reply after the 8-byte frame header
	__u32 body_sum; // the body's 16-bit words summed (native order, zero-padded), for the UDP checksum
	__u64 version;
	__u64 expires_ns; // CLOCK_MONOTONIC; 0: none
	struct hot_key key;
	__u8 body[HOT_BODY_MAX]; // zero-padded to 8 bytes
};

struct hot_body {
	__u64 w[HOT_BODY_MAX / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} hec_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NCLASS);
	__type(key, __u32);
	__type(value, struct class_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hec_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 16384);
	__type(key, struct acl4_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hec_acl4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 16384);
	__type(key, struct acl6_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hec_acl6 SEC(".maps");

#define TALKER_BUCKETS 1024

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TALKER_BUCKETS);
	__type(key, __u32);
	__type(value, struct talker);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hec_talkers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} hec_samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hec_sample_count SEC(".maps");

// A sample is put together here, then copied to the ring buffer once the
// verdict is known (bpf_ringbuf_output): no reservation held across the
// program, which older verifiers (6.1) cannot follow.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample);
} hec_sample_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HOT_SLOTS);
	__type(key, __u32);
	__type(value, struct hot_slot);
	__uint(map_flags, BPF_F_MMAPABLE);
} hec_hot_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HOT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} hec_hot_hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hot_body);
} hec_hot_scratch SEC(".maps");

// pkt is what parsing found.
struct pkt {
	__u8 src[16];       // IPv4 as ::ffff:a.b.c.d
	__u32 l3off, l4off; // offsets of the IP and L4 headers
	__u32 l4len;        // bytes of L4 header and payload the IP header claims
	__u16 sport, dport;
	__u8 proto;         // L4 protocol (0: none)
	__u8 v6;
	__u8 frag;          // a first fragment: ports, but not the whole datagram
	__u8 simple;        // no IP options or extension headers
	__u32 len;          // the frame's length
};

static __always_inline int parse_l4(void *data, void *end, struct pkt *p)
{
	if (p->proto == IPPROTO_UDP) {
		struct udphdr *uh = data + p->l4off;
		if ((void *)(uh + 1) > end)
			return p->frag ? 0 : -1;
		__u32 ulen = bpf_ntohs(uh->len);
		if (!p->frag && (ulen < sizeof(*uh) || ulen > p->l4len))
			return -1;
		if (!p->frag)
			p->l4len = ulen;
		p->sport = bpf_ntohs(uh->source);
		p->dport = bpf_ntohs(uh->dest);
	} else if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = data + p->l4off;
		if ((void *)(th + 1) > end)
			return p->frag ? 0 : -1;
		__u32 doff = th->doff * 4;
		if (doff < sizeof(*th) || (!p->frag && doff > p->l4len))
			return -1;
		p->sport = bpf_ntohs(th->source);
		p->dport = bpf_ntohs(th->dest);
	}
	return 0;
}

// parse fills p; it returns -1 for a packet whose headers lie about their
// lengths (dropped), 0 otherwise (p->proto 0 when there is no L4 header
// to read: not IP, a later fragment, an unknown extension).
static __always_inline int parse(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 pktlen = end - data;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 0;
	__u16 proto = eth->h_proto;
	__u32 off = sizeof(*eth);
#pragma unroll
	for (int i = 0; i < VLAN_MAX; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		__u16 *tag = data + off;
		if ((void *)(tag + 2) > end)
			return 0;
		proto = tag[1];
		off += 4;
	}
	p->l3off = off;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ih = data + off;
		if ((void *)(ih + 1) > end)
			return -1;
		__u32 ihl = ih->ihl * 4;
		__u32 tot = bpf_ntohs(ih->tot_len);
		if (ihl < sizeof(*ih) || tot < ihl || off + tot > pktlen)
			return -1;
		p->src[10] = 0xff;
		p->src[11] = 0xff;
		__builtin_memcpy(&p->src[12], &ih->saddr, 4);
		__u16 frag = bpf_ntohs(ih->frag_off);
		if (frag & 0x1fff)
			return 0; // a later fragment: no ports
		p->frag = (frag & 0x2000) != 0;
		p->simple = ihl == sizeof(*ih);
		p->l4off = off + ihl;
		p->l4len = tot - ihl;
		p->proto = ih->protocol;
		return parse_l4(data, end, p);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ih = data + off;
		if ((void *)(ih + 1) > end)
			return -1;
		__u32 plen = bpf_ntohs(ih->payload_len);
		if (off + sizeof(*ih) + plen > pktlen)
			return -1;
		__builtin_memcpy(p->src, &ih->saddr, 16);
		__u8 next = ih->nexthdr;
		__u32 l4 = off + sizeof(*ih);
		__u32 left = plen;
		p->simple = 1;
#pragma unroll
		for (int i = 0; i < IPV6_EXT_MAX; i++) {
			__u32 hlen;
			if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS ||
			    next == IPPROTO_AH || next == IPPROTO_FRAGMENT) {
				__u8 *h = data + (l4 & 0xffff);
				if ((void *)(h + 8) > end)
					return -1;
				if (next == IPPROTO_FRAGMENT) {
					hlen = 8;
					__u16 fo = bpf_ntohs(*(__u16 *)(h + 2));
					if (fo & 0xfff8)
						return 0; // a later fragment
					p->frag = fo & 1;
				} else if (next == IPPROTO_AH) {
					hlen = ((__u32)h[1] + 2) * 4;
				} else {
					hlen = ((__u32)h[1] + 1) * 8;
				}
				if (hlen > left)
					return -1;
				p->simple = 0;
				next = h[0];
				l4 += hlen;
				left -= hlen;
				continue;
			}
			break;
		}
		if (next != IPPROTO_UDP && next != IPPROTO_TCP)
			return 0; // ESP, no next header, too many extensions, other protocols
		p->v6 = 1;
		p->l4off = l4;
		p->l4len = left;
		p->proto = next;
		return parse_l4(data, end, p);
	}
	return 0;
}

static __always_inline __u32 classify(struct config *cfg, struct pkt *p, int *service)
{
	*service = 0;
	if (!p->proto)
		return CLASS_OTHER;
#pragma unroll
	for (int c = 0; c < 4; c++) {
		__u16 port = cfg->port[c];
		if (!port)
			continue;
		if (c == CLASS_UDPGET && p->proto != IPPROTO_UDP)
			continue;
		if (p->dport == port) {
			*service = 1;
			return c;
		}
		if (p->sport == port)
			return c; // a reply to one of the agent's own connections
	}
	return CLASS_OTHER;
}

static __always_inline int acl_denies(struct config *cfg, struct pkt *p)
{
	__u32 *act;
	if (!p->v6) {
		struct acl4_key k = {.prefixlen = 32};
		__builtin_memcpy(k.addr, &p->src[12], 4);
		act = bpf_map_lookup_elem(&hec_acl4, &k);
	} else {
		struct acl6_key k = {.prefixlen = 128};
		__builtin_memcpy(k.addr, p->src, 16);
		act = bpf_map_lookup_elem(&hec_acl6, &k);
	}
	if (act)
		return *act == ACL_DENY;
	return cfg->acl_default_deny;
}

static __always_inline __u32 csum_add(__u32 sum, __u32 v)
{
	sum += v;
	return sum + (sum < v);
}

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

#define GET_HDR 12 // frame header and "get "
#define HDRS_MAX 128 // Ethernet, VLANs, IP, UDP and frame headers of a reply

// ipv4_sum_ok checks the request's IPv4 header checksum, which the
// incremental update of the reply's assumes. (Its UDP checksum is not
// checked: a frame from a veth or a NIC offloading checksums carries a
// partial sum that only the skb's metadata, out of XDP's sight, explains;
// a request corrupted on the wire either misses or names another held
// key, whose VALUE line the client then sees.)
static __always_inline int ipv4_sum_ok(struct xdp_md *ctx, struct pkt *p)
{
	if (p->v6)
		return 1;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ih = data + (p->l3off & 0xff);
	if ((void *)(ih + 1) > end)
		return 0;
	__u32 *w = (__u32 *)ih;
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < sizeof(*ih) / 4; i++)
		sum = csum_add(sum, w[i]);
	return csum_fold(sum) == 0;
}

// find returns the slot holding k, valid at sequence *seq, or NULL.
static __always_inline struct hot_slot *find(struct hot_key *k, __u64 *seq, __u32 *slot)
{
	__u64 h = hot_hash(k);
	__u32 ids[2] = {h & (HOT_SLOTS - 1), (h >> 32) & (HOT_SLOTS - 1)};
#pragma unroll
	for (int j = 0; j < 2; j++) {
		__u32 id = ids[j];
		struct hot_slot *s = bpf_map_lookup_elem(&hec_hot_slots, &id);
		if (!s)
			return 0;
		// Read under the sequence count: the fetch-and-adds are full
		// barriers, so the reads of the slot lie between them on every
		// architecture.
		__u64 sq = __sync_fetch_and_add(&s->seq, 0);
		if (sq & 1)
			continue;
		__u64 *a = (__u64 *)&s->key, *b = (__u64 *)k;
		__u64 diff = 0;
#pragma unroll
		for (int i = 0; i < sizeof(*k) / 8; i++)
			diff |= a[i] ^ b[i];
		if (diff)
			continue;
		*seq = sq;
		*slot = id;
		return s;
	}
	return 0;
}

// answer tries to answer a UDP GET from the hot map; it returns 1 when the
// packet was turned into the reply, 0 to pass it up.
static __always_inline int answer(struct xdp_md *ctx, struct pkt *p, struct class_stats *st)
{
	if (!p->simple || p->frag)
		return 0;
	__u32 payoff = p->l4off + sizeof(struct udphdr);
	__u32 plen = p->l4len - sizeof(struct udphdr);
	if (plen < GET_HDR + 1 + 2 || plen > GET_HDR + HOT_KEY_MAX + 2)
		return 0;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *hdr = data + (payoff & 0xff);
	if ((void *)(hdr + GET_HDR) > end)
		return 0;
	// Sequence 0 of 1 datagram, then "get ".
	if (hdr[2] | hdr[3] | hdr[4] | (hdr[5] ^ 1) ||
	    *(__u32 *)(hdr + 8) != bpf_htonl(('g' << 24) | ('e' << 16) | ('t' << 8) | ' '))
		return 0;
	struct hot_key k = {};
	__u32 klen = plen - GET_HDR - 2;
	if (klen < 1 || klen > HOT_KEY_MAX)
		return 0;
	k.len = klen;
	// The key's whole words straight from the packet, then its last
	// bytes as the word that ends with them, shifted: every read lies
	// inside the request (the frame header and "get " come before).
	__u64 *kb = (__u64 *)k.b;
	__u32 full = klen / 8, rem = klen % 8;
	if (klen > 56) {
		__u32 kl = ((klen - 1) & 63) + 1;
		if (kl > HOT_KEY_MAX || bpf_xdp_load_bytes(ctx, payoff + GET_HDR, k.b, kl))
			return 0;
	} else {
#pragma unroll
		for (__u32 i = 0; i < 7; i++) {
			if (i < full) {
				__u64 *q = data + ((payoff + GET_HDR + i * 8) & 0x1ff);
				if ((void *)(q + 1) > end)
					return 0;
				kb[i] = *q;
			}
		}
		if (rem) {
			__u64 *q = data + ((payoff + GET_HDR + klen - 8) & 0x1ff);
			if ((void *)(q + 1) > end)
				return 0;
			__u64 w = *q >> ((8 - rem) * 8);
#pragma unroll
			for (__u32 i = 0; i < 7; i++)
				if (i == full)
					kb[i] = w;
		}
	}
	__u8 *crlf = data + ((payoff + GET_HDR + klen) & 0x1ff);
	if ((void *)(crlf + 2) > end || crlf[0] != '\r' || crlf[1] != '\n')
		return 0;

	__u64 seq;
	__u32 slotid;
	struct hot_slot *s = find(&k, &seq, &slotid);
	__u32 zero = 0;
	struct hot_body *tmp = bpf_map_lookup_elem(&hec_hot_scratch, &zero);
	if (!s || !tmp) {
		st->hot_miss++;
		return 0;
	}
	__u64 exp = s->expires_ns;
	if (exp && bpf_ktime_get_ns() >= exp) {
		st->hot_miss++;
		return 0;
	}
	__u32 blen = s->body_len;
	__u32 bsum = s->body_sum;
	if (blen < 1 || blen > HOT_BODY_MAX) {
		st->hot_miss++;
		return 0;
	}
	blen = ((blen - 1) & (HOT_BODY_MAX - 1)) + 1; // see the snap length
	__u32 words = (blen + 7) / 8;
	__u64 *src = (__u64 *)s->body;
	for (int i = 0; i < HOT_BODY_MAX / 8; i++) {
		if (i >= words)
			break;
		tmp->w[i] = src[i];
	}
	if (__sync_fetch_and_add(&s->seq, 0) != seq) {
		st->hot_miss++;
		st->hot_torn++;
		return 0;
	}

	// The kernel drops a request whose IPv4 header checksum is wrong:
	// this path passes it up to be dropped there.
	if (!ipv4_sum_ok(ctx, p))
		return 0;

	// The reply is longer: grow the frame at its tail, or where the
	// driver left no tailroom (veth, generic XDP: an skb's slack), at its
	// head, moving the headers and the frame header to the new start.
	__u32 newlen = payoff + 8 + blen;
	int delta = (int)newlen - (int)p->len;
	if (bpf_xdp_adjust_tail(ctx, delta)) {
		__u8 hdrs[HDRS_MAX];
		__u32 hl = payoff + 8;
		if (delta <= 0 || hl > HDRS_MAX || hl < 1)
			return 0;
		hl = ((hl - 1) & (HDRS_MAX - 1)) + 1;
		if (bpf_xdp_load_bytes(ctx, 0, hdrs, hl))
			return 0;
		if (bpf_xdp_adjust_head(ctx, -delta))
			return 0;
		if (bpf_xdp_store_bytes(ctx, 0, hdrs, hl))
			return -1;
	}
	if (bpf_xdp_store_bytes(ctx, payoff + 8, tmp, blen))
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3off & 0xff, l4 = p->l4off & 0xff;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return -1;
	__u8 mac[ETH_ALEN];
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	struct udphdr *uh = data + l4;
	__u16 *mc = (void *)(uh + 1);
	if ((void *)(mc + 4) > end)
		return -1;
	__u16 ulen = bpf_htons(sizeof(*uh) + 8 + blen);
	__u32 sum = 0;
	if (!p->v6) {
		struct iphdr *ih = data + l3;
		if ((void *)(ih + 1) > end)
			return -1;
		__u32 ip = ih->saddr;
		ih->saddr = ih->daddr;
		ih->daddr = ip;
		// Incremental (RFC 1624): the length and TTL change; the
		// swapped addresses leave the sum as it was.
		__u16 *ttlw = (__u16 *)&ih->ttl;
		__u32 isum = (__u16)~ih->check;
		isum += (__u16)~ih->tot_len + (__u16)~*ttlw;
		ih->tot_len = bpf_htons(sizeof(*ih) + sizeof(*uh) + 8 + blen);
		ih->ttl = 64;
		isum += ih->tot_len + *ttlw;
		ih->check = csum_fold(isum);
		sum = csum_add(sum, ih->saddr);
		sum = csum_add(sum, ih->daddr);
	} else {
		struct ipv6hdr *ih = data + l3;
		if ((void *)(ih + 1) > end)
			return -1;
		struct in6_addr ip = ih->saddr;
		ih->saddr = ih->daddr;
		ih->daddr = ip;
		ih->payload_len = ulen;
		ih->hop_limit = 64;
		__u32 *w = (__u32 *)&ih->saddr;
#pragma unroll
		for (int i = 0; i < 8; i++)
			sum = csum_add(sum, w[i]);
	}
	__u16 port = uh->source;
	uh->source = uh->dest;
	uh->dest = port;
	uh->len = ulen;
	uh->check = 0;
	mc[1] = 0;
	mc[2] = bpf_htons(1);
	mc[3] = 0;
	sum = csum_add(sum, bpf_htons(IPPROTO_UDP));
	sum = csum_add(sum, ulen);
	sum = csum_add(sum, uh->source);
	sum = csum_add(sum, uh->dest);
	sum = csum_add(sum, ulen);
	sum = csum_add(sum, *(__u32 *)mc);
	sum = csum_add(sum, *(__u32 *)(mc + 2));
	sum = csum_add(sum, bsum);
	__u16 check = csum_fold(sum);
	uh->check = check ? check : 0xffff;

	__u64 *hits = bpf_map_lookup_elem(&hec_hot_hits, &slotid);
	if (hits)
		(*hits)++;
	return 1;
}

SEC("xdp")
int hec_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&hec_config, &zero);
	if (!cfg)
		return XDP_PASS;
	__u32 len = ctx->data_end - ctx->data;
	struct pkt p = {.len = len};
	__u32 class = CLASS_OTHER;
	int verdict = VERDICT_PASS, reason = 0, service = 0;

	if (parse(ctx, &p) < 0) {
		verdict = VERDICT_DROP;
		reason = DROP_MALFORMED;
	} else {
		class = classify(cfg, &p, &service);
		if (service && acl_denies(cfg, &p)) {
			verdict = VERDICT_DROP;
			reason = DROP_ACL;
		}
	}
	__u32 ci = class;
	struct class_stats *st = bpf_map_lookup_elem(&hec_stats, &ci);
	if (!st)
		return XDP_PASS;

	// Sample the packet as it came, before an answer rewrites it.
	struct sample *sm = 0;
	if (cfg->sample_every && (!cfg->sample_classes || ((cfg->sample_classes >> class) & 1))) {
		__u64 *n = bpf_map_lookup_elem(&hec_sample_count, &zero);
		if (n && ++*n % cfg->sample_every == 0) {
			sm = bpf_map_lookup_elem(&hec_sample_scratch, &zero);
			if (sm) {
				__u32 cap = cfg->snaplen;
				if (cap > len)
					cap = len;
				// 1..SNAP_MAX by construction: older verifiers lose a
				// bound learnt from a comparison once it is spilled.
				cap = ((cap - 1) & (SNAP_MAX - 1)) + 1;
				if (bpf_xdp_load_bytes(ctx, 0, sm->data, cap))
					cap = 0;
				sm->ts_ns = bpf_ktime_get_ns();
				sm->len = len;
				sm->caplen = cap;
				sm->ifindex = ctx->ingress_ifindex;
				sm->class = class;
				sm->pad = 0;
			}
		}
	}

	if (verdict == VERDICT_PASS && class == CLASS_UDPGET && service && cfg->hot_on) {
		int r = answer(ctx, &p, st);
		if (r > 0)
			verdict = VERDICT_ANSWER;
		else if (r < 0) {
			verdict = VERDICT_DROP; // rewritten halfway: cannot pass up
			reason = DROP_MALFORMED;
		}
	}

	st->packets++;
	st->bytes += len;
	if (p.proto || p.src[11]) {
		__u32 *a = (__u32 *)p.src;
		__u32 ti = (a[0] ^ a[1] ^ a[2] ^ a[3]) * 0x9e3779b1U >> 22;
		struct talker *t = bpf_map_lookup_elem(&hec_talkers, &ti);
		if (t) {
			__u64 *ta = (__u64 *)t->addr, *pa = (__u64 *)p.src;
			if (ta[0] == pa[0] && ta[1] == pa[1]) {
				t->packets++;
				t->bytes += len;
			} else if (t->packets <= 1) {
				ta[0] = pa[0];
				ta[1] = pa[1];
				t->packets = 1;
				t->bytes = len;
			} else {
				t->packets--;
			}
		}
	}
	int act = XDP_PASS;
	switch (verdict) {
	case VERDICT_ANSWER:
		st->answered++;
		act = XDP_TX;
		break;
	case VERDICT_DROP:
		if (reason == DROP_ACL)
			st->dropped[DROP_ACL]++;
		else
			st->dropped[DROP_MALFORMED]++;
		act = XDP_DROP;
		break;
	default:
		st->passed++;
	}
	if (sm) {
		sm->verdict = verdict;
		bpf_ringbuf_output(&hec_samples, sm, sizeof(*sm), 0);
	}
	return act;
}

// hec_pass passes everything. Attached to the far end of a veth, it makes
// the kernel run that end's NAPI, which XDP_TX frames from this end need
// (test clusters: see cluster.Up).
SEC("xdp")
int hec_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
