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

package resources

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

func testSource() (*v1alpha1.SandboxSnapshot, Source) {
	s := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "snap", UID: "snap-uid"},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: "sb"},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "sb-0", UID: "pod-uid"},
		Spec: corev1.PodSpec{
			NodeName:    "node-1",
			Tolerations: []corev1.Toleration{{Key: "sandbox", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
	return s, Source{Pod: pod, Containers: []v1alpha1.ContainerSnapshot{
		{ContainerName: "app", ImageURI: "r.test/s/sb-app:snap-gen1"},
		{ContainerName: "sidecar", ImageURI: "r.test/s/sb-sidecar:snap-gen1"},
	}}
}

func TestMakeTaskRun(t *testing.T) {
	s, src := testSource()
	cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{
		config.RegistryKey: "r.test/s", config.PushSecretKey: "push", config.InsecureRegistryKey: "true",
		config.CommitTimeoutKey: "90s", config.ContainerdSocketKey: "/run/k3s/containerd/containerd.sock",
		config.OverlayfsRootKey: "/data/ctrd/io.containerd.snapshotter.v1.overlayfs",
		config.MaxPauseKey:      "45s", config.KeepLocalKey: "false", config.KeepLocalMaxSizeKey: "5Gi",
		config.DiskReserveKey: "1%",
	}})
	tr := MakeTaskRun(s, src, cfg, "sandbox-snapshot-system")

	// sha256("team-a/snap") begins 05307b.
	if tr.Name != "team-a-snap-05307b-commit" || tr.Namespace != "sandbox-snapshot-system" {
		t.Errorf("TaskRun %s/%s, want sandbox-snapshot-system/team-a-snap-05307b-commit", tr.Namespace, tr.Name)
	}
	wantLabels := map[string]string{
		"sandbox.opensandbox.io/sandbox-snapshot-name":      "snap",
		"sandbox.opensandbox.io/sandbox-snapshot-namespace": "team-a",
		"sandbox.opensandbox.io/sandbox-name":               "sb",
		"sandbox.opensandbox.io/sandbox-snapshot-uid":       "snap-uid",
		"sandbox.opensandbox.io/source-pod-uid":             "pod-uid",
		"app.kubernetes.io/managed-by":                      "sandbox-snapshot-operator",
	}
	if diff := cmp.Diff(wantLabels, tr.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if tr.Spec.TaskSpec != nil || tr.Spec.TaskRef == nil || tr.Spec.TaskRef.Name != "sandbox-commit" {
		t.Errorf("TaskRun must reference Task sandbox-commit, got ref %+v spec %v", tr.Spec.TaskRef, tr.Spec.TaskSpec)
	}
	wantParams := map[string]pipelinev1.ParamValue{
		"pod-name":          *pipelinev1.NewStructuredValues("sb-0"),
		"pod-namespace":     *pipelinev1.NewStructuredValues("team-a"),
		"pod-uid":           *pipelinev1.NewStructuredValues("pod-uid"),
		"run-id":            *pipelinev1.NewStructuredValues("snap-uid"),
		"mode":              *pipelinev1.NewStructuredValues("commit"),
		"containers":        {Type: pipelinev1.ParamTypeArray, ArrayVal: []string{"app=r.test/s/sb-app:snap-gen1", "sidecar=r.test/s/sb-sidecar:snap-gen1"}},
		"insecure-registry": *pipelinev1.NewStructuredValues("true"),
		"max-layers":        *pipelinev1.NewStructuredValues("16"),
		// The Task's tunable params, from config-snapshot: with the Task
		// pinned in a bundle, nothing else can change them.
		"max-pause":           *pipelinev1.NewStructuredValues("45s"),
		"keep-local":          *pipelinev1.NewStructuredValues("false"),
		"keep-local-max-size": *pipelinev1.NewStructuredValues("5Gi"),
		"disk-reserve":        *pipelinev1.NewStructuredValues("1%"),
		"overlayfs-root":      *pipelinev1.NewStructuredValues("/data/ctrd/io.containerd.snapshotter.v1.overlayfs"),
		"checkpoint-dir":      *pipelinev1.NewStructuredValues("/var/lib/sandbox-snapshot-operator/checkpoints"),
	}
	gotParams := map[string]pipelinev1.ParamValue{}
	for _, p := range tr.Spec.Params {
		gotParams[p.Name] = p.Value
	}
	if diff := cmp.Diff(wantParams, gotParams); diff != "" {
		t.Errorf("params (-want +got):\n%s", diff)
	}
	if tr.Spec.Timeout.Duration.String() != "1m30s" {
		t.Errorf("timeout = %v, want 1m30s", tr.Spec.Timeout.Duration)
	}

	pt := tr.Spec.PodTemplate
	terms := pt.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Key != "metadata.name" ||
		terms[0].MatchFields[0].Operator != corev1.NodeSelectorOpIn || !cmp.Equal(terms[0].MatchFields[0].Values, []string{"node-1"}) {
		t.Errorf("node affinity does not pin node-1: %+v", terms)
	}
	// Cordoned, draining and tainted nodes: the pod tolerates every taint of
	// the one node it is pinned to.
	if !cmp.Equal(pt.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}) {
		t.Errorf("tolerations = %v, want one that tolerates every taint", pt.Tolerations)
	}
	if pt.AutomountServiceAccountToken == nil || *pt.AutomountServiceAccountToken {
		t.Error("the commit pod must not mount a service account token")
	}
	if pt.PriorityClassName == nil || *pt.PriorityClassName != "sandbox-snapshot-commit" {
		t.Errorf("priorityClassName = %v, want sandbox-snapshot-commit: evicted after the node's other workloads", pt.PriorityClassName)
	}
	wantVolumes := []corev1.Volume{{
		Name: "containerd-socket",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: "/run/k3s/containerd/containerd.sock", Type: ptr.To(corev1.HostPathSocket)}},
	}, {
		Name: "containerd-overlayfs",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: "/data/ctrd/io.containerd.snapshotter.v1.overlayfs", Type: ptr.To(corev1.HostPathDirectoryOrCreate)}},
	}, {
		// A filesystem snapshot too: its commit step sweeps the memory
		// snapshots of runs that are over.
		Name: "checkpoints",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: "/var/lib/sandbox-snapshot-operator/checkpoints", Type: ptr.To(corev1.HostPathDirectoryOrCreate)}},
	}, {
		// No registry-ca-configmap: the system's roots alone.
		Name:         "registry-ca",
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
	}}
	if diff := cmp.Diff(wantVolumes, []corev1.Volume(pt.Volumes)); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	ws := tr.Spec.Workspaces
	if len(ws) != 1 || ws[0].Name != "dockerconfig" || ws[0].Secret == nil || ws[0].Secret.SecretName != "push" ||
		!cmp.Equal(ws[0].Secret.Items, []corev1.KeyToPath{{Key: ".dockerconfigjson", Path: "config.json"}}) {
		t.Errorf("dockerconfig workspace = %+v", ws)
	}
}

