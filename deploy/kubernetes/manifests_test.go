// The Kubernetes manifests decode strictly into the API's own types (an unknown or misspelt field fails), agree with each other, and carry a configuration splicer accepts.

package kubernetes_test

import (
	"os"
	"slices"
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
	parsed, err := config.Parse("configmap.yaml:splicer.yaml", []byte(cfg))
	if err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}
	adminToken(t, parsed, pod)
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
	c := pod.Containers[0]
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(cfg.AdminTokenFile, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Volumes[i].Secret == nil {
			tb.Errorf("admin_token_file %s is on volume %s, which is not a Secret", cfg.AdminTokenFile, m.Name)
		} else if key := strings.TrimPrefix(cfg.AdminTokenFile, m.MountPath+"/"); key != "token" {
			tb.Errorf("admin_token_file %s names key %q of Secret %s; the DaemonSet's comment creates key token", cfg.AdminTokenFile, key, pod.Volumes[i].Secret.SecretName)
		}
		return
	}
	tb.Errorf("admin_token_file %s is on no volume the container mounts", cfg.AdminTokenFile)
}
