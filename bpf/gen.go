package bpf

// The committed hec_bpfel.go and hec_bpfel.o come from xdp.c; make
// generate reruns this with Debian's clang, and TestGeneratedIsFresh
// fails when they no longer match the source.
//go:generate go tool bpf2go -tags linux -target bpfel -type config -type class_stats -type acl4_key -type acl6_key -type talker -type sample -type hot_key -type hot_slot hec xdp.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror
