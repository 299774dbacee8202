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

// Package nodeframework holds what the node e2e tests (test/e2e-node) share:
// the node's clients, registry and containerd, a namespace per test,
// sandboxes and snapshots on the real node, resumes, and the commands the
// tests run as a user would. Package test holds what the control-plane e2e
// shares too.
package nodeframework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
)

const (
	// SnapshotTimeout bounds a snapshot from creation to a terminal phase.
	SnapshotTimeout = 3 * time.Minute
	// EventTimeout bounds a wait for an event on a snapshot.
	EventTimeout = 2 * time.Minute
)

var (
	// c are the suite's own admin clients, from KUBECONFIG.
	c              *test.Clients
	localRegistry  string
	containerdSock string
)

// Init reads KUBECONFIG, LOCAL_REGISTRY and CONTAINERD_ADDRESS (test/cluster/env.sh) and builds Clients.
func Init() error {
	localRegistry = os.Getenv("LOCAL_REGISTRY")
	containerdSock = os.Getenv("CONTAINERD_ADDRESS")
	if os.Getenv("KUBECONFIG") == "" || localRegistry == "" || containerdSock == "" {
		return errors.New("source test/cluster/env.sh after test/cluster/node-up.sh (KUBECONFIG, LOCAL_REGISTRY, CONTAINERD_ADDRESS)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	c, err = test.NewClients(cfg)
	return err
}

// Clients are the suite's own admin clients, from KUBECONFIG (Init).
func Clients() *test.Clients { return c }

// LocalRegistry is the node's registry, LOCAL_REGISTRY (Init).
func LocalRegistry() string { return localRegistry }

// ContainerdSock is the node's containerd socket, CONTAINERD_ADDRESS (Init).
func ContainerdSock() string { return containerdSock }

// NewNamespace creates a namespace for one test and deletes it afterwards.
func NewNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-node-"}}
	ns, err := c.Kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, ns.Name)
		}
		_ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// Run runs a command (kubectl, tkn, crane from test/cluster/env.sh's PATH) and