// TestMakeTaskRunOverlayfsCopyOff checks that with the copy turned off the
// commit step gets an empty directory where the Task mounts the snapshots.
func TestMakeTaskRunOverlayfsCopyOff(t *testing.T) {
	s, src := testSource()
	cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{
		config.RegistryKey: "r.test/s", config.OverlayfsRootKey: "",
	}})
	tr := MakeTaskRun(s, src, cfg, "ns")
	vols := tr.Spec.PodTemplate.Volumes
	if len(vols) != 4 || vols[1].Name != "containerd-overlayfs" || vols[1].EmptyDir == nil || vols[1].HostPath != nil {
		t.Errorf("volumes = %+v, want containerd-overlayfs as an emptyDir", vols)
	}
	for _, p := range tr.Spec.Params {
		if p.Name == "overlayfs-root" && p.Value.StringVal != config.DefaultOverlayfsRoot {
			t.Errorf("overlayfs-root = %q, want the Task's default %q", p.Value.StringVal, config.DefaultOverlayfsRoot)
		}
	}
}

// TestMakeTaskRunMemory checks that a memory snapshot passes the mode, the
// fallback, the restore base, whether anonymous pulls are allowed and the
// checkpoint directory, and gets that host directory as the checkpoints
// volume.
func TestMakeTaskRunMemory(t *testing.T) {
	const restoreBase = "r.test/restore-base@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
	s, src := testSource()
	src.Mode = task.SnapshotModeMemory
	cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{
		config.RegistryKey: "r.test/s", config.MemoryFallbackKey: "Filesystem", config.CheckpointDirKey: "/srv/ck",
		config.MemoryRestoreBaseKey: restoreBase, config.MemoryAnonymousPullKey: "Allow",
	}})
	tr := MakeTaskRun(s, src, cfg, "ns")
	got := map[string]string{}
	for _, p := range tr.Spec.Params {
		got[p.Name] = p.Value.StringVal
	}
	for k, v := range map[string]string{"snapshot-mode": "Memory", "memory-fallback": "Filesystem", "checkpoint-dir": "/srv/ck",
		"memory-restore-base": restoreBase, "memory-anonymous-pull": "Allow"} {
		if got[k] != v {
			t.Errorf("param %s = %q, want %q", k, got[k], v)
		}
	}
	vols := tr.Spec.PodTemplate.Volumes
	want := corev1.Volume{Name: "checkpoints", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: "/srv/ck", Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}}
	if len(vols) != 4 || !cmp.Equal(vols[2], want) {
		t.Errorf("volumes = %+v, want the third %+v", vols, want)
	}
}

