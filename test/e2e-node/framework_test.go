//go:build e2e_node

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

package e2enode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	pipelineclientset "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	sandboxclientset "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/clientset/versioned"
)

const (
	// systemNamespace is where the operator, its Task and its TaskRuns run.
	systemNamespace = "sandbox-snapshot-system"
	// snapshotTimeout bounds a snapshot from creation to a terminal phase.
	snapshotTimeout = 3 * time.Minute
)

// clients are the test's own admin clients, from KUBECONFIG.
type clients struct {
	kube     kubernetes.Interface
	sandbox  sandboxclientset.Interface
	pipeline pipelineclientset.Interface
}

var (
	c              clients
	localRegistry  string
	containerdSock string
)

func TestMain(m *testing.M) {
	localRegistry = os.Getenv("LOCAL_REGISTRY")
	containerdSock = os.Getenv("CONTAINERD_ADDRESS")
	if os.Getenv("KUBECONFIG") == "" || localRegistry == "" || containerdSock == "" {
		fmt.Fprintln(os.Stderr, "e2e-node: source hack/env.sh after hack/node-up.sh (KUBECONFIG, LOCAL_REGISTRY, CONTAINERD_ADDRESS)")
		os.Exit(1)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node:", err)
		os.Exit(1)
	}
	c = clients{
		kube:     kubernetes.NewForConfigOrDie(cfg),
		sandbox:  sandboxclientset.NewForConfigOrDie(cfg),
		pipeline: pipelineclientset.NewForConfigOrDie(cfg),
	}
	os.Exit(m.Run())
}

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-node-"}}
	ns, err := c.kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, ns.Name)
		}
		_ = c.kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// run runs a command (kubectl, tkn, crane from hack/env.sh's PATH) and
