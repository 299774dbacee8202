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
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/restmapper"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/chart"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/manifests"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// snapshotCRD is the SandboxSnapshot CRD's name.
const snapshotCRD = "sandboxsnapshots.sandbox.opensandbox.io"

// TestHelmChart renders the Helm chart (charts/sandbox-snapshot-operator)
// into a test namespace and applies every object to the API server with a
// server-side dry run: admission and validation run in full, nothing is
// stored, so the running operator's RBAC and CRD stay as they are. With
// crds.install=false, as beside OpenSandbox, the chart carries no CRD and
// the one already installed serves; with crds.install=true the API server
// takes the chart's CRD with helm.sh/resource-policy: keep.
func TestHelmChart(t *testing.T) {
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	const bundle = "registry.example.com/sandbox-snapshot-operator/sandbox-commit@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	for _, install := range []bool{false, true} {
		name := map[bool]string{false: "CRDPreinstalled", true: "CRDInstalled"}[install]
		t.Run(name, func(t *testing.T) {
			e := framework.Setup(t)
			objs := renderChart(t,
				"--set", "namespaceOverride="+e.NS,
				"--set", "namespace.create=true",
				"--set", "crds.install="+map[bool]string{false: "false", true: "true"}[install],
				"--set", "image.repository=registry.example.com/sandbox-snapshot-operator/controller",
				"--set", "image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000",
				"--set", "snapshot.registry=registry.example.com/sandbox-snapshots",
				"--set-string", "snapshot.taskBundle="+bundle,
			)
			var crd *unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" {
					crd = o
				}
			}
			switch {
			case !install && crd != nil:
				t.Fatalf("crds.install=false rendered the CRD %s", crd.GetName())
			case !install:
				// Beside OpenSandbox its chart installs the CRD; here the cluster's is either ours or OpenSandbox's (SNAPSHOT_CRDS).
				if _, err := e.C.Dynamic.Resource(crdGVR).Get(e.Ctx, snapshotCRD, metav1.GetOptions{}); err != nil {
					t.Fatalf("the pre-installed CRD %s: %v", snapshotCRD, err)
				}
			case crd == nil:
				t.Fatal("crds.install=true rendered no CRD")
			}

			applied := dryRunApply(t, e.Ctx, objs)
			if install {
				got := applied["CustomResourceDefinition/"+snapshotCRD]
				if got == nil {
					t.Fatalf("the API server returned no CRD %s", snapshotCRD)
				}
				if v := got.GetAnnotations()[chart.KeepAnnotation]; v != "keep" {
					t.Errorf("the CRD as the API server takes it has %s=%q, want keep; annotations %v", chart.KeepAnnotation, v, got.GetAnnotations())
				}
			}
			cm := applied["ConfigMap/"+e.NS+"/config-snapshot"]
			if cm == nil {
				t.Fatalf("the API server returned no ConfigMap %s/config-snapshot", e.NS)
			}
			if data, _, _ := unstructured.NestedStringMap(cm.Object, "data"); data["task-bundle"] != bundle ||
				data["registry"] != "registry.example.com/sandbox-snapshots" {
				t.Errorf("config-snapshot's task-bundle and registry are %q and %q, want the values", data["task-bundle"], data["registry"])
			}
		})
	}
}

// renderChart runs helm template on the chart with args and returns its
// objects. Helm's cache, config and data go to a temporary directory.
func renderChart(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(framework.Tool(t, "helm"), append([]string{"template", "sandbox-snapshot-operator",
		filepath.Join(framework.RepoRoot(), "charts", "sandbox-snapshot-operator")}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, _, err := test.Run(cmd)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	docs, err := manifests.Split([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		o := test.MustParseUnstructured(t, "%s", doc)
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
	t.Logf("helm template: %d objects", len(objs))
	return objs
}

// dryRunApply applies objs, in order, with server-side apply and a
// server-side dry run, failing the test on any error. It returns the objects
// as the API server would have stored them, by chart.Key.
func dryRunApply(t *testing.T, ctx context.Context, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	out := applyObjects(t, ctx, objs, metav1.ApplyOptions{FieldManager: "e2e-helm-chart", Force: true, DryRun: []string{metav1.DryRunAll}})
	t.Logf("the API server accepted all %d objects (server-side apply, dry run)", len(out))
	return out
}

// applyObjects applies objs, in order, with server-side apply and opts,
// failing the test on any error. It returns the objects as the API server
// stored them (or would have, in a dry run), by chart.Key.
func applyObjects(t *testing.T, ctx context.Context, objs []*unstructured.Unstructured, opts metav1.ApplyOptions) map[string]*unstructured.Unstructured {
	t.Helper()
	groups, err := restmapper.GetAPIGroupResources(framework.Clients().Kube.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s: %v", chart.Key(o), err)
			continue
		}
		var got *unstructured.Unstructured
		if m.Scope.Name() == "namespace" {
			got, err = framework.Clients().Dynamic.Resource(m.Resource).Namespace(o.GetNamespace()).Apply(ctx, o.GetName(), o, opts)
		} else {
			got, err = framework.Clients().Dynamic.Resource(m.Resource).Apply(ctx, o.GetName(), o, opts)
		}
		if err != nil {
			t.Errorf("applying %s (dry run: %v): %v", chart.Key(o), opts.DryRun, err)
			continue
		}
		out[chart.Key(got)] = got
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}