func TestMakeTaskRunWithoutPushSecret(t *testing.T) {
	s, src := testSource()
	cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{config.RegistryKey: "r.test/s"}})
	if ws := MakeTaskRun(s, src, cfg, "ns").Spec.Workspaces; len(ws) != 0 {
		t.Errorf("workspaces = %+v, want none without a push Secret", ws)
	}
}

// TestMakeTaskRunRegistryCA: with registry-ca-configmap the commit pod
// mounts that ConfigMap as the registry's CAs, in every mode.
func TestMakeTaskRunRegistryCA(t *testing.T) {
	s, src := testSource()
	cfg, err := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{config.RegistryKey: "r.test/s", config.RegistryCAConfigMapKey: "corp-ca"}})
	if err != nil {
		t.Fatal(err)
	}
	want := corev1.Volume{Name: "registry-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "corp-ca"}}}}
	for _, tr := range []*pipelinev1.TaskRun{MakeTaskRun(s, src, cfg, "ns"), MakeUnpauseTaskRun(s, src.Pod, cfg, "ns"), MakeReleaseTaskRun(s, cfg, "ns")} {
		if vols := tr.Spec.PodTemplate.Volumes; len(vols) != 4 || !cmp.Equal(vols[3], want) {
			t.Errorf("TaskRun %s: volumes %v, want the fourth %v", tr.Name, vols, want)
		}
	}
}

// TestMakeTaskRunEphemeralStorage: the commit step requests and is limited
// to commit-ephemeral-storage (20Gi by default), so that the scheduler and
// the kubelet count the scratch it writes; "0" declares none, and the
// unpause and release TaskRuns, which write nothing, declare none either.
func TestMakeTaskRunEphemeralStorage(t *testing.T) {
	s, src := testSource()
	for _, tc := range []struct {
		value, want string
	}{{"", "20Gi"}, {"512Mi", "512Mi"}, {"0", ""}} {
		data := map[string]string{config.RegistryKey: "r.test/s"}
		if tc.value != "" {
			data[config.CommitEphemeralStorageKey] = tc.value
		}
		cfg, err := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: data})
		if err != nil {
			t.Fatal(err)
		}
		tr := MakeTaskRun(s, src, cfg, "ns")
		if tc.want == "" {
			if len(tr.Spec.StepSpecs) != 0 {
				t.Errorf("commit-ephemeral-storage %q: step specs %v, want none", tc.value, tr.Spec.StepSpecs)
			}
			continue
		}
		q := resource.MustParse(tc.want)
		rl := corev1.ResourceList{corev1.ResourceEphemeralStorage: q}
		want := []pipelinev1.TaskRunStepSpec{{Name: "commit", ComputeResources: corev1.ResourceRequirements{Requests: rl, Limits: rl}}}
		if d := cmp.Diff(want, tr.Spec.StepSpecs); d != "" {
			t.Errorf("commit-ephemeral-storage %q: step specs (-want +got):\n%s", tc.value, d)
		}
		for _, other := range []*pipelinev1.TaskRun{MakeUnpauseTaskRun(s, src.Pod, cfg, "ns"), MakeReleaseTaskRun(s, cfg, "ns")} {
			if len(other.Spec.StepSpecs) != 0 {
				t.Errorf("TaskRun %s declares %v, want nothing", other.Name, other.Spec.StepSpecs)
			}
		}
	}
}

