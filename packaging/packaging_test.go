// The release files are what they claim: systemd-analyze accepts the unit, the goreleaser and nfpm configuration builds static binaries, packages the daemon (with the unit, its documentation and shell completion, recommending nothing it does not run) apart from splicer-bench, and builds the image the DaemonSet runs; the Dockerfiles build a non-root daemon; the packaged configuration passes check.

package packaging

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	_ "github.com/splicer/splicer/proxy/all" // the proxy kinds the configuration names
)

// unitDirectives reads the unit's Key=Value lines (a key may repeat).
func unitDirectives(tb testing.TB) map[string][]string {
	tb.Helper()
	data, err := os.ReadFile("systemd/splicer.service")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			out[k] = append(out[k], v)
		}
	}
	return out
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit with its
// binary paths pointing at a freshly built splicer: any warning fails.
func TestSystemdUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		testenv.SkipOrFail(t, "systemd-analyze not installed (apt-get install systemd)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "splicer")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/splicer").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	unit, err := os.ReadFile("systemd/splicer.service")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "splicer.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/bin/splicer"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("systemd-analyze", "verify", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, stderr.String())
	}
}

// TestSystemdUnitPrivileges: the unit runs as its own user with the engines'
// capabilities and nothing more, reloads with 'splicer reload' on the pid
// file the daemon writes (so that a refused file fails the reload) and
// tells systemd when it is ready (and which process is main after an
// upgrade).
func TestSystemdUnitPrivileges(t *testing.T) {
	d := unitDirectives(t)
	const pidFile = "/run/splicer/splicer.pid" // in RuntimeDirectory=splicer, the user's
	want := map[string]string{
		"User": "splicer", "Type": "notify", "NoNewPrivileges": "yes",
		"ExecStart":  "/usr/bin/splicer run --config /etc/splicer/splicer.yaml --pid-file " + pidFile,
		"ExecReload": "/usr/bin/splicer reload --pid-file " + pidFile, "RuntimeDirectory": "splicer",
		"ProtectSystem": "strict",
	}
	for k, v := range want {
		if !slices.Contains(d[k], v) {
			t.Errorf("unit: %s=%v, want %s", k, d[k], v)
		}
	}
	for _, key := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		caps := strings.Fields(strings.Join(d[key], " "))
		for _, need := range []string{"CAP_NET_ADMIN", "CAP_BPF"} {
			if !slices.Contains(caps, need) {
				t.Errorf("unit: %s lacks %s", key, need)
			}
		}
		if slices.Contains(caps, "CAP_SYS_ADMIN") {
			t.Errorf("unit: %s grants CAP_SYS_ADMIN", key)
		}
	}
	// A seccomp filter: a service's system calls and bpf(2), which the
	// sockmap and ip engines load their programs with.
	filter := strings.Fields(strings.Join(d["SystemCallFilter"], " "))
	for _, need := range []string{"@system-service", "bpf"} {
		if !slices.Contains(filter, need) {
			t.Errorf("unit: SystemCallFilter=%v lacks %s", filter, need)
		}
	}
}

