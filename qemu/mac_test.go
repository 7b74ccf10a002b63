package qemu

import "testing"

// VMs on one bridge get MAC addresses of their own (two with QEMU's one
// default reached each other's frames: the second VM was unreachable);
// a VM on user networking keeps the default.
func TestNICMACPerGuest(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Tap: "v1", GuestIP: "10.77.0.1/24"}, ",mac=52:54:00:4d:00:01"},
		{Options{Tap: "v2", GuestIP: "10.77.0.2/24"}, ",mac=52:54:00:4d:00:02"},
		{Options{GuestIP: "10.77.0.2/24"}, ""},
		{Options{Tap: "v3", GuestIP: "nonsense"}, ""},
	} {
		if got := nicMAC(c.o); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}
