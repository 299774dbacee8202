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
	"io/fs"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// hibernatingPod runs, in one shell: a web server on port 8080, and a
// counter held only in a shell variable, written with a random mark through
// one open file descriptor (no append) ten times a second. A restarted
// process draws a new mark and truncates the file; one restored with the
// wrong offset overwrites earlier lines.
const hibernatingPod = `
terminationGracePeriodSeconds: 1
containers:
  - name: app
    image: %s
    command:
      - /bin/sh
      - -c
      - |
        mkdir -p /tmp/www && echo pong >/tmp/www/ping
        httpd -f -p 8080 -h /tmp/www &
        mark=$(head -c 16 /dev/urandom | sha256sum | head -c 16)
        exec 3>/tmp/counter
        i=0
        while :; do i=$((i+1)); echo "$mark $i" >&3; sleep 0.1; done
`

// memoryBase pushes busybox under a digest of its own and serves the node's
// registry on loopback for the test, and returns the image's name there.
// containerd 2.1's restore pulls a checkpoint's base image with its default
// resolver, which speaks plain HTTP only to localhost and reads neither the
// CRI's registry configuration nor its credentials; the digest of its own
// makes localhost the image's only name on the node, the one the checkpoint
// records.
func memoryBase(t *testing.T) string {
	t.Helper()
	src, err := name.ParseReference(nodeframework.LocalRegistry()+"/busybox:latest", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(src)
	if err != nil {
		t.Fatalf("reading %s: %v", src, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Env = append(cf.Config.Env, "HIBERNATE_TEST="+strconv.FormatInt(time.Now().UnixNano(), 10))
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return onLoopback(t, img, "memory/busybox:latest")
}

// onLoopback pushes img to the node's registry as ref (a repository and a
// tag), serves that registry on loopback for the test, and returns ref's
// name there.
func onLoopback(t *testing.T, img v1.Image, ref string) string {
	t.Helper()
	dst, err := name.ParseReference(nodeframework.LocalRegistry()+"/"+ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(dst, img); err != nil {
		t.Fatalf("pushing %s: %v", dst, err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: nodeframework.LocalRegistry()})
	host := test.ListenAndServe(t, "127.0.0.1:0", proxy)
	return "localhost:" + strings.TrimPrefix(host, "127.0.0.1:") + "/" + ref
}

// counterLines reads /tmp/counter in pod: its mark, and how many lines,
// which must count 1, 2, 3, ... under that one mark.
func counterLines(t *testing.T, ns, pod string) (string, int) {
	t.Helper()
	out := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod, "-c", "app", "--", "cat", "/tmp/counter")
	mark, n := "", 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m, count, _ := strings.Cut(line, " ")
		if mark == "" {
			mark = m
		}
		if m != mark || count != strconv.Itoa(n+1) {
			t.Fatalf("pod %s/%s: counter line %d is %q after mark %s: the counter restarted or the file offset moved", ns, pod, n+1, line, mark)
		}
		n++
	}
	return mark, n
}

// resultOf returns the value of tr's result name, "" when it has none.
func resultOf(tr *pipelinev1.TaskRun, name string) string {
	for _, r := range tr.Status.Results {
		if r.Name == name {
			return r.Value.StringVal
		}
	}
	return ""
}

// createMemorySnapshot asks for a memory snapshot name of sandbox sb in ns.
func createMemorySnapshot(t *testing.T, ns, sb, name string) {
	t.Helper()
	s := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{sandbox.SnapshotModeAnnotation: task.SnapshotModeMemory}},
		Spec: v1alpha1.SandboxSnapshotSpec{SandboxName: sb},
	}
	if _, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runSandbox creates sandbox sb in ns of one container, app, from spec with
// image, waits for its pod to be Ready and returns the pod.
func runSandbox(t *testing.T, ns, sb, spec, image string) *corev1.Pod {
	t.Helper()
	test.CreateSandbox(t.Context(), t, nodeframework.Clients(), ns, sb, *test.MustParse[corev1.PodSpec](t, spec, image))
	nodeframework.Run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/"+sb+"-0", "--timeout=2m")
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sb + "-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
}

// refusedAs asks for memory snapshot name of sandbox sb in ns and waits for it
// to fail with reason, its message holding each of want.
func refusedAs(t *testing.T, ns, sb, name, reason string, want ...string) {
	t.Helper()
	createMemorySnapshot(t, ns, sb, name)
	s := nodeframework.WaitForPhase(t, ns, name, v1alpha1.PhaseFailed)
	failed := s.Status.GetCondition(v1alpha1.ConditionFailed)
	if failed == nil || failed.Reason != reason {
		t.Errorf("Failed condition = %+v, want reason %s", failed, reason)
		return
	}
	for _, w := range want {
		if !strings.Contains(failed.Message, w) {
			t.Errorf("Failed condition's message %q does not say %q", failed.Message, w)
		}
	}
	t.Logf("refused: %s", failed.Message)
}

// fellBack sets memory-fallback Filesystem, asks for memory snapshot name of
// sandbox sb in ns, and checks that a filesystem snapshot was taken and said
// so.
func fellBack(t *testing.T, ns, sb, name string) {
	t.Helper()
	nodeframework.SetConfig(t, map[string]any{"memory-fallback": task.MemoryFallbackFilesystem}, `"memoryFallback":"Filesystem"`)
	createMemorySnapshot(t, ns, sb, name)
	s := nodeframework.WaitForPhase(t, ns, name, v1alpha1.PhaseSucceed)
	if ready := s.Status.GetCondition(v1alpha1.ConditionReady); ready == nil || ready.Reason != v1alpha1.ReasonMemorySnapshotFellBack {
		t.Errorf("Ready condition = %+v, want reason %s", ready, v1alpha1.ReasonMemorySnapshotFellBack)
	}
	if mode := resultOf(commitTaskRunOf(t, ns, s.Name), task.ResultSnapshotMode); mode != task.SnapshotModeFilesystem {
		t.Errorf("the fallback's TaskRun took %s %q, want %s", task.ResultSnapshotMode, mode, task.SnapshotModeFilesystem)
	}
}

// countsOn fails t unless pod's app container is not paused and its counter
// goes on.
func countsOn(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	nodeframework.AssertNotPaused(t, pod)
	_, n := counterLines(t, pod.Namespace, pod.Name)
	nodeframework.Eventually(t, "the counter to go on", 10*time.Second, func() (bool, error) {
		_, later := counterLines(t, pod.Namespace, pod.Name)
		return later > n, nil
	})
}

// TestMemorySnapshotResumesProcesses pauses a sandbox with a memory snapshot
// as OpenSandbox does (the snapshot, then the pod deleted) and resumes it
// from the imageUri: its processes go on where they were, the counter in a
// shell variable, the open file's offset and the listening socket with
// them. It pauses and resumes the resumed sandbox once more, as OpenSandbox
// does again and again: a restored container checkpoints as the first did.
func TestMemorySnapshotResumesProcesses(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	runSandbox(t, ns, "mem", hibernatingPod, memoryBase(t))
	nodeframework.Eventually(t, "the counter to pass 10", 30*time.Second, func() (bool, error) {
		_, n := counterLines(t, ns, "mem-0")
		return n >= 10, nil
	})
	mark, _ := counterLines(t, ns, "mem-0")
	for cycle := 1; cycle <= 2; cycle++ {
		createMemorySnapshot(t, ns, "mem", "mem-pause-"+strconv.Itoa(cycle))
		s := nodeframework.WaitForPhase(t, ns, "mem-pause-"+strconv.Itoa(cycle), v1alpha1.PhaseSucceed)
		_, atSnapshot := counterLines(t, ns, "mem-0")
		// The TaskRun's results, which OpenSandbox's CRD cannot prune as it
		// prunes status.pauseWindowMilliseconds.
		tr := commitTaskRunOf(t, ns, s.Name)
		if mode := resultOf(tr, task.ResultSnapshotMode); mode != task.SnapshotModeMemory {
			t.Errorf("cycle %d: TaskRun %s took %s %q, want %s", cycle, tr.Name, task.ResultSnapshotMode, mode, task.SnapshotModeMemory)
		}
		pw := resultOf(tr, task.ResultPauseWindowMS)
		if ms, err := strconv.Atoi(pw); err != nil || ms <= 0 {
			t.Errorf("cycle %d: TaskRun %s: %s is %q, want the checkpoint's freeze", cycle, tr.Name, task.ResultPauseWindowMS, pw)
		}
		t.Logf("cycle %d: memory snapshot %s: pause window %s, counter at %d", cycle, s.Status.Containers[0].ImageURI, pauseWindow(s), atSnapshot)
		nodeframework.AssertNotPaused(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mem-0"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}})
		nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "pod", "mem-0", "--wait=true", "--timeout=60s")

		// OpenSandbox's resume: the template's image becomes the imageUri.
		start := time.Now()
		spec := test.MustParse[corev1.PodSpec](t, hibernatingPod, s.Status.Containers[0].ImageURI)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mem-0", Labels: map[string]string{sandbox.BatchSandboxPodLabel: "mem"}}, Spec: *spec}
		if _, err := nodeframework.Clients().Kube.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		nodeframework.Run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/mem-0", "--timeout=2m")
		t.Logf("cycle %d: resumed pod Ready %v after its creation", cycle, time.Since(start).Round(100*time.Millisecond))
		// The restored counter goes on from the checkpoint, before atSnapshot
		// (the source ran on until its pod was deleted), under the first
		// pod's mark.
		rmark, n := counterLines(t, ns, "mem-0")
		if rmark != mark {
			t.Fatalf("cycle %d: after the resume: mark %s with %d lines, want mark %s (it was at %d after the snapshot)",
				cycle, rmark, n, mark, atSnapshot)
		}
		countsOn(t, pod)
		if got := strings.TrimSpace(nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", "mem-0", "-c", "app", "--", "wget", "-qO-", "http://127.0.0.1:8080/ping")); got != "pong" {
			t.Errorf("cycle %d: after the resume the listening socket answers %q, want pong", cycle, got)
		}
	}
}

// TestMemorySnapshotRefused takes a memory snapshot of a sandbox with a
// process CRIU refuses to dump (one in a nested user and PID namespace):
// the snapshot fails fast as MemorySnapshotUnsupported and the sandbox runs
// on, never left paused. With memory-fallback Filesystem the same request
// takes a filesystem snapshot instead, and says so.
func TestMemorySnapshotRefused(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	spec := strings.Replace(hibernatingPod, "        mark=$(", "        unshare -U -r -p -f sleep 100000 &\n        mark=$(", 1)
	pod := runSandbox(t, ns, "nested", spec, memoryBase(t))
	refusedAs(t, ns, "nested", "nested-pause", v1alpha1.ReasonMemorySnapshotUnsupported, "criu")
	countsOn(t, pod)
	fellBack(t, ns, "nested", "nested-fallback")
	countsOn(t, pod)
}

// TestMemorySnapshotBaseNotRestorable takes a memory snapshot of a sandbox
// whose image is on a registry containerd's restore cannot pull from: this
// cluster's, plain HTTP on the bridge's address, where the restore pulls a
// checkpoint's base image anonymously over HTTPS. The snapshot fails before
// the freeze as MemorySnapshotUnsupported, naming the base image, rather
// than succeeding into an image no node can resume, and the sandbox counts
// on.
func TestMemorySnapshotBaseNotRestorable(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := runSandbox(t, ns, "plain", hibernatingPod, nodeframework.LocalRegistry()+"/busybox:latest")
	refusedAs(t, ns, "plain", "plain-pause", v1alpha1.ReasonMemorySnapshotUnsupported, "base image "+nodeframework.LocalRegistry()+"/busybox@sha256:")
	countsOn(t, pod)
}

// TestMemorySnapshotNoRoom takes a memory snapshot of a sandbox holding
// 64 MiB on a node whose checkpoint-dir (a 32 MiB tmpfs here) has no room
// for it: the snapshot fails before the sandbox is frozen, saying so, not as
// MemorySnapshotUnsupported, and nothing is written there. With
// memory-fallback Filesystem the same request takes a filesystem snapshot
// instead, and says so.
func TestMemorySnapshotNoRoom(t *testing.T) {
	dir := tmpfs(t, "sso-e2e-noroom-", "32m")
	nodeframework.SetConfig(t, map[string]any{"checkpoint-dir": dir}, `"checkpointDir":"`+dir+`"`)

	ns := nodeframework.NewNamespace(t)
	spec := strings.Replace(hibernatingPod, "        mark=$(", "        hold=$(head -c 67108864 /dev/zero | tr '\\0' x)\n        mark=$(", 1)
	pod := runSandbox(t, ns, "big", spec, memoryBase(t))
	nodeframework.Eventually(t, "the counter to start", 30*time.Second, func() (bool, error) {
		out, err := nodeframework.TryRun("", "kubectl", "-n", ns, "exec", "big-0", "-c", "app", "--", "cat", "/tmp/counter")
		return err == nil && out != "", nil
	})
	refusedAs(t, ns, "big", "big-pause", v1alpha1.ReasonCommitJobFailed, "not enough disk space for the snapshot", dir+" (memory of container \"app\"")
	// Nothing but the node's disk ledger, which holds no reservation.
	var left []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir && p != filepath.Join(dir, ".disk-ledger") && p != filepath.Join(dir, ".disk-ledger", ".lock") {
			left = append(left, p)
		}
		return err
	})
	if err != nil || len(left) > 0 {
		t.Errorf("checkpoint-dir %s holds %v (%v), want nothing", dir, left, err)
	}
	countsOn(t, pod)
	fellBack(t, ns, "big", "big-fallback")
	countsOn(t, pod)
}
