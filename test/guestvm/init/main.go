package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	defer func() {
		unix.Sync()
		unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	}()
	say := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "guestvm init: "+format+"\n", a...) }
	for _, m := range []struct{ src, dst, fs string }{{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}} {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil {
			say("mount %s: %v", m.dst, err)
		}
	}
	list, _ := os.ReadFile("/etc/modules.list")
	for _, m := range strings.Fields(string(list)) {
		f, err := os.Open(m)
		if err != nil {
			say("%v", err)
			continue
		}
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && err != unix.EEXIST {
			say("load %s: %v", m, err)
		}
		f.Close()
	}
	os.MkdirAll("/host", 0o755)
	if err := unix.Mount("root", "/host", "9p", unix.MS_RDONLY, "trans=virtio,version=9p2000.L,cache=loose,msize=262144"); err != nil {
		say("mount this machine's root: %v", err)
		return
	}
	if err := unix.Mount("work", "/host/mnt", "9p", 0, "trans=virtio,version=9p2000.L,msize=262144"); err != nil {
		say("mount the work directory: %v", err)
		return
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		if err := unix.Mount("/"+d, "/host/"+d, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			say("bind %s: %v", d, err)
		}
	}
	for _, d := range []string{"/host/tmp", "/host/run"} {
		if err := unix.Mount("tmpfs", d, "tmpfs", 0, ""); err != nil {
			say("tmpfs %s: %v", d, err)
		}
	}
	if err := unix.Chroot("/host"); err != nil {
		say("chroot: %v", err)
		return
	}
	os.Chdir("/")
	out, err := os.Create("/mnt/out.log")
	if err != nil {
		say("%v", err)
		return
	}
	t0 := time.Now()
	cmd := exec.Command("/bin/sh", "/mnt/run.sh")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp"}
	err = cmd.Run()
	rc := 0
	if err != nil {
		rc = 1
		if ee, ok := err.(*exec.ExitError); ok {
			rc = ee.ExitCode()
		}
	}
	fmt.Fprintf(out, "\nguestvm: exit %d after %v\n", rc, time.Since(t0).Round(time.Millisecond))
	out.Close()
}
