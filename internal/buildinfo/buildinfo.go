// Package buildinfo says which splicer this is: the version stamped at build time (git describe), or else the VCS revision Go recorded.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Version is set by the build: go build -ldflags "-X github.com/splicer/splicer/internal/buildinfo.Version=$(git describe --tags --always --dirty)".
var Version string

// Revision is set by the build with the commit (git rev-parse HEAD), for
// builds where Go records no VCS information (GOFLAGS=-buildvcs=false).
var Revision string

// Info is the build's identity.
type Info struct {
	Version   string // git describe, or the module version, or the revision
	Revision  string // the VCS commit, "unknown" without VCS information
	GoVersion string
}

// Get returns this binary's build information. Without a stamped version it
// falls back to what the Go toolchain recorded: the module version of a
// `go install pkg@version`, or the commit (with "-dirty" for a modified
// tree) of a plain `go build` in a git checkout.
func Get() Info {
	info := Info{Version: Version, Revision: Revision, GoVersion: runtime.Version()}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if info.Version == "" {
			info.Version = "unknown"
		}
		return info
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if Revision == "" {
				info.Revision = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	switch {
	case info.Version != "":
	case bi.Main.Version != "" && bi.Main.Version != "(devel)":
		info.Version = bi.Main.Version
	case info.Revision != "unknown":
		info.Version = shortRev(info.Revision)
		if modified {
			info.Version += "-dirty"
		}
	default:
		info.Version = "unknown"
	}
	return info
}

func shortRev(r string) string {
	if len(r) > 12 {
		return r[:12]
	}
	return r
}
