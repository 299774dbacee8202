//go:build e2e

/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// TestRBAC: the controller runs as its ServiceAccount, and that account can
// do exactly what config/200-clusterrole.yaml and config/200-role.yaml grant.
func TestRBAC(t *testing.T) {
	e := framework.Setup(t)

	t.Run("ControllerRunsAsItsServiceAccount", func(t *testing.T) {
		pids := framework.ControllerPIDs()
		if len(pids) == 0 {
			t.Fatal("no controller runs")
		}
		for name, pid := range pids {
			kubeconfig := processKubeconfig(t, pid)
			raw, err := clientcmd.LoadFromFile(kubeconfig)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for user, info := range raw.AuthInfos {
				if info.Token == "" || info.ClientCertificate != "" || len(info.ClientCertificateData) != 0 || info.Impersonate != "" {
					t.Errorf("%s: kubeconfig %s user %s must hold only a token", name, kubeconfig, user)
				}
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			kc, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			review, err := kc.AuthenticationV1().SelfSubjectReviews().Create(e.Ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s: SelfSubjectReview with %s: %v", name, kubeconfig, err)
			}
			if got := review.Status.UserInfo.Username; got != framework.ControllerSA {
				t.Errorf("%s (pid %d) runs as %q, want %q", name, pid, got, framework.ControllerSA)
			} else {
				t.Logf("%s (pid %d) runs as %s, groups %v", name, pid, got, review.Status.UserInfo.Groups)
			}
		}
	})

	// A ServiceAccount without any binding: what every ServiceAccount may do
	// (discovery, self reviews). Only the difference to it comes from config/.
	baseline := test.MustParse[corev1.ServiceAccount](t, `
apiVersion: v1
kind: ServiceAccount
metadata:
  name: baseline
  namespace: %s
`, e.NS)
	if _, err := e.C.Kube.CoreV1().ServiceAccounts(e.NS).Create(e.Ctx, baseline, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	baselineUser := "system:serviceaccount:" + e.NS + ":baseline"
	clusterRole := mustReadRBAC[rbacv1.ClusterRole](t, "config/200-clusterrole.yaml")
	role := mustReadRBAC[rbacv1.Role](t, "config/200-role.yaml")

	for _, tc := range []struct {
		name, ns string
		rules    []rbacv1.PolicyRule
	}{
		{"UserNamespace", e.NS, clusterRole.Rules},
		{"OperatorNamespace", test.SystemNamespace, append(slices.Clone(clusterRole.Rules), role.Rules...)},
	} {
		t.Run("CanIList/"+tc.name, func(t *testing.T) {
			got := canIList(t, framework.ControllerSA, tc.ns)
			base := canIList(t, baselineUser, tc.ns)
			// Wildcards: none at all among what config/ adds. The baseline's
			// discovery URLs (/api/*, /apis/*, /openapi/*) are granted to every
			// authenticated user by Kubernetes' own system:discovery role.
			granted := got.Difference(base)
			for p := range granted {
				if strings.Contains(p.resource, "*") || p.verb == "*" || p.name == "*" {
					t.Errorf("wildcard permission: %v", p)
				}
			}
			want := expectedPermissions(tc.rules)
			if extra := granted.Difference(want); extra.Len() > 0 {
				t.Errorf("the controller may do more than config/ grants: %v", sortedPerms(extra))
			}
			if missing := want.Difference(granted); missing.Len() > 0 {
				t.Errorf("the controller may not do what config/ grants: %v", sortedPerms(missing))
			}
		})
	}
}

// processKubeconfig returns the kubeconfig a controller process uses: its
// --kubeconfig flag, else its KUBECONFIG.
func processKubeconfig(t *testing.T, pid int) string {
	t.Helper()
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
	for i, a := range args {
		if (a == "--kubeconfig" || a == "-kubeconfig") && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--kubeconfig="); ok {
			return v
		}
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(environ), "\x00") {
		if v, ok := strings.CutPrefix(kv, "KUBECONFIG="); ok {
			return v
		}
	}
	t.Fatalf("pid %d has neither --kubeconfig nor KUBECONFIG", pid)
	return ""
}

func mustReadRBAC[T any](t *testing.T, path string) *T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), path))
	if err != nil {
		t.Fatal(err)
	}
	obj := new(T)
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return obj
}

// perm is one permission as `kubectl auth can-i --list` shows it.
type perm struct {
	resource string // resource[.group][/subresource], or a non-resource URL
	name     string // resource name, "" for any
	verb     string
}

func (p perm) String() string {
	if p.name != "" {
		return p.verb + " " + p.resource + "/" + p.name
	}
	return p.verb + " " + p.resource
}

func sortedPerms(s sets.Set[perm]) []string {
	var out []string
	for p := range s {
		out = append(out, p.String())
	}
	slices.Sort(out)
	return out
}

// canIList runs `kubectl auth can-i --list --as=user -n ns` and parses its table.
func canIList(t *testing.T, user, ns string) sets.Set[perm] {
	t.Helper()
	out, err := framework.Run(t, framework.Tool(t, "kubectl"), "auth", "can-i", "--list", "--as="+user, "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := lines[0]
	cols := []int{0, strings.Index(header, "Non-Resource URLs"), strings.Index(header, "Resource Names"), strings.Index(header, "Verbs")}
	if slices.Contains(cols[1:], -1) {
		t.Fatalf("unexpected kubectl auth can-i header %q", header)
	}
	field := func(line string, i int) string {
		end := len(line)
		if i+1 < len(cols) {
			end = min(cols[i+1], len(line))
		}
		if cols[i] >= len(line) {
			return ""
		}
		return strings.TrimSpace(line[cols[i]:end])
	}
	list := func(s string) []string { return strings.Fields(strings.Trim(s, "[]")) }
	perms := sets.New[perm]()
	for _, line := range lines[1:] {
		resource := field(line, 0)
		urls := list(field(line, 1))
		resourceNames := list(field(line, 2))
		for _, verb := range list(field(line, 3)) {
			for _, u := range urls {
				perms.Insert(perm{resource: u, verb: verb})
			}
			if resource == "" {
				continue
			}
			if len(resourceNames) == 0 {
				perms.Insert(perm{resource: resource, verb: verb})
			}
			for _, n := range resourceNames {
				perms.Insert(perm{resource: resource, name: n, verb: verb})
			}
		}
	}
	return perms
}

// expectedPermissions renders RBAC rules as kubectl auth can-i --list shows them.
func expectedPermissions(rules []rbacv1.PolicyRule) sets.Set[perm] {
	out := sets.New[perm]()
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				base, sub, _ := strings.Cut(res, "/")
				shown := base
				if g != "" {
					shown += "." + g
				}
				if sub != "" {
					shown += "/" + sub
				}
				for _, v := range r.Verbs {
					if len(r.ResourceNames) == 0 {
						out.Insert(perm{resource: shown, verb: v})
					}
					for _, n := range r.ResourceNames {
						out.Insert(perm{resource: shown, name: n, verb: v})
					}
				}
			}
		}
	}
	return out
}