// returns its standard output.
func run(t *testing.T, stdin string, name string, args ...string) string {
	t.Helper()
	out, err := tryRun(stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

func tryRun(stdin string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// randomMarker returns unique file content for one container.
func randomMarker(t *testing.T, container string) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return container + "-" + hex.EncodeToString(b) + "\n"
}

// sandboxYAML is a BatchSandbox and its pod as OpenSandbox creates them: the
// pod is labelled with the sandbox's name and carries an app and a sidecar.
const sandboxYAML = `
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: BatchSandbox
metadata:
  name: {{name}}
  namespace: {{namespace}}
  annotations:
    sandbox.opensandbox.io/alloc-status: '{"pods":["{{name}}-0"]}'
spec:
  replicas: 1
---
apiVersion: v1
kind: Pod
metadata:
  name: {{name}}-0
  namespace: {{namespace}}
  labels:
    batch-sandbox.sandbox.opensandbox.io/name: {{name}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: {{image}}
      command: ["/bin/sh", "-c", "exec sleep 2147483647"]
    - name: sidecar
      image: {{image}}
      command: ["/bin/sh", "-c", "exec sleep 2147483647"]
`

// createSandbox creates a BatchSandbox and its Running pod, playing
// OpenSandbox's BatchSandbox controller, and returns the pod.
func createSandbox(t *testing.T, namespace, name string) *corev1.Pod {
	t.Helper()
	y := strings.NewReplacer("{{name}}", name, "{{namespace}}", namespace, "{{image}}", localRegistry+"/busybox:latest").Replace(sandboxYAML)
	run(t, y, "kubectl", "apply", "-f", "-")
	run(t, "", "kubectl", "-n", namespace, "wait", "--for=condition=Ready", "pod/"+name+"-0", "--timeout=120s")
	pod, err := c.kube.CoreV1().Pods(namespace).Get(t.Context(), name+"-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// createSnapshot creates a SandboxSnapshot of the sandbox.
func createSnapshot(t *testing.T, namespace, name, sandboxName string) *v1alpha1.SandboxSnapshot {
	t.Helper()
	s := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: sandboxName},
	}
	s, err := c.sandbox.SandboxV1alpha1().SandboxSnapshots(namespace).Create(t.Context(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating SandboxSnapshot %s/%s: %v", namespace, name, err)
	}
	return s
}

// waitForPhase waits, with kubectl wait as a user would, for a phase.
func waitForPhase(t *testing.T, namespace, name string, phase v1alpha1.SandboxSnapshotPhase) *v1alpha1.SandboxSnapshot {
	t.Helper()
	run(t, "", "kubectl", "-n", namespace, "wait", "sbxsnap/"+name,
		"--for=jsonpath={.status.phase}="+string(phase), fmt.Sprintf("--timeout=%s", snapshotTimeout))
	s, err := c.sandbox.SandboxV1alpha1().SandboxSnapshots(namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertNotPaused checks, through the node's containerd, that every
// container of the pod has a running task, not a paused one.
func assertNotPaused(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	cl, err := containerd.New(containerdSock)
	if err != nil {
		t.Fatalf("connecting to containerd at %s: %v", containerdSock, err)
	}
	defer cl.Close()
	ctx := namespaces.WithNamespace(t.Context(), "k8s.io")
	ctrs, err := cl.Containers(ctx, fmt.Sprintf("labels.%q==%q,labels.%q==%q",
		"io.kubernetes.pod.name", pod.Name, "io.kubernetes.pod.namespace", pod.Namespace))
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, ctr := range ctrs {
		labels, err := ctr.Labels(ctx)
		if err != nil || labels["io.kubernetes.container.name"] == "" {
			continue // the pod's sandbox (pause) container
		}
		task, err := ctr.Task(ctx, nil)
		if err != nil {
			continue // an exited attempt
		}
		st, err := task.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != containerd.Running {
			t.Errorf("container %s of pod %s/%s is %s, want running", labels["io.kubernetes.container.name"], pod.Namespace, pod.Name, st.Status)
		}
		running++
	}
	if running != len(pod.Spec.Containers) {
		t.Errorf("found %d running containers of pod %s/%s, want %d", running, pod.Namespace, pod.Name, len(pod.Spec.Containers))
	}
}

// taskRunsOf lists the TaskRuns labelled with the snapshot's name and namespace.
func taskRunsOf(t *testing.T, namespace, name string) []string {
	t.Helper()
	list, err := c.pipeline.TektonV1().TaskRuns(systemNamespace).List(t.Context(), metav1.ListOptions{
		LabelSelector: "sandbox.opensandbox.io/sandbox-snapshot-name=" + name + ",sandbox.opensandbox.io/sandbox-snapshot-namespace=" + namespace,
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tr := range list.Items {
		names = append(names, tr.Name)
	}
	return names
}

// resumePod starts a pod from a snapshot's imageUris, as OpenSandbox
// rewrites a sandbox template's images, waits up to timeout until it is
// Ready and returns its name.
func resumePod(t *testing.T, ns, name string, s *v1alpha1.SandboxSnapshot, timeout time.Duration) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n", name, ns)
	for _, cs := range s.Status.Containers {
		fmt.Fprintf(&b, "    - name: %s\n      image: %s\n      command: [\"/bin/sh\", \"-c\", \"exec sleep 2147483647\"]\n",
			cs.ContainerName, cs.ImageURI)
	}
	run(t, b.String(), "kubectl", "apply", "-f", "-")
	run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/"+name, "--timeout="+timeout.String())
	return name
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// setConfig patches config-snapshot, waits until the controller has loaded
// it (it logs each version of config-snapshot it loads, and loaded must
// appear in that line), and restores the ConfigMap when the test ends.
func setConfig(t *testing.T, data map[string]string, loaded string) {
	t.Helper()
	cms := c.kube.CoreV1().ConfigMaps(systemNamespace)
	before, err := cms.Get(t.Context(), "config-snapshot", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed := before.DeepCopy()
	for k, v := range data {
		changed.Data[k] = v
	}
	if _, err := cms.Update(t.Context(), changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur, err := cms.Get(context.Background(), "config-snapshot", metav1.GetOptions{})
		if err != nil {
			t.Errorf("restoring config-snapshot: %v", err)
			return
		}
		cur.Data = before.Data
		if _, err := cms.Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
			t.Errorf("restoring config-snapshot: %v", err)
		}
	})
	eventually(t, "the controller to load "+loaded, time.Minute, func() (bool, error) {
		out, err := tryRun("", "kubectl", "-n", systemNamespace, "logs", "deployment/sandbox-snapshot-controller", "--since=2m")
		return err == nil && strings.Contains(out, loaded), nil
	})
}

// dumpState logs what a failed test leaves behind, for the CI log.
func dumpState(t *testing.T, namespace string) {
	out, _ := tryRun("", "kubectl", "-n", namespace, "get", "sbxsnap,pods", "-o", "wide")
	t.Logf("state of %s:\n%s", namespace, out)
	out, _ = tryRun("", "kubectl", "-n", namespace, "get", "sbxsnap", "-o", "yaml")
	t.Logf("snapshots:\n%s", out)
	out, _ = tryRun("", "tkn", "-n", systemNamespace, "taskrun", "list")
	t.Logf("TaskRuns:\n%s", out)
	out, _ = tryRun("", "kubectl", "-n", systemNamespace, "logs", "deployment/sandbox-snapshot-controller", "--tail=50")
	t.Logf("controller log:\n%s", out)
}