// returns its standard output.
func Run(t *testing.T, stdin string, name string, args ...string) string {
	t.Helper()
	out, err := TryRun(stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

// TryRun is Run that returns the command's error instead of failing the test.
func TryRun(stdin string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	stdout, _, err := test.Run(cmd)
	return stdout, err
}

// RandomMarker returns unique file content for one container.
func RandomMarker(t *testing.T, container string) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return container + "-" + hex.EncodeToString(b) + "\n"
}

// SandboxPod is the spec of a sandbox's pod: an app and a sidecar of an
// image (the argument), both sleeping.
const SandboxPod = `
terminationGracePeriodSeconds: 1
containers:
  - name: app
    image: %[1]s
    command: ["/bin/sh", "-c", "exec sleep 2147483647"]
  - name: sidecar
    image: %[1]s
    command: ["/bin/sh", "-c", "exec sleep 2147483647"]
`

// CreateSandbox creates a BatchSandbox and its Running pod of busybox,
// playing OpenSandbox's BatchSandbox controller, and returns the pod.
func CreateSandbox(t *testing.T, namespace, name string) *corev1.Pod {
	t.Helper()
	return CreateSandboxOf(t, namespace, name, localRegistry+"/busybox:latest", 2*time.Minute)
}

// CreateSandboxOf creates a BatchSandbox and its pod of image, waits up to
// ready until the pod is Ready and returns it.
func CreateSandboxOf(t *testing.T, namespace, name, image string, ready time.Duration) *corev1.Pod {
	t.Helper()
	test.CreateSandbox(t.Context(), t, c, namespace, name, *test.MustParse[corev1.PodSpec](t, SandboxPod, image))
	Run(t, "", "kubectl", "-n", namespace, "wait", "--for=condition=Ready", "pod/"+name+"-0", "--timeout="+ready.String())
	pod, err := c.Kube.CoreV1().Pods(namespace).Get(t.Context(), name+"-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// CreateSnapshot creates a SandboxSnapshot of the sandbox.
func CreateSnapshot(t *testing.T, namespace, name, sandboxName string) *v1alpha1.SandboxSnapshot {
	t.Helper()
	return test.CreateSnapshot(t.Context(), t, c, namespace, name, sandboxName)
}

// WaitForPhase waits, with kubectl wait as a user would, for a phase.
func WaitForPhase(t *testing.T, namespace, name string, phase v1alpha1.SandboxSnapshotPhase) *v1alpha1.SandboxSnapshot {
	t.Helper()
	Run(t, "", "kubectl", "-n", namespace, "wait", "sbxsnap/"+name,
		"--for=jsonpath={.status.phase}="+string(phase), fmt.Sprintf("--timeout=%s", SnapshotTimeout))
	s, err := c.Sandbox.SandboxV1alpha1().SandboxSnapshots(namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// AssertNotPaused checks, through the node's containerd, that every
// container of the pod has a running task, not a paused one.
func AssertNotPaused(t *testing.T, pod *corev1.Pod) {
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

// TaskRunsOf lists the TaskRuns labelled with the snapshot's name and namespace.
func TaskRunsOf(t *testing.T, namespace, name string) []pipelinev1.TaskRun {
	t.Helper()
	return test.TaskRunsOf(t.Context(), t, c, namespace, name)
}

// ResumePod starts a pod from a snapshot's imageUris, as OpenSandbox
// rewrites a sandbox template's images, waits up to timeout until it is
// Ready and returns its name.
func ResumePod(t *testing.T, ns, name string, s *v1alpha1.SandboxSnapshot, timeout time.Duration) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n", name, ns)
	for _, cs := range s.Status.Containers {
		fmt.Fprintf(&b, "    - name: %s\n      image: %s\n      command: [\"/bin/sh\", \"-c\", \"exec sleep 2147483647\"]\n",
			cs.ContainerName, cs.ImageURI)
	}
	Run(t, b.String(), "kubectl", "apply", "-f", "-")
	Run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/"+name, "--timeout="+timeout.String())
	return name
}

// Eventually polls cond until it holds or the timeout passes.
func Eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// SetConfig patches config-snapshot, waits until the controller has loaded
// that version of it and fails the test unless the controller's line for it
// holds loaded; when the test ends, it restores what it changed and waits
// until the controller has loaded that too.
func SetConfig(t *testing.T, data map[string]any, loaded string) {
	t.Helper()
	version, restore := test.PatchSnapshotConfig(t, c, data)
	t.Cleanup(func() {
		if v := restore(); v != "" {
			waitConfigLoaded(t, v, "")
		}
	})
	waitConfigLoaded(t, version, loaded)
}

// waitConfigLoaded waits for the controller's log line of config-snapshot
// at resourceVersion version (it logs each version it loads, valid or not)
// and fails the test unless that line holds want.
func waitConfigLoaded(t *testing.T, version, want string) {
	t.Helper()
	key := `"resourceVersion":"` + version + `"`
	var line string
	Eventually(t, "the controller to load config-snapshot at resourceVersion "+version, time.Minute, func() (bool, error) {
		out, err := TryRun("", "kubectl", "-n", test.SystemNamespace, "logs", "deployment/sandbox-snapshot-controller")
		if err != nil {
			return false, nil
		}
		for l := range strings.SplitSeq(out, "\n") {
			if strings.Contains(l, "config-snapshot") && strings.Contains(l, key) {
				line = l
				return true, nil
			}
		}
		return false, nil
	})
	if !strings.Contains(line, want) {
		t.Fatalf("the controller loaded config-snapshot at resourceVersion %s without %s: %s", version, want, line)
	}
}

// dumpState logs what a failed test leaves behind, for the CI log.
func dumpState(t *testing.T, namespace string) {
	out, _ := TryRun("", "kubectl", "-n", namespace, "get", "sbxsnap,pods", "-o", "wide")
	t.Logf("state of %s:\n%s", namespace, out)
	out, _ = TryRun("", "kubectl", "-n", namespace, "get", "sbxsnap", "-o", "yaml")
	t.Logf("snapshots:\n%s", out)
	out, _ = TryRun("", "tkn", "-n", test.SystemNamespace, "taskrun", "list")
	t.Logf("TaskRuns:\n%s", out)
	out, _ = TryRun("", "kubectl", "-n", test.SystemNamespace, "logs", "deployment/sandbox-snapshot-controller", "--tail=50")
	t.Logf("controller log:\n%s", out)
}
