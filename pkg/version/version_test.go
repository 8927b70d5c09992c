package version

import (
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, c := range []struct {
		name  string
		stamp string
		info  *debug.BuildInfo // nil: the binary has none
		want  string
	}{
		{"the stamp wins", "v1.4.0-3-g0123456-dirty", &debug.BuildInfo{Main: debug.Module{Version: "v9.9.9"}}, "v1.4.0-3-g0123456-dirty"},
		{"go install module@version", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: vcs("false")}, "v1.4.0"},
		{"a pseudo-version as is", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101120000-0123456789ab+dirty"}}, "v0.0.0-20260101120000-0123456789ab+dirty"},
		{"devel: the commit", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("false")}, "0123456789ab"},
		{"devel, changed tree", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")}, "0123456789ab-dirty"},
		{"no module version: the commit", "", &debug.BuildInfo{Settings: vcs("true")}, "0123456789ab-dirty"},
		{"a short revision whole", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}, "abc123"},
		{"devel without a commit", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}}, Unknown},
		{"no build information", "", nil, Unknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			read := func() (*debug.BuildInfo, bool) {
				if c.stamp != "" {
					t.Error("build information read although the build is stamped")
				}
				return c.info, c.info != nil
			}
			if got := resolve(c.stamp, read); got != c.want {
				t.Errorf("resolve(%q, %+v) = %q, want %q", c.stamp, c.info, got, c.want)
			}
		})
	}
}

// The line install-cni version and the full plugin's about print: the
// binary, the version, the Go release and the platform.
func TestLine(t *testing.T) {
	line := Line("install-cni")
	if !regexp.MustCompile(`^install-cni \S+ \(go[^ ,]+, [a-z0-9]+/[a-z0-9]+\)$`).MatchString(line) || !strings.Contains(line, " "+Get()+" ") {
		t.Errorf("Line = %q, want \"install-cni %s (GO RELEASE, OS/ARCH)\"", line, Get())
	}
}
