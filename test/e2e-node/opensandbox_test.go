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
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// The tests named TestOpenSandbox* drive this operator through its real
// client: OpenSandbox's own controller (test/cluster/opensandbox-build.sh, its
// SandboxSnapshot reconciler off), which the suite starts when
// E2E_NODE_OPENSANDBOX_CONTROLLER names its binary. They pause and resume
// BatchSandboxes as OpenSandbox's server does, with spec.pause. The
// controller acts on every BatchSandbox, so test/e2e-node.sh runs these tests
// apart from the others, which play OpenSandbox's part by hand.

// openSandboxTimeout bounds a pause or a resume of a BatchSandbox.
const openSandboxTimeout = 3 * time.Minute

// openSandboxRuns is set while the suite runs OpenSandbox's controller.
var openSandboxRuns bool

// snapshotControllerOff is what OpenSandbox's controller logs when
// --enable-sandbox-snapshot-controller=false leaves its SandboxSnapshot
// controller out.
const snapshotControllerOff = "SandboxSnapshot controller disabled"

// startOpenSandbox starts OpenSandbox's controller when
// E2E_NODE_OPENSANDBOX_CONTROLLER names it, logging to
// E2E_NODE_OPENSANDBOX_LOG, and waits until it is ready. stop ends it.
func startOpenSandbox() (stop func(), err error) {
	bin := os.Getenv("E2E_NODE_OPENSANDBOX_CONTROLLER")
	if bin == "" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	probe := l.Addr().String()
	l.Close()
	logPath := os.Getenv("E2E_NODE_OPENSANDBOX_LOG")
	if logPath == "" {
		logPath = os.DevNull
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The switch of hack/opensandbox/snapshot-controller-switch.patch.
	cmd := exec.Command(bin, "--health-probe-bind-address="+probe, "--metrics-bind-address=0", "--leader-elect=false",
		"--enable-sandbox-snapshot-controller=false")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting OpenSandbox's controller %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
	}
	for deadline := time.Now().Add(time.Minute); ; {
		select {
		case err := <-exited:
			logFile.Close()
			return nil, fmt.Errorf("OpenSandbox's controller exited before it was ready (%v); its log: %s", err, logPath)
		case <-time.After(200 * time.Millisecond):
		}
		if resp, err := http.Get("http://" + probe + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				// Two controllers on one snapshot would commit it twice.
				if b, err := os.ReadFile(logPath); logPath != os.DevNull && (err != nil || !strings.Contains(string(b), snapshotControllerOff)) {
					stop()
					return nil, fmt.Errorf("OpenSandbox's controller runs its own SandboxSnapshot controller: its log %s does not say %q (%v)", logPath, snapshotControllerOff, err)
				}
				openSandboxRuns = true
				return stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("OpenSandbox's controller was not ready within a minute; its log: %s", logPath)
		}
	}
}

// requireOpenSandbox fails a test that needs OpenSandbox's controller when
// the suite does not run it.
func requireOpenSandbox(t *testing.T) {
	t.Helper()
	if !openSandboxRuns {
		t.Fatal("OpenSandbox's controller does not run: test/e2e-node.sh builds it and runs these tests with E2E_NODE_OPENSANDBOX_CONTROLLER")
	}
}

