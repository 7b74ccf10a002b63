// Package verbstest is what tests that need an RDMA device share: its
// address, or a skip saying why there is none (a failure where soft-RoCE
// is known to run, HEC_REQUIRE_RDMA=1: the guests of test/vm).
package verbstest