func TestMakeUnpauseTaskRun(t *testing.T) {
	s, src := testSource()
	cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{config.RegistryKey: "r.test/s"}})
	tr := MakeUnpauseTaskRun(s, src.Pod, cfg, "ns")
	if tr.Name != "team-a-snap-05307b-unpause" {
		t.Errorf("name = %q", tr.Name)
	}
	for _, p := range tr.Spec.Params {
		if p.Name == "mode" && p.Value.StringVal != "unpause" {
			t.Errorf("mode = %q, want unpause", p.Value.StringVal)
		}
		// It thaws only what the snapshot's commit froze.
		if p.Name == "run-id" && p.Value.StringVal != "snap-uid" {
			t.Errorf("run-id = %q, want the snapshot's UID, as the commit's", p.Value.StringVal)
		}
		if p.Name == "containers" {
			t.Error("an unpause TaskRun needs no containers param")
		}
	}
	if tr.Spec.PodTemplate.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0] != "node-1" {
		t.Error("the unpause TaskRun must run on the sandbox's node")
	}
	checkSweeps(t, tr, cfg.CheckpointDir)
}

// checkSweeps checks that tr's commit step sees the node's checkpoint
// directory, as a memory snapshot's does, to remove the memory snapshots
// of runs that are over.
func checkSweeps(t *testing.T, tr *pipelinev1.TaskRun, dir string) {
	t.Helper()
	got := ""
	for _, p := range tr.Spec.Params {
		if p.Name == "checkpoint-dir" {
			got = p.Value.StringVal
		}
	}
	want := corev1.Volume{Name: "checkpoints", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: dir, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}}
	if vols := tr.Spec.PodTemplate.Volumes; got != dir || len(vols) != 4 || !cmp.Equal(vols[2], want) {
		t.Errorf("%s: param checkpoint-dir %q and volumes %+v, want %q and the third %+v", tr.Name, got, vols, dir, want)
	}
}

// TestMakeReleaseTaskRun checks the TaskRun that gives back what a deleted
// snapshot kept on its node: on that node, with the snapshot's UID as run
// ID, bounded like an unpause, and naming no pod UID, which the commit gate
// reads as a TaskRun holding the pod.
func TestMakeReleaseTaskRun(t *testing.T) {
	s, src := testSource()
	cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{config.RegistryKey: "r.test/s"}})
	s.Status.MarkCommitting(metav1.Now(), src.Pod.Name, src.Pod.Spec.NodeName, src.Containers, v1alpha1.TaskRunReference{}, metav1.Now())
	tr := MakeReleaseTaskRun(s, cfg, "ns")
	if tr.Name != "team-a-snap-05307b-release" || tr.Namespace != "ns" {
		t.Errorf("TaskRun %s/%s", tr.Namespace, tr.Name)
	}
	want := map[string]string{"mode": "release", "run-id": "snap-uid", "pod-name": "sb-0", "pod-namespace": "team-a"}
	for _, p := range tr.Spec.Params {
		if w, ok := want[p.Name]; ok && p.Value.StringVal != w {
			t.Errorf("param %s = %q, want %q", p.Name, p.Value.StringVal, w)
		}
		delete(want, p.Name)
		if p.Name == "pod-uid" || p.Name == "containers" {
			t.Errorf("a release TaskRun passes param %s", p.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("params missing: %v", want)
	}
	if _, ok := tr.Labels[sandbox.SourcePodUIDLabel]; ok {
		t.Errorf("a release TaskRun carries %s, which makes the pod's commits wait for it", sandbox.SourcePodUIDLabel)
	}
	if tr.Spec.Timeout.Duration != UnpauseTimeout {
		t.Errorf("timeout %v, want %v", tr.Spec.Timeout.Duration, UnpauseTimeout)
	}
	if tr.Spec.PodTemplate.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0] != "node-1" {
		t.Error("the release TaskRun must run on the node that kept the images")
	}
	checkSweeps(t, tr, cfg.CheckpointDir)
}