// newBatchSandbox creates a BatchSandbox of one two-container pod, as
// OpenSandbox's server does, and returns its pod once OpenSandbox's
// controller has created it and it is Ready.
func newBatchSandbox(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: sandbox.opensandbox.io/v1alpha1
kind: BatchSandbox
metadata:
  name: %s
  namespace: %s
spec:
  replicas: 1
  template:
    spec:%s`, name, ns, strings.ReplaceAll(fmt.Sprintf(nodeframework.SandboxPod, nodeframework.LocalRegistry()+"/busybox:latest"), "\n", "\n      "))
	nodeframework.Run(t, manifest, "kubectl", "apply", "-f", "-")
	return readySandboxPod(t, ns, name, "")
}

// readySandboxPod waits until the sandbox's pod <name>-0, of another UID
// than previous, is Ready, and returns it.
func readySandboxPod(t *testing.T, ns, name string, previous types.UID) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	nodeframework.Eventually(t, fmt.Sprintf("OpenSandbox to run a Ready pod %s/%s-0", ns, name), openSandboxTimeout, func() (bool, error) {
		p, err := nodeframework.Clients().Kube.CoreV1().Pods(ns).Get(t.Context(), name+"-0", metav1.GetOptions{})
		if apierrs.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		pod = p
		return p.UID != previous && p.DeletionTimestamp == nil && podReady(p), nil
	})
	return pod
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setPause writes the pause intent as OpenSandbox's server does and waits
// until the BatchSandbox reaches phase.
func setPause(t *testing.T, ns, name string, pause bool, phase string) {
	t.Helper()
	nodeframework.Run(t, "", "kubectl", "-n", ns, "patch", "batchsandbox", name, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"pause":%t}}`, pause))
	_, err := nodeframework.TryRun("", "kubectl", "-n", ns, "wait", "batchsandbox/"+name, "--for=jsonpath={.status.phase}="+phase,
		"--timeout="+openSandboxTimeout.String())
	if err == nil {
		return
	}
	// A pause waits on its snapshot: say where that stands.
	snapshots, _ := nodeframework.TryRun("", "kubectl", "-n", ns, "get", "sandboxsnapshots", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.phase}: {.status.conditions[?(@.type=="Ready")].message}{"\n"}{end}`)
	t.Fatalf("BatchSandbox %s/%s is not %s after %v (%v); its namespace's snapshots:\n%s", ns, name, phase, openSandboxTimeout, err, snapshots)
}

// writeData writes n random bytes to path in each container, passing
// them as an argument (kubectl exec -i has dropped bytes of stdin), checks
// what landed, and returns them by container.
func writeData(t *testing.T, ns, pod, path string, n int, containers ...string) map[string][]byte {
	t.Helper()
	data := map[string][]byte{}
	for _, ctr := range containers {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod, "-c", ctr, "--", "/bin/sh", "-c", `printf %s "$1" | base64 -d > "$2"`,
			"sh", base64.StdEncoding.EncodeToString(b), path)
		checkData(t, ns, pod, path, map[string][]byte{ctr: b})
		data[ctr] = b
	}
	return data
}

// checkData checks byte for byte that path holds want's data in each of
// want's containers.
func checkData(t *testing.T, ns, pod, path string, want map[string][]byte) {
	t.Helper()
	for ctr, b := range want {
		out := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod, "-c", ctr, "--", "base64", path)
		got, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(out), ""))
		if err != nil {
			t.Fatalf("reading %s of %s/%s container %s: %v", path, ns, pod, ctr, err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s of %s/%s container %s holds %d bytes that differ from the %d written", path, ns, pod, ctr, len(got), len(b))
		}
	}
}

// pausedSnapshot returns the snapshot OpenSandbox made to pause the sandbox,
// and checks that the pause is deleting the sandbox's pod.
func pausedSnapshot(t *testing.T, ns, name string) *v1alpha1.SandboxSnapshot {
	t.Helper()
	s, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), name+"-pause", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the paused BatchSandbox %s/%s has no snapshot %s-pause: %v", ns, name, name, err)
	}
	if s.Status.Phase != v1alpha1.PhaseSucceed {
		t.Fatalf("snapshot %s/%s is %s with the BatchSandbox Paused, want %s", ns, s.Name, s.Status.Phase, v1alpha1.PhaseSucceed)
	}
	for _, cs := range s.Status.Containers {
		if cs.ImageDigest == "" {
			t.Errorf("snapshot %s/%s: container %s has no imageDigest", ns, s.Name, cs.ContainerName)
		}
	}
	// OpenSandbox marks the sandbox Paused once it has asked for the pod's deletion.
	if pod, err := nodeframework.Clients().Kube.CoreV1().Pods(ns).Get(t.Context(), name+"-0", metav1.GetOptions{}); err == nil && pod.DeletionTimestamp == nil {
		t.Errorf("pod %s/%s-0 is not being deleted with the BatchSandbox Paused", ns, name)
	} else if err != nil && !apierrs.IsNotFound(err) {
		t.Fatal(err)
	}
	return s
}

// resume resumes the sandbox, checks that its new pod runs from the pause
// snapshot's images, and waits until OpenSandbox has deleted that snapshot
// and this operator its TaskRuns.
func resume(t *testing.T, ns, name string, s *v1alpha1.SandboxSnapshot, previous types.UID) *corev1.Pod {
	t.Helper()
	setPause(t, ns, name, false, "Succeed")
	pod := readySandboxPod(t, ns, name, previous)
	images := map[string]string{}
	for _, ctr := range pod.Spec.Containers {
		images[ctr.Name] = ctr.Image
	}
	for _, cs := range s.Status.Containers {
		if images[cs.ContainerName] != cs.ImageURI {
			t.Errorf("resumed pod %s/%s container %s runs %q, want the snapshot's %q", ns, pod.Name, cs.ContainerName, images[cs.ContainerName], cs.ImageURI)
		}
	}
	test.WaitForSnapshotGone(t.Context(), t, nodeframework.Clients(), ns, s.Name, time.Minute)
	nodeframework.Eventually(t, "the TaskRuns of "+ns+"/"+s.Name+" to be deleted", time.Minute, func() (bool, error) {
		return len(nodeframework.TaskRunsOf(t, ns, s.Name)) == 0, nil
	})
	return pod
}

// TestOpenSandboxPauseResumeTwice pauses and resumes a two-container
// BatchSandbox twice through OpenSandbox's controller; each resume has all
// the data written before each pause, byte for byte.
func TestOpenSandboxPauseResumeTwice(t *testing.T) {
	requireOpenSandbox(t)
	ns := nodeframework.NewNamespace(t)
	pod := newBatchSandbox(t, ns, "sb")
	written := map[string]map[string][]byte{}
	for cycle := 1; cycle <= 2; cycle++ {
		path := fmt.Sprintf("/cycle-%d.bin", cycle)
		written[path] = writeData(t, ns, pod.Name, path, 64<<10, "app", "sidecar")
		setPause(t, ns, "sb", true, "Paused")
		s := pausedSnapshot(t, ns, "sb")
		t.Logf("cycle %d: paused, snapshot %s has %v", cycle, s.Name, s.Status.Containers)
		pod = resume(t, ns, "sb", s, pod.UID)
		for p, want := range written {
			checkData(t, ns, pod.Name, p, want)
		}
	}
}

// TestOpenSandboxPauseDuringPublicSnapshot pauses a sandbox while a public
// snapshot of it (osb-snap-<id>, as OpenSandbox's server names them) is
// committing: both succeed, one after the other, and the resumed sandbox has
// its data.
func TestOpenSandboxPauseDuringPublicSnapshot(t *testing.T) {
	requireOpenSandbox(t)
	ns := nodeframework.NewNamespace(t)
	pod := newBatchSandbox(t, ns, "sb")
	data := writeData(t, ns, pod.Name, "/data.bin", 64<<10, "app", "sidecar")
	// A large change keeps the public snapshot committing while the pause arrives.
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--", "dd", "if=/dev/urandom", "of=/large.bin", "bs=1M", "count=192")

	public := "osb-snap-" + strings.ToLower(rand.Text()[:8])
	nodeframework.CreateSnapshot(t, ns, public, "sb")
	nodeframework.Run(t, "", "kubectl", "-n", ns, "wait", "sbxsnap/"+public, "--for=jsonpath={.status.phase}=Committing", "--timeout=2m")
	setPause(t, ns, "sb", true, "Paused")
	s := pausedSnapshot(t, ns, "sb")
	p, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), public, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != v1alpha1.PhaseSucceed {
		t.Fatalf("public snapshot %s is %s once the pause has succeeded, want %s", public, p.Status.Phase, v1alpha1.PhaseSucceed)
	}
	// The commits of one pod run one at a time: the pause's TaskRun is
	// made once the public snapshot's has ended. (OpenSandbox's CRD prunes
	// the snapshots' own start and completion times.)
	var ended time.Time
	for _, tr := range nodeframework.TaskRunsOf(t, ns, public) {
		if tr.Status.CompletionTime != nil && tr.Status.CompletionTime.After(ended) {
			ended = tr.Status.CompletionTime.Time
		}
	}
	pauseRuns := nodeframework.TaskRunsOf(t, ns, s.Name)
	if ended.IsZero() || len(pauseRuns) == 0 {
		t.Fatalf("found no ended TaskRun of %s or no TaskRun of %s", public, s.Name)
	}
	for _, tr := range pauseRuns {
		if tr.CreationTimestamp.Time.Before(ended.Truncate(time.Second)) {
			t.Errorf("TaskRun %s of the pause was made at %v, before the public snapshot's commit ended at %v", tr.Name, tr.CreationTimestamp, ended)
		}
	}
	pod = resume(t, ns, "sb", s, pod.UID)
	checkData(t, ns, pod.Name, "/data.bin", data)
	test.DeleteSnapshot(t.Context(), t, nodeframework.Clients(), ns, public, time.Minute)
}

// TestOpenSandboxPauseOnCordonedNode pauses a sandbox on a cordoned node, as
// a drain does before it evicts: the commit still runs there.
func TestOpenSandboxPauseOnCordonedNode(t *testing.T) {
	requireOpenSandbox(t)
	ns := nodeframework.NewNamespace(t)
	pod := newBatchSandbox(t, ns, "sb")
	data := writeData(t, ns, pod.Name, "/data.bin", 64<<10, "app", "sidecar")
	node := pod.Spec.NodeName
	uncordon := func() {
		if _, err := nodeframework.TryRun("", "kubectl", "uncordon", node); err != nil {
			t.Errorf("uncordoning node %s: %v", node, err)
		}
	}
	t.Cleanup(uncordon)
	nodeframework.Run(t, "", "kubectl", "cordon", node)
	setPause(t, ns, "sb", true, "Paused")
	s := pausedSnapshot(t, ns, "sb")
	uncordon() // the node is back before the resume, as after a drain
	pod = resume(t, ns, "sb", s, pod.UID)
	checkData(t, ns, pod.Name, "/data.bin", data)
}

// TestOpenSandboxDeletePaused deletes a paused BatchSandbox under the Delete
// policy: its snapshot goes with it, and so do the TaskRuns, the node's
// copies of the images and the registry's.
func TestOpenSandboxDeletePaused(t *testing.T) {
	requireOpenSandbox(t)
	nodeframework.SetConfig(t, map[string]any{"image-deletion-policy": "Delete"}, `"imageDeletionPolicy":"Delete"`)
	ns := nodeframework.NewNamespace(t)
	pod := newBatchSandbox(t, ns, "sb")
	writeData(t, ns, pod.Name, "/data.bin", 64<<10, "app", "sidecar")
	setPause(t, ns, "sb", true, "Paused")
	s := pausedSnapshot(t, ns, "sb")
	refs := test.PinnedDigests(t, s)
	ctx, is := nodeImages(t)
	for _, ref := range refs {
		if _, err := is.Get(ctx, ref.String()); err != nil {
			t.Fatalf("the node does not keep %s for the resume: %v", ref, err)
		}
	}
	if len(nodeframework.TaskRunsOf(t, ns, s.Name)) == 0 {
		t.Fatalf("snapshot %s/%s has no TaskRun to clean up", ns, s.Name)
	}

	nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "batchsandbox", "sb", "--wait=true", "--timeout=60s")
	test.WaitForSnapshotGone(t.Context(), t, nodeframework.Clients(), ns, s.Name, time.Minute)
	nodeframework.Eventually(t, "the TaskRuns of "+ns+"/"+s.Name+" to be deleted", 2*time.Minute, func() (bool, error) {
		return len(nodeframework.TaskRunsOf(t, ns, s.Name)) == 0, nil
	})
	nodeframework.Eventually(t, "the node's copies of the snapshot's images to be removed", 2*time.Minute, func() (bool, error) {
		for _, ref := range refs {
			if _, err := is.Get(ctx, ref.String()); !errdefs.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	nodeframework.Eventually(t, "the registry to drop the snapshot's images", 2*time.Minute, func() (bool, error) {
		for _, ref := range refs {
			if test.ManifestHeld(t.Context(), t, ref) {
				return false, nil
			}
		}
		return true, nil
	})
}
