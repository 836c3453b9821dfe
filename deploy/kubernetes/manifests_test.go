// The Kubernetes manifests decode strictly into the API's own types (an unknown or misspelt field fails), agree with each other, carry a configuration splicer accepts with its secrets in Secrets, and run it as a user other than root with only the capabilities its engines need.

package kubernetes_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/splicer/splicer/internal/config"
	_ "github.com/splicer/splicer/proxy/all" // registers the proxy kinds the configuration names
)

// decode reads path strictly into v: a field the API type lacks is an error,
// as kubectl apply --validate=strict would report it.
func decode(tb testing.TB, path string, v any) {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
}

func TestManifests(t *testing.T) {
	var ns corev1.Namespace
	var cm corev1.ConfigMap
	var ds appsv1.DaemonSet
	var svc corev1.Service
	decode(t, "namespace.yaml", &ns)
	decode(t, "configmap.yaml", &cm)
	decode(t, "daemonset.yaml", &ds)
	decode(t, "service.yaml", &svc)

	for path, kind := range map[string]string{"namespace.yaml": ns.Kind, "configmap.yaml": cm.Kind, "daemonset.yaml": ds.Kind, "service.yaml": svc.Kind} {
		want := map[string]string{"namespace.yaml": "Namespace", "configmap.yaml": "ConfigMap", "daemonset.yaml": "DaemonSet", "service.yaml": "Service"}[path]
		if kind != want {
			t.Errorf("%s: kind %q, want %s", path, kind, want)
		}
	}
	for _, got := range []string{cm.Namespace, ds.Namespace, svc.Namespace} {
		if got != ns.Name {
			t.Errorf("namespace %q, want %q", got, ns.Name)
		}
	}

	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("DaemonSet: hostNetwork must be true (splicer forwards the node's traffic, and engine ip attaches to its devices)")
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v || svc.Spec.Selector[k] != v {
			t.Errorf("label %s=%s: the selector, the pod template and the Service disagree", k, v)
		}
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	caps := c.SecurityContext.Capabilities
	for _, need := range []corev1.Capability{"NET_ADMIN", "BPF"} {
		if !slices.Contains(caps.Add, need) {
			t.Errorf("container lacks capability %s", need)
		}
	}
	if slices.Contains(caps.Add, "SYS_ADMIN") || (c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged) {
		t.Error("container is privileged or has SYS_ADMIN: splicer needs neither")
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" {
		t.Error("readiness probe must be GET /ready (503 while draining)")
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Error("liveness probe must be GET /healthz")
	}
	if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == cm.Name }) {
		t.Errorf("DaemonSet does not mount ConfigMap %s", cm.Name)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "/etc/splicer/splicer.yaml") {
		t.Errorf("container args %v do not name the mounted configuration", c.Args)
	}

	cfg, ok := cm.Data["splicer.yaml"]
	if !ok {
		t.Fatal("ConfigMap has no splicer.yaml")
	}
	cfg = withUsersFiles(t, cfg, pod)
	parsed, err := config.Parse("configmap.yaml:splicer.yaml", []byte(cfg))
	if err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}
	adminToken(t, parsed, pod)
	socks5Users(t, parsed)
	leastPrivilege(t, parsed, pod)
}

// secretKey returns the Secret and key that hold path in c's mounts, or
// fails tb saying why path is not in a Secret.
func secretKey(tb testing.TB, pod corev1.PodSpec, c corev1.Container, what, path string) (secret, key string) {
	tb.Helper()
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Volumes[i].Secret == nil {
			tb.Errorf("%s %s is on volume %s, which is not a Secret", what, path, m.Name)
			return "", ""
		}
		return pod.Volumes[i].Secret.SecretName, strings.TrimPrefix(path, m.MountPath+"/")
	}
	tb.Errorf("%s %s is on no volume the container mounts", what, path)
	return "", ""
}

var usersFileKey = regexp.MustCompile(`users_file:\s*(\S+)`)

// withUsersFiles checks that each users_file the configuration names is a
// key users of a Secret the pod mounts (the DaemonSet's comment creates it
// so), and stands a file with a user in for it, for the configuration to
// parse here.
func withUsersFiles(tb testing.TB, cfg string, pod corev1.PodSpec) string {
	tb.Helper()
	dir := tb.TempDir()
	standIn := filepath.Join(dir, "users")
	line := "alice:$2y$05$eXHizk4ZyJf3MZI1FDpGNea5J8HlpHjgbO3bfYnCSVrB0U31Sw.yS\n" // htpasswd -nbB alice wonderland
	if err := os.WriteFile(standIn, []byte(line), 0o600); err != nil {
		tb.Fatal(err)
	}
	return usersFileKey.ReplaceAllStringFunc(cfg, func(m string) string {
		path := usersFileKey.FindStringSubmatch(m)[1]
		if secret, key := secretKey(tb, pod, pod.Containers[0], "users_file", path); secret != "" && key != "users" {
			tb.Errorf("users_file %s names key %q of Secret %s; the DaemonSet's comment creates key users", path, key, secret)
		}
		return "users_file: " + standIn
	})
}

