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
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// TestTeardown runs `controller teardown` as the chart's pre-delete hook
// does: as the hook's ServiceAccount with the chart's teardown RBAC alone,
// here against a Deployment standing in for the controller's, whose pod
// stays Terminating after the scale-down until the test confirms it. While
// the pod lives no finalizer is removed, and past the timeout the teardown
// fails; once it is gone, the operator's finalizer, and no other, goes from
// the snapshots, and none is deleted.
func TestTeardown(t *testing.T) {
	e := framework.Setup(t)
	const foreign = "example.com/keep"
	// The teardown's premise: no controller runs while it releases, or the
	// controller would add its finalizer back. The local one is stopped for
	// the test; the stand-in Deployment below plays its pods.
	framework.Controller(t, "stop")
	framework.Cleanup(t, func() { framework.EnsureOneController(t) })
	// The stand-in Deployment's pods.
	controllerPods := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandbox-snapshot-controller"}

	// The hook's ServiceAccount and RBAC, as the chart renders them for this namespace.
	var rbac []*unstructured.Unstructured
	for _, o := range renderChart(t, "--show-only", "templates/teardown.yaml",
		"--set", "namespaceOverride="+e.NS,
		"--set", "image.repository=registry.example.com/sandbox-snapshot-operator/controller",
		"--set", "image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000") {
		if o.GetKind() != "Job" {
			rbac = append(rbac, o)
		}
	}
	if len(rbac) != 5 {
		t.Fatalf("templates/teardown.yaml rendered %d objects besides its Job, want 5 (ServiceAccount, ClusterRole, ClusterRoleBinding, Role, RoleBinding)", len(rbac))
	}
	framework.Cleanup(t, func() {
		_ = e.C.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), "sandbox-snapshot-teardown", metav1.DeleteOptions{})
		_ = e.C.Kube.RbacV1().ClusterRoles().Delete(context.Background(), "sandbox-snapshot-teardown", metav1.DeleteOptions{})
	})
	applyObjects(t, e.Ctx, rbac, metav1.ApplyOptions{FieldManager: "e2e-teardown", Force: true})

	// The controller's Deployment, one pod bound to the fake node: deleted, it
	// stays Terminating until the test confirms it as a kubelet would.
	dep := test.MustParse[appsv1.Deployment](t, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: sandbox-snapshot-controller
  namespace: %s
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: sandbox-snapshot-controller}
  template:
    metadata:
      labels: {app.kubernetes.io/name: sandbox-snapshot-controller}
    spec:
      nodeName: %s
      containers:
        - name: controller
          image: registry.example.com/controller:e2e