func TestSourceOf(t *testing.T) {
	s, src := testSource()
	cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{config.RegistryKey: "r.test/s"}})
	pod, node, containers, err := SourceOf(MakeTaskRun(s, src, cfg, "ns"))
	if err != nil || pod != "sb-0" || node != "node-1" || !cmp.Equal(containers, src.Containers) {
		t.Errorf("SourceOf(MakeTaskRun()) = %q, %q, %v, %v; want sb-0, node-1, %v", pod, node, containers, err, src.Containers)
	}
	if _, _, _, err := SourceOf(MakeUnpauseTaskRun(s, src.Pod, cfg, "ns")); err == nil || !strings.Contains(err.Error(), "names no pod, node or containers") {
		t.Errorf("SourceOf(an unpause TaskRun) = %v, want an error naming what is missing", err)
	}
	bad := MakeTaskRun(s, src, cfg, "ns")
	for i := range bad.Spec.Params {
		if bad.Spec.Params[i].Name == task.ParamContainers {
			bad.Spec.Params[i].Value.ArrayVal = []string{"no-image"}
		}
	}
	if _, _, _, err := SourceOf(bad); err == nil || !strings.Contains(err.Error(), "param containers") {
		t.Errorf("SourceOf(a malformed containers param) = %v, want an error naming the param", err)
	}
}

// TestPushedImages reads what a commit TaskRun reported pushing: each
// container's repository with its digest, and nothing before it succeeded.
func TestPushedImages(t *testing.T) {
	const a = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	const b = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	s, src := testSource()
	cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{config.RegistryKey: "r.test/s"}})
	tr := MakeTaskRun(s, src, cfg, "ns")
	if got, err := PushedImages(tr); got != nil || err != nil {
		t.Errorf("PushedImages(a running TaskRun) = %v, %v; want none", got, err)
	}
	tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue})
	tr.Status.Results = []pipelinev1.TaskRunResult{{Name: task.ResultDigests, Value: *pipelinev1.NewStructuredValues(a + "," + b)}}
	got, err := PushedImages(tr)
	var names []string
	for _, d := range got {
		names = append(names, d.Name())
	}
	if want := []string{"r.test/s/sb-app@" + a, "r.test/s/sb-sidecar@" + b}; err != nil || !cmp.Equal(names, want) {
		t.Errorf("PushedImages(a succeeded TaskRun) = %v, %v; want %v", names, err, want)
	}
	tr.Status.Results[0].Value = *pipelinev1.NewStructuredValues(a)
	if _, err := PushedImages(tr); err == nil || !strings.Contains(err.Error(), "TaskRun ns/") {
		t.Errorf("PushedImages(one digest for two containers) = %v, want an error naming the TaskRun", err)
	}
}

