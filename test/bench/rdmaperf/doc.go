// Command rdmaperf measures one link both ways HEC can use it: RDMA
// (package verbs: a connection by the RDMA connection manager, pings by
// SEND, bulk by RDMA WRITE into the peer's registered region) and TCP
// (the same pings and bulk over a socket), side by side between the same
// two machines. make bench runs it in two x86_64 guests joined by one
// virtual link, soft-RoCE on each (test/bench's rdma scenario): run with
// -role server on one and -role client on the other; the client prints
// the figures as JSON.
package main
