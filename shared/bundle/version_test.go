package bundle

import "testing"

func TestCompareVersions(t *testing.T) {
	// semver.org's precedence example, in order.
	ordered := []string{"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
		"1.0.0-beta.11", "1.0.0-rc.1", "v1.0.0", "1.0.1", "1.2.0", "1.10.0", "v2.0.0+build.5"}
	for i, a := range ordered {
		for j, b := range ordered {
			got, err := CompareVersions(a, b)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("Compare(%s, %s) = %d, want %d", a, b, got, want)
			}
		}
	}
	if c, _ := CompareVersions("1.0.0+a", "1.0.0+b"); c != 0 {
		t.Errorf("build metadata ordered: %d", c)
	}
	for _, bad := range []string{"", "dev", "c3e0347", "1.2", "1.2.3.4", "01.2.3", "1.2.x", "1.2.3-", "1.2.3-a..b"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
}

func FuzzCompareVersions(f *testing.F) {
	f.Add("1.0.0-alpha.1", "1.0.0")
	f.Add("v0.0.1", "0.0.1+x")
	f.Fuzz(func(t *testing.T, a, b string) {
		ab, err1 := CompareVersions(a, b)
		ba, err2 := CompareVersions(b, a)
		if err1 != nil || err2 != nil {
			return
		}
		if ab != -ba {
			t.Fatalf("Compare(%q,%q)=%d but Compare(%q,%q)=%d", a, b, ab, b, a, ba)
		}
	})
}