// goreleaser is the part of .goreleaser.yaml the release relies on.
type goreleaser struct {
	Before struct {
		Hooks []string `yaml:"hooks"`
	} `yaml:"before"`
	Builds []struct {
		ID      string   `yaml:"id"`
		Main    string   `yaml:"main"`
		Binary  string   `yaml:"binary"`
		Env     []string `yaml:"env"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
	Nfpms     []nfpm `yaml:"nfpms"`
	DockersV2 []struct {
		ID         string   `yaml:"id"`
		IDs        []string `yaml:"ids"`
		Dockerfile string   `yaml:"dockerfile"`
		Images     []string `yaml:"images"`
		Tags       []string `yaml:"tags"`
		Platforms  []string `yaml:"platforms"`
		ExtraFiles []string `yaml:"extra_files"`
	} `yaml:"dockers_v2"`
}

type nfpm struct {
	ID          string   `yaml:"id"`
	PackageName string   `yaml:"package_name"`
	IDs         []string `yaml:"ids"`
	Formats     []string `yaml:"formats"`
	License     string   `yaml:"license"`
	Contents    []struct {
		Src      string `yaml:"src"`
		Dst      string `yaml:"dst"`
		Packager string `yaml:"packager"` // deb or rpm only; empty: both
	} `yaml:"contents"`
	Scripts      map[string]string `yaml:"scripts"`
	Dependencies []string          `yaml:"dependencies"`
	Recommends   []string          `yaml:"recommends"`
	Suggests     []string          `yaml:"suggests"`
}

func readGoreleaser(tb testing.TB) goreleaser {
	tb.Helper()
	data, err := os.ReadFile("../.goreleaser.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	var g goreleaser
	if err := yaml.Unmarshal(data, &g); err != nil {
		tb.Fatal(err)
	}
	return g
}

// TestGoreleaserConfig: static linux amd64 and arm64 builds stamped with
// the version, and .deb/.rpm packages carrying files that exist.
func TestGoreleaserConfig(t *testing.T) {
	g := readGoreleaser(t)
	var daemon bool
	for _, b := range g.Builds {
		if _, err := os.Stat(filepath.Join("..", b.Main)); err != nil {
			t.Errorf("build %s: main %s: %v", b.ID, b.Main, err)
		}
		if !slices.Contains(b.Env, "CGO_ENABLED=0") || !slices.Equal(b.Goos, []string{"linux"}) ||
			!slices.Contains(b.Goarch, "amd64") || !slices.Contains(b.Goarch, "arm64") {
			t.Errorf("build %s: want static (CGO_ENABLED=0) linux amd64 and arm64, got env %v goos %v goarch %v", b.ID, b.Env, b.Goos, b.Goarch)
		}
		if !strings.Contains(strings.Join(b.Ldflags, " "), "internal/buildinfo.Version=") {
			t.Errorf("build %s: ldflags do not stamp the version", b.ID)
		}
		daemon = daemon || b.Main == "./cmd/splicer"
	}
	if !daemon {
		t.Error("no build of ./cmd/splicer")
	}
	if len(g.Nfpms) == 0 {
		t.Fatal("no nfpm packages")
	}
	for _, n := range g.Nfpms {
		if !slices.Contains(n.Formats, "deb") || !slices.Contains(n.Formats, "rpm") {
			t.Errorf("nfpm %s: formats %v, want deb and rpm", n.ID, n.Formats)
		}
		for _, c := range n.Contents {
			if strings.HasPrefix(c.Src, completionsDir+"/") {
				continue // the before hook writes them: TestPackagedCompletions
			}
			if m, err := filepath.Glob(filepath.Join("..", c.Src)); len(m) == 0 {
				t.Errorf("nfpm %s: content %s: no such file (%v)", n.ID, c.Src, err)
			}
		}
		for _, s := range n.Scripts {
			if fi, err := os.Stat(filepath.Join("..", s)); err != nil || fi.Mode()&0o111 == 0 {
				t.Errorf("nfpm %s: script %s missing or not executable (%v)", n.ID, s, err)
			}
		}
	}
}

// packageNamed returns the nfpm package called name.
func packageNamed(tb testing.TB, g goreleaser, name string) nfpm {
	tb.Helper()
	i := slices.IndexFunc(g.Nfpms, func(n nfpm) bool { return n.PackageName == name })
	if i < 0 {
		tb.Fatalf("no nfpm package %s", name)
	}
	return g.Nfpms[i]
}

// TestPackages: the daemon's package ships the daemon and its service
// files, and recommends nothing: the daemon runs no other program (only
// `splicer demo` and `splicer bench` run splicer-bench, which it
// suggests). splicer-bench is a package of its own, which needs the
// daemon and iproute2 and recommends the demo's peers.
func TestPackages(t *testing.T) {
	g := readGoreleaser(t)
	d := packageNamed(t, g, "splicer")
	if !slices.Equal(d.IDs, []string{"splicer"}) {
		t.Errorf("package splicer: builds %v, want [splicer] (splicer-bench has a package of its own)", d.IDs)
	}
	dsts := map[string]bool{}
	for _, c := range d.Contents {
		dsts[c.Dst] = true
	}
	for _, need := range []string{"/usr/lib/systemd/system/splicer.service", "/etc/splicer/splicer.yaml", "/etc/logrotate.d/splicer"} {
		if !dsts[need] {
			t.Errorf("package splicer lacks %s", need)
		}
	}
	if len(d.Recommends) > 0 || !slices.Equal(d.Suggests, []string{"splicer-bench"}) || len(d.Dependencies) > 0 {
		t.Errorf("package splicer: depends %v, recommends %v, suggests %v; want none, none, [splicer-bench]", d.Dependencies, d.Recommends, d.Suggests)
	}

	b := packageNamed(t, g, "splicer-bench")
	if !slices.Equal(b.IDs, []string{"splicer-bench"}) {
		t.Errorf("package splicer-bench: builds %v, want [splicer-bench]", b.IDs)
	}
	if !slices.Contains(b.Dependencies, "splicer") || !slices.Contains(b.Dependencies, "iproute2") {
		t.Errorf("package splicer-bench: depends %v, want splicer (it runs the daemon beside it) and iproute2 (ip netns exec)", b.Dependencies)
	}
	// What the bench looks for on PATH (bench/, `missing(...)`).
	runs := []string{"haproxy", "socat", "iperf3", "sockperf", "nginx", "wrk"}
	for _, p := range append(slices.Clone(b.Recommends), b.Suggests...) {
		if !slices.Contains(runs, p) {
			t.Errorf("package splicer-bench recommends or suggests %s, which it does not run", p)
		}
	}
	for _, p := range []string{"haproxy", "socat"} {
		if !slices.Contains(b.Recommends, p) {
			t.Errorf("package splicer-bench does not recommend %s, a peer of the demo", p)
		}
	}
}

// completionsDir is where goreleaser's before hook writes the completion
// scripts the daemon's package installs.
const completionsDir = "out/completions"

// installs maps each file the package installs for packager (deb or rpm)
// to its source.
func installs(n nfpm, packager string) map[string]string {
	out := map[string]string{}
	for _, c := range n.Contents {
		if c.Packager == "" || c.Packager == packager {
			out[c.Dst] = c.Src
		}
	}
	return out
}

// TestPackagedCompletions: the release writes the completion scripts
// before it packages them, and both packages install each shell's script
// where that shell looks on the distribution; the bash one, as written,
// completes splicer's commands.
func TestPackagedCompletions(t *testing.T) {
	g := readGoreleaser(t)
	if !slices.Contains(g.Before.Hooks, "sh packaging/completions.sh "+completionsDir) {
		t.Errorf("before hooks %v do not write %s", g.Before.Hooks, completionsDir)
	}
	d := packageNamed(t, g, "splicer")
	want := map[string]map[string]string{
		"deb": {"/usr/share/bash-completion/completions/splicer": "splicer.bash", "/usr/share/zsh/vendor-completions/_splicer": "splicer.zsh", "/usr/share/fish/vendor_completions.d/splicer.fish": "splicer.fish"},
		"rpm": {"/usr/share/bash-completion/completions/splicer": "splicer.bash", "/usr/share/zsh/site-functions/_splicer": "splicer.zsh", "/usr/share/fish/vendor_completions.d/splicer.fish": "splicer.fish"},
	}
	for packager, files := range want {
		got := installs(d, packager)
		for dst, src := range files {
			if got[dst] != completionsDir+"/"+src {
				t.Errorf("%s package: %s from %q, want %s/%s", packager, dst, got[dst], completionsDir, src)
			}
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "packaging/completions.sh", dir)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("completions.sh: %v\n%s", err, out)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if b, err := os.ReadFile(filepath.Join(dir, "splicer."+shell)); err != nil || !bytes.Contains(b, []byte("__complete")) {
			t.Errorf("completions.sh wrote no %s script asking splicer __complete (%v)", shell, err)
		}
	}
	out, err := exec.Command("bash", "-c", "source "+filepath.Join(dir, "splicer.bash")+" && complete -p splicer").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "__start_splicer splicer") {
		t.Errorf("bash sourcing the packaged script: %v\n%s", err, out)
	}
}

// TestPackagedDocs: the daemon's package carries its documentation, every
// page of docs/, the README that links them and the examples, under
// /usr/share/doc/splicer.
func TestPackagedDocs(t *testing.T) {
	d := packageNamed(t, readGoreleaser(t), "splicer")
	const doc = "/usr/share/doc/splicer/"
	for _, packager := range []string{"deb", "rpm"} {
		got := installs(d, packager)
		for dst, src := range map[string]string{doc + "README.md": "README.md", doc + "docs/": "docs/*.md", doc + "examples/": "examples/", doc + "LICENSE": "LICENSE"} {
			if got[dst] != src {
				t.Errorf("%s package splicer: %s from %q, want %s", packager, dst, got[dst], src)
			}
		}
	}
	if pages, _ := filepath.Glob("../docs/*.md"); len(pages) < 5 {
		t.Errorf("docs/*.md matches %v: the pages moved?", pages)
	}
}

// TestReleaseImage: the release builds, for amd64 and arm64, the image
// deploy/kubernetes/daemonset.yaml runs, from the daemon's release build.
func TestReleaseImage(t *testing.T) {
	g := readGoreleaser(t)
	data, err := os.ReadFile("../deploy/kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := k8syaml.Unmarshal(data, &ds); err != nil {
		t.Fatal(err)
	}
	image := ds.Spec.Template.Spec.Containers[0].Image
	name, tag, _ := strings.Cut(image, ":")
	var built []string
	for _, d := range g.DockersV2 {
		for _, img := range d.Images {
			for _, tg := range d.Tags {
				built = append(built, img+":"+tg)
			}
		}
		if !slices.Equal(d.IDs, []string{"splicer"}) {
			t.Errorf("image %s: from builds %v, want [splicer]", d.ID, d.IDs)
		}
		for _, f := range append([]string{d.Dockerfile}, d.ExtraFiles...) {
			if _, err := os.Stat(filepath.Join("..", f)); err != nil {
				t.Errorf("image %s: %v", d.ID, err)
			}
		}
		if !slices.Contains(d.Platforms, "linux/amd64") || !slices.Contains(d.Platforms, "linux/arm64") {
			t.Errorf("image %s: platforms %v, want linux/amd64 and linux/arm64", d.ID, d.Platforms)
		}
	}
	if !slices.Contains(built, name+":"+tag) {
		t.Errorf("the DaemonSet runs %s; the release builds %v", image, built)
	}
}

// engineCaps are the capabilities any engine needs (cmd/splicer's
// neededCaps); the image's binary carries them all, permitted only.
const engineCaps = "cap_net_admin,cap_bpf,cap_perfmon,cap_net_raw,cap_net_bind_service+p"

// TestDockerfile: the images build the daemon (from source, or from the
// release's static binary) and start it, as the distroless nonroot user,
// with the packaged configuration; the binary carries the engines'
// capabilities as permitted file capabilities, for Kubernetes, which
// gives a container not run as root none otherwise.
func TestDockerfile(t *testing.T) {
	for path, extra := range map[string][]string{
		"../Dockerfile":     {"CGO_ENABLED=0", "./cmd/splicer", "internal/buildinfo.Version=", "--cap-add NET_ADMIN", "--network host"},
		"docker/Dockerfile": {"COPY ${TARGETPLATFORM}/splicer "},
	} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		for _, want := range append(extra, "FROM gcr.io/distroless/static-debian12:nonroot", "USER 65532:65532", "setcap "+engineCaps+" ",
			"COPY packaging/splicer.yaml /etc/splicer/splicer.yaml", `ENTRYPOINT ["/usr/bin/splicer"]`) {
			if !strings.Contains(s, want) {
				t.Errorf("%s lacks %q", path, want)
			}
		}
	}
}

// TestPackagedConfig: the configuration the package installs passes check.
func TestPackagedConfig(t *testing.T) {
	if _, err := config.Load("splicer.yaml"); err != nil {
		t.Fatalf("packaging/splicer.yaml: %v", err)
	}
}

// TestLogrotateSnippet: logrotate reads the snippet without an error,
// it rotates what the unit's LogsDirectory holds, and it has the
// service's main process reopen the access log (SIGUSR1) afterwards.
func TestLogrotateSnippet(t *testing.T) {
	if _, err := exec.LookPath("logrotate"); err != nil {
		testenv.SkipOrFail(t, "logrotate not installed (apt-get install logrotate)")
	}
	out, err := exec.Command("logrotate", "--debug", "--state", filepath.Join(t.TempDir(), "state"), "logrotate/splicer").CombinedOutput()
	if err != nil || strings.Contains(strings.ToLower(string(out)), "error") {
		t.Errorf("logrotate --debug: %v\n%s", err, out)
	}
	data, err := os.ReadFile("logrotate/splicer")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if !slices.Contains(unitDirectives(t)["LogsDirectory"], "splicer") || !strings.Contains(s, "/var/log/splicer/*.log {") {
		t.Errorf("the snippet rotates %q; want the unit's LogsDirectory=splicer, /var/log/splicer", s)
	}
	if !strings.Contains(s, "systemctl kill --kill-whom=main --signal=USR1 splicer.service") {
		t.Errorf("the snippet's postrotate does not send SIGUSR1 to splicer.service's main process:\n%s", s)
	}
}
