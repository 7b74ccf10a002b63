// Package profile makes an agent emulated on a host behave like a DPU's
// Arm side (hecd --dpu-profile bf2|bf3), so rail measurements on a
// machine without a DPU mean something: cores of its own, a CPU quota
// standing for the Arm cores' lower speed, and no x86 vector extensions
// the Arm cores lack (the process runs again with GODEBUG switching them
// off). What the machine does not allow (no cgroup cpu controller, not
// root) is reported, not faked.
package profile
