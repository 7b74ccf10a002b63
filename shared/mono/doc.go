// Package mono reads the clock for durations and deadlines at half the
// cost of time.Now.
//
// time.Now reads two clocks, the wall clock and the monotonic one; Now
// here reads the monotonic clock alone and dates it from the process's
// start. On the KVM guests HEC was measured on (kvm-clock, read through
// the vDSO), a read took 28 ns and time.Now 53 ns, and an erasure-coding
// op through the agent, 15 µs in all, read the clock seven times on the
// host and four on the agent.
//
// Use it for what is measured between two times, or compared with one:
// Sub, Since, Until, Before and After use the monotonic readings and are
// exact. Not for the date: the wall reading of a time from Now is the
// process's start plus the monotonic time since, and misses any step the
// wall clock took since (NTP, an operator's date).
package mono
