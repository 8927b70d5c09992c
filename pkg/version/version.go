// Package version is istio-cni's build version, one for every binary of
// a build. The Makefile stamps each at link time with the tag or the
// commit (git describe):
//
//	-ldflags "-X istio-cni.local/istio-cni/pkg/version.version=$(VERSION)"
//
// A binary built without the stamp (go build, go install) takes it from
// the build information Go records: the module's version, else the
// commit, else "unknown". The binaries that say it link this package:
// install-cni (its version subcommand, log, metrics and inspect) and
// istio-cni-full (its about and log lines); the shim and the API lookup
// helper have no output to put it in, and the stamp is a no-op there.
package version

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// version is the link-time stamp; empty when the build set none.
var version string

// Unknown is the version of a build with neither a stamp nor a module
// version or commit in its build information.
const Unknown = "unknown"

// Get is this build's version: the stamp, else what the build
// information says (resolve). It is worked out once per process.
func Get() string { return get() }

var get = sync.OnceValue(func() string { return resolve(version, debug.ReadBuildInfo) })

// Line is how a binary names its build, in one line: NAME VERSION (GO
// RELEASE, OS/ARCH), e.g. "install-cni v1.4.0 (go1.26.0, linux/amd64)".
func Line(name string) string {
	return name + " " + Get() + " (" + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}

// revisionLength is how much of a commit hash resolve keeps: as much as
// a Go pseudo-version holds.
const revisionLength = 12

// resolve is the version of a build stamped with stamp ("" for none)
// whose build information read returns: the stamp, read only without one;
// else the main module's version (go install module@version; since Go
// 1.24 go build in a checkout gives a pseudo-version too); else its
// commit, shortened, with "-dirty" if the tree had changes; else Unknown.
func resolve(stamp string, read func() (*debug.BuildInfo, bool)) string {
	if stamp != "" {
		return stamp
	}
	info, ok := read()
	if !ok || info == nil {
		return Unknown
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var revision string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision == "" {
		return Unknown
	}
	if len(revision) > revisionLength {
		revision = revision[:revisionLength]
	}
	if modified {
		revision += "-dirty"
	}
	return revision
}
