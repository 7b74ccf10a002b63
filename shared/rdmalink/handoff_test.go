package rdmalink

import (
	"bytes"
	"testing"

	"github.com/hecsys/hec/shared/verbs"
)

func TestSetupMessages(t *testing.T) {
	if err := CheckRequest(Request()); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, []byte("HECR"), []byte("HECX\x01"), append(HandoffMagic[:], 9)} {
		if CheckRequest(bad) == nil {
			t.Errorf("request %q taken", bad)
		}
	}
	a := Accept{Flags: HandoffToken, MaxWindow: 64 << 20, Slots: 64, SlotSize: HandoffSlotSize}
	got, err := ParseAccept(a.Append(nil))
	if err != nil || got != a {
		t.Fatalf("accept: %+v %v", got, err)
	}
	for _, bad := range []Accept{{MaxWindow: 1, Slots: 0, SlotSize: 128}, {MaxWindow: 1, Slots: 1, SlotSize: 64}, {Slots: 1, SlotSize: 128}, {MaxWindow: 1, Slots: 5000, SlotSize: 128}} {
		if _, err := ParseAccept(bad.Append(nil)); err == nil {
			t.Errorf("accept %+v taken", bad)
		}
	}
	k := verbs.RemoteKey{Addr: 0x7f0000001000, Len: 32 << 20, RKey: 0x1234}
	if got, err := ParseHello(Hello(k)); err != nil || got != k {
		t.Fatalf("hello: %+v %v", got, err)
	}
	if _, err := ParseHello(Hello(k)[:10]); err == nil {
		t.Error("a short hello taken")
	}
}

// FuzzSetup: the setup's decoders take any bytes (a peer's) without
// panicking, and what they take encodes back to what was read.
func FuzzSetup(f *testing.F) {
	f.Add(Request())
	f.Add(Accept{MaxWindow: 1 << 20, Slots: 64, SlotSize: 128}.Append(nil))
	f.Add(Hello(verbs.RemoteKey{Addr: 1, Len: 2, RKey: 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		CheckRequest(b)
		if a, err := ParseAccept(b); err == nil && !bytes.Equal(a.Append(nil), b[:acceptSize]) {
			t.Fatalf("accept %+v from %x", a, b)
		}
		if k, err := ParseHello(b); err == nil && !bytes.Equal(Hello(k), b) {
			t.Fatalf("hello %+v from %x", k, b)
		}
	})
}