`, e.NS, e.Node())
	if _, err := e.C.Kube.AppsV1().Deployments(e.NS).Create(e.Ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(e.Ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.C.Kube.CoreV1().Pods(e.NS).List(ctx, controllerPods)
		return err == nil && len(pods.Items) == 1, nil
	}); err != nil {
		t.Fatalf("waiting for the Deployment's pod: %v", err)
	}

	// Snapshots with the operator's finalizer, another's, or both, of another
	// class, so that the controller, back after the test, leaves them be.
	finalizers := map[string][]string{
		"both":    {sandbox.SnapshotFinalizer, foreign},
		"ours":    {sandbox.SnapshotFinalizer},
		"foreign": {foreign},
	}
	uids := map[string]string{}
	for name, fs := range finalizers {
		s := &v1alpha1.SandboxSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS, Finalizers: fs,
				Annotations: map[string]string{sandbox.ClassAnnotation: "opensandbox"}},
			Spec: v1alpha1.SandboxSnapshotSpec{SandboxName: "sb-" + name},
		}
		got, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Create(e.Ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[name] = string(got.UID)
	}
	framework.Cleanup(t, func() {
		for name := range finalizers {
			_, _ = e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Patch(e.Ctx, name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
	})

	pods, err := e.C.Kube.CoreV1().Pods(e.NS).List(e.Ctx, controllerPods)
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the Deployment's pods: %d, %v", len(pods.Items), err)
	}
	pod := pods.Items[0].Name

	// Run as the hook's ServiceAccount, on this namespace's snapshots only:
	// other tests' snapshots are the running controller's.
	kubeconfig := impersonating(t, "system:serviceaccount:"+e.NS+":sandbox-snapshot-teardown")
	teardown := func(timeout string) *exec.Cmd {
		cmd := exec.CommandContext(e.Ctx, filepath.Join(framework.RepoRoot(), "_output", "bin", "controller"),
			"teardown", "--timeout", timeout, "--snapshot-namespace", e.NS)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "SYSTEM_NAMESPACE="+e.NS)
		return cmd
	}
	ourFinalizerOnAll := func(when string) {
		t.Helper()
		for _, name := range []string{"both", "ours"} {
			s, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Get(e.Ctx, name, metav1.GetOptions{})
			if err != nil || !slices.Contains(s.Finalizers, sandbox.SnapshotFinalizer) {
				t.Fatalf("%s: snapshot %s lost the operator's finalizer while the controller's pod still ran (%v)", when, name, err)
			}
		}
	}

	// Past the timeout: it fails, naming the pod, and removes no finalizer.
	stdout, stderr, err := test.Run(teardown("3s"))
	t.Logf("$ controller teardown --timeout 3s\n%s%s", stdout, stderr)
	if err == nil || !strings.Contains(stderr, pod+" in "+e.NS+" still run after 3s; no finalizer was removed") {
		t.Fatalf("controller teardown with the pod held: %v; want it to fail naming pod %s", err, pod)
	}
	ourFinalizerOnAll("after the timeout")

	// Within it: it waits for the pod, then releases.
	var out, errOut strings.Builder
	cmd := teardown("1m")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	ourFinalizerOnAll("while the teardown waited")
	if err := e.C.Kube.CoreV1().Pods(e.NS).Delete(e.Ctx, pod, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatalf("confirming pod %s's deletion: %v", pod, err)
	}
	err = cmd.Wait()
	stdout = out.String()
	t.Logf("$ controller teardown --timeout 1m\n%s%s", stdout, errOut.String())
	if err != nil {
		t.Fatalf("controller teardown: %v", err)
	}

	got, err := e.C.Kube.AppsV1().Deployments(e.NS).Get(e.Ctx, "sandbox-snapshot-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Replicas == nil || *got.Spec.Replicas != 0 {
		t.Errorf("the Deployment has %v replicas after the teardown, want 0", got.Spec.Replicas)
	}
	pods, err = e.C.Kube.CoreV1().Pods(e.NS).List(e.Ctx, controllerPods)
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("the Deployment's pods after the teardown: %d, %v; want none", len(pods.Items), err)
	}
	for name, before := range finalizers {
		s, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("snapshot %s after the teardown: %v", name, err)
			continue
		}
		want := slices.DeleteFunc(slices.Clone(before), func(f string) bool { return f == sandbox.SnapshotFinalizer })
		if string(s.UID) != uids[name] || !slices.Equal(s.Finalizers, want) {
			t.Errorf("snapshot %s: uid %s, finalizers %v; want uid %s, finalizers %v", name, s.UID, s.Finalizers, uids[name], want)
		}
	}
	for _, name := range []string{"both", "ours"} {
		if !strings.Contains(stdout, "released SandboxSnapshot "+e.NS+"/"+name+"\n") {
			t.Errorf("the teardown does not report %s released", name)
		}
	}
	if strings.Contains(stdout, e.NS+"/foreign") {
		t.Errorf("the teardown reports foreign, which never had the operator's finalizer, released")
	}
}

// impersonating writes a copy of the admin kubeconfig that acts as user,
// and returns its path.
func impersonating(t *testing.T, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(framework.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