// TestTaskRunNamesFitLabels checks that TaskRun names stay within 63
// characters, and distinct, for the longest names Kubernetes allows.
func TestTaskRunNamesFitLabels(t *testing.T) {
	long := strings.Repeat("n", 63)
	for _, tc := range []struct{ namespace, name string }{
		{"a", "b"},
		{long, strings.Repeat("s", 253)},
		{long, strings.Repeat("s", 252) + "t"},
	} {
		s := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: tc.namespace, Name: tc.name}}
		commit, unpause := names.CommitTaskRun(s), names.UnpauseTaskRun(s)
		for _, n := range []string{commit, unpause} {
			if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 {
				t.Errorf("TaskRun name %q for %s/%s: %v", n, tc.namespace, tc.name[:1], msgs)
			}
		}
		if commit == unpause {
			t.Errorf("commit and unpause TaskRuns share the name %q", commit)
		}
	}
	for _, pair := range [][2]*v1alpha1.SandboxSnapshot{{
		{ObjectMeta: metav1.ObjectMeta{Namespace: long, Name: strings.Repeat("s", 253)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: long, Name: strings.Repeat("s", 252) + "t"}},
	}, {
		// "team" + "a-snap" and "team-a" + "snap" read alike once joined.
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "a-snap"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "snap"}},
	}} {
		if names.CommitTaskRun(pair[0]) == names.CommitTaskRun(pair[1]) || names.UnpauseTaskRun(pair[0]) == names.UnpauseTaskRun(pair[1]) {
			t.Errorf("%s/%s and %s/%s share a TaskRun name", pair[0].Namespace, pair[0].Name[:1], pair[1].Namespace, pair[1].Name[:1])
		}
	}
}

// TestTaskRef checks which Task the commit and the unpause TaskRuns run: the
// namespaced Task by default, or the Task of the configured bundle through
// Tekton's bundles resolver, the same for both.
func TestTaskRef(t *testing.T) {
	const bundle = "r.test/tasks/sandbox-commit@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
	for _, tc := range []struct {
		name string
		data map[string]string
		want *pipelinev1.TaskRef
	}{{
		name: "default: the namespaced Task",
		data: map[string]string{},
		want: &pipelinev1.TaskRef{Name: "sandbox-commit", Kind: pipelinev1.NamespacedTaskKind},
	}, {
		name: "renamed namespaced Task",
		data: map[string]string{config.TaskNameKey: "my-commit"},
		want: &pipelinev1.TaskRef{Name: "my-commit", Kind: pipelinev1.NamespacedTaskKind},
	}, {
		name: "bundle pinned by digest",
		data: map[string]string{config.TaskBundleKey: bundle},
		want: &pipelinev1.TaskRef{ResolverRef: pipelinev1.ResolverRef{Resolver: "bundles", Params: pipelinev1.Params{
			{Name: "bundle", Value: *pipelinev1.NewStructuredValues(bundle)},
			{Name: "name", Value: *pipelinev1.NewStructuredValues("sandbox-commit")},
			{Name: "kind", Value: *pipelinev1.NewStructuredValues("task")},
		}}},
	}, {
		name: "bundle with a Task of another name",
		data: map[string]string{config.TaskBundleKey: bundle, config.TaskNameKey: "my-commit"},
		want: &pipelinev1.TaskRef{ResolverRef: pipelinev1.ResolverRef{Resolver: "bundles", Params: pipelinev1.Params{
			{Name: "bundle", Value: *pipelinev1.NewStructuredValues(bundle)},
			{Name: "name", Value: *pipelinev1.NewStructuredValues("my-commit")},
			{Name: "kind", Value: *pipelinev1.NewStructuredValues("task")},
		}}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			data := map[string]string{config.RegistryKey: "r.test/s"}
			for k, v := range tc.data {
				data[k] = v
			}
			cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: data})
			if cfg.Err != nil {
				t.Fatal(cfg.Err)
			}
			s, src := testSource()
			commit := MakeTaskRun(s, src, cfg, "ns")
			unpause := MakeUnpauseTaskRun(s, src.Pod, cfg, "ns")
			if diff := cmp.Diff(tc.want, commit.Spec.TaskRef); diff != "" {
				t.Errorf("commit TaskRun's taskRef (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, unpause.Spec.TaskRef); diff != "" {
				t.Errorf("unpause TaskRun's taskRef (-want +got):\n%s", diff)
			}
			if commit.Spec.TaskSpec != nil || unpause.Spec.TaskSpec != nil {
				t.Error("a TaskRun embeds a taskSpec; it must reference the Task")
			}
			// Tekton's webhook would accept them.
			for _, tr := range []*pipelinev1.TaskRun{commit, unpause} {
				if err := tr.Validate(t.Context()); err != nil {
					t.Errorf("TaskRun %s is invalid for Tekton: %v", tr.Name, err)
				}
			}
		})
	}
}
