package bundle

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a parsed semantic version (semver.org 2.0, with or without
// the leading v): MAJOR.MINOR.PATCH, an optional -PRERELEASE and an
// optional +BUILD, which ordering ignores.
type Version struct {
	Major, Minor, Patch uint64
	Pre                 []string
}

// ParseVersion parses v.
func ParseVersion(v string) (Version, error) {
	var out Version
	s := strings.TrimPrefix(v, "v")
	s, _, _ = strings.Cut(s, "+")
	core, pre, hasPre := strings.Cut(s, "-")
	nums := strings.Split(core, ".")
	if len(nums) != 3 {
		return out, fmt.Errorf("bundle: version %q is not a semantic version (vMAJOR.MINOR.PATCH)", v)
	}
	for i, p := range []*uint64{&out.Major, &out.Minor, &out.Patch} {
		n, err := strconv.ParseUint(nums[i], 10, 64)
		if err != nil || (len(nums[i]) > 1 && nums[i][0] == '0') {
			return out, fmt.Errorf("bundle: version %q is not a semantic version (vMAJOR.MINOR.PATCH)", v)
		}
		*p = n
	}
	if hasPre {
		out.Pre = strings.Split(pre, ".")
		for _, id := range out.Pre {
			if id == "" {
				return out, fmt.Errorf("bundle: version %q has an empty pre-release identifier", v)
			}
		}
	}
	return out, nil
}

// Compare returns -1, 0 or +1 as a orders before, with or after b.
func (a Version) Compare(b Version) int {
	for _, d := range [][2]uint64{{a.Major, b.Major}, {a.Minor, b.Minor}, {a.Patch, b.Patch}} {
		if d[0] != d[1] {
			return cmp(d[0] < d[1])
		}
	}
	// A release orders after its pre-releases.
	switch {
	case len(a.Pre) == 0 && len(b.Pre) == 0:
		return 0
	case len(a.Pre) == 0:
		return 1
	case len(b.Pre) == 0:
		return -1
	}
	for i := 0; i < len(a.Pre) && i < len(b.Pre); i++ {
		x, y := a.Pre[i], b.Pre[i]
		if x == y {
			continue
		}
		nx, ex := strconv.ParseUint(x, 10, 64)
		ny, ey := strconv.ParseUint(y, 10, 64)
		switch {
		case ex == nil && ey == nil:
			return cmp(nx < ny)
		case ex == nil: // numeric identifiers order first
			return -1
		case ey == nil:
			return 1
		}
		return cmp(x < y)
	}
	return cmp(len(a.Pre) < len(b.Pre)) * btoi(len(a.Pre) != len(b.Pre))
}

// CompareVersions orders two version strings; an error names the one
// that does not parse.
func CompareVersions(a, b string) (int, error) {
	va, err := ParseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := ParseVersion(b)
	if err != nil {
		return 0, err
	}
	return va.Compare(vb), nil
}

func cmp(less bool) int {
	if less {
		return -1
	}
	return 1
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