// socks5Users: no password hash sits in the ConfigMap; socks5 listeners
// with users read them from users_file.
func socks5Users(tb testing.TB, cfg *config.Config) {
	tb.Helper()
	for _, l := range cfg.Listeners {
		if l.SOCKS5 != nil && len(l.SOCKS5.Users) > 0 {
			tb.Errorf("listener %s: socks5 users inline in the ConfigMap; read them from a Secret with users_file", l.Name)
		}
	}
}

// neededCaps are the capabilities cfg's engines and listeners need, as
// splicer keeps them when it runs as a user other than root.
func neededCaps(cfg *config.Config) []corev1.Capability {
	var out []corev1.Capability
	add := func(caps ...corev1.Capability) {
		for _, c := range caps {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	if cfg.Engines.IP.Enabled {
		add("NET_ADMIN", "BPF", "PERFMON", "NET_RAW")
	}
	if cfg.Engines.Sockmap.Enabled {
		add("NET_ADMIN", "BPF")
	}
	if cfg.Workers.Master() {
		add("BPF")
	}
	for _, addr := range append([]string{cfg.Admin}, listenAddrs(cfg)...) {
		if i := strings.LastIndexByte(addr, ':'); i >= 0 {
			if p, err := strconv.Atoi(addr[i+1:]); err == nil && p > 0 && p < 1024 {
				add("NET_BIND_SERVICE")
			}
		}
	}
	slices.Sort(out)
	return out
}

func listenAddrs(cfg *config.Config) []string {
	var out []string
	for _, l := range cfg.Listeners {
		out = append(out, l.Listen)
	}
	return out
}

// leastPrivilege: every container runs as a user other than root (the
// one init container that chowns the BPF pin directory excepted, with
// CAP_CHOWN alone), under the runtime's seccomp profile, without
// privilege escalation, with every capability dropped and splicer given
// back exactly those its configuration needs.
func leastPrivilege(tb testing.TB, cfg *config.Config, pod corev1.PodSpec) {
	tb.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		tb.Error("pod: want runAsNonRoot: true and a runAsUser other than 0")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		tb.Error("pod: want seccompProfile: {type: RuntimeDefault}")
	}
	check := func(c corev1.Container, want []corev1.Capability) {
		sc := c.SecurityContext
		if sc == nil || sc.Capabilities == nil {
			tb.Errorf("container %s: no securityContext.capabilities", c.Name)
			return
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			tb.Errorf("container %s: want allowPrivilegeEscalation: false", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			tb.Errorf("container %s is privileged", c.Name)
		}
		if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			tb.Errorf("container %s: seccompProfile %s, want the pod's RuntimeDefault", c.Name, sc.SeccompProfile.Type)
		}
		if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			tb.Errorf("container %s: drops %v, want [ALL]", c.Name, sc.Capabilities.Drop)
		}
		add := slices.Sorted(slices.Values(sc.Capabilities.Add))
		if !slices.Equal(add, want) {
			tb.Errorf("container %s: adds %v, want %v", c.Name, add, want)
		}
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc != nil && (sc.RunAsUser != nil && *sc.RunAsUser == 0 || sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot) {
		tb.Errorf("container %s runs as root", c.Name)
	}
	check(c, neededCaps(cfg))
	for _, ic := range pod.InitContainers {
		check(ic, []corev1.Capability{"CHOWN"})
	}
}

// adminToken: an admin endpoint on the node's addresses takes its token
// from a Secret the pod mounts at the path the configuration reads, so
// that the token is not in the ConfigMap for anyone who reads it.
func adminToken(tb testing.TB, cfg *config.Config, pod corev1.PodSpec) {
	tb.Helper()
	if strings.HasPrefix(cfg.Admin, "127.") || cfg.Admin == "" {
		return
	}
	if cfg.AdminToken != "" {
		tb.Error("the ConfigMap holds admin_token in clear: read it from a Secret with admin_token_file")
	}
	if cfg.AdminTokenFile == "" {
		tb.Fatalf("admin %s is beyond loopback without admin_token_file", cfg.Admin)
	}
	secret, key := secretKey(tb, pod, pod.Containers[0], "admin_token_file", cfg.AdminTokenFile)
	if secret != "" && key != "token" {
		tb.Errorf("admin_token_file %s names key %q of Secret %s; the DaemonSet's comment creates key token", cfg.AdminTokenFile, key, secret)
	}
}
