// Package cluster makes test clusters on one machine: each node a network
// namespace with a veth to a bridge, running its own hecd with the member
// list (or etcd) filled in, optional tc rate limits per link. The bridge
// lives in a switch namespace of its own, so nothing of a cluster — no
// address, no route, no firewall rule — touches the machine's own network
// namespace. Everything is named after the cluster (hec-NAME-…), so Down
// removes it all from the names alone, also after the tool that made it
// crashed. hecctl cluster drives it.
package cluster
