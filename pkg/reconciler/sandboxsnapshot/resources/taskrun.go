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

// Package resources builds, without API calls, what a SandboxSnapshot maps onto.
package resources

import (
	"fmt"
	"strconv"
	"time"

	pipelinepod "github.com/tektoncd/pipeline/pkg/apis/pipeline/pod"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// UnpauseTimeout bounds an unpause TaskRun; thawing takes milliseconds.
const UnpauseTimeout = 2 * time.Minute

// tolerateAll lets the TaskRuns' pods run on the sandbox's node whatever its
// taints (cordoned, draining); node affinity confines them to it.
var tolerateAll = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}

// Source is the sandbox pod a snapshot commits, as resolved by the reconciler.
type Source struct {
	// Pod is the running sandbox pod.
	Pod *corev1.Pod
	// Containers are the containers to commit and the images they go to.
	Containers []v1alpha1.ContainerSnapshot
	// Mode is task.SnapshotModeMemory for a memory snapshot, else filesystem.
	Mode string
}

// MakeTaskRun builds the TaskRun that commits and pushes src's containers.
func MakeTaskRun(s *v1alpha1.SandboxSnapshot, src Source, cfg *config.Snapshot, namespace string) *pipelinev1.TaskRun {
	items := make([]string, len(src.Containers))
	for i, c := range src.Containers {
		items[i] = task.ContainerItem(c.ContainerName, c.ImageURI)
	}
	tr := makeTaskRun(s, podOf(src.Pod), cfg, namespace, names.CommitTaskRun(s), task.ModeCommit)
	tr.Spec.Params = append(tr.Spec.Params,
		pipelinev1.Param{Name: task.ParamContainers, Value: pipelinev1.ParamValue{Type: pipelinev1.ParamTypeArray, ArrayVal: items}},
		pipelinev1.Param{Name: task.ParamInsecureRegistry, Value: *pipelinev1.NewStructuredValues(strconv.FormatBool(cfg.InsecureRegistry))},
		pipelinev1.Param{Name: task.ParamMaxLayers, Value: *pipelinev1.NewStructuredValues(strconv.Itoa(cfg.MaxLayers))},
		pipelinev1.Param{Name: task.ParamMaxPause, Value: *pipelinev1.NewStructuredValues(cfg.MaxPause.String())},
		pipelinev1.Param{Name: task.ParamKeepLocal, Value: *pipelinev1.NewStructuredValues(strconv.FormatBool(cfg.KeepLocal))},
		pipelinev1.Param{Name: task.ParamKeepLocalMaxSize, Value: *pipelinev1.NewStructuredValues(cfg.KeepLocalMaxSize)},
		pipelinev1.Param{Name: task.ParamDiskReserve, Value: *pipelinev1.NewStructuredValues(cfg.DiskReserve)},
	)
	if src.Mode == task.SnapshotModeMemory {
		tr.Spec.Params = append(tr.Spec.Params,
			pipelinev1.Param{Name: task.ParamSnapshotMode, Value: *pipelinev1.NewStructuredValues(task.SnapshotModeMemory)},
			pipelinev1.Param{Name: task.ParamMemoryFallback, Value: *pipelinev1.NewStructuredValues(cfg.MemoryFallback)},
			pipelinev1.Param{Name: task.ParamMemoryRestoreBase, Value: *pipelinev1.NewStructuredValues(cfg.MemoryRestoreBase)},
			pipelinev1.Param{Name: task.ParamMemoryAnonymousPull, Value: *pipelinev1.NewStructuredValues(cfg.MemoryAnonymousPull)},
		)
	}
	if cfg.CommitEphemeralStorage != "" {
		// The scratch the commit step copies and layers the change into is
		// the pod's own disk: the kubelet and the scheduler count it.
		q := resource.MustParse(cfg.CommitEphemeralStorage)
		rl := corev1.ResourceList{corev1.ResourceEphemeralStorage: q}
		tr.Spec.StepSpecs = []pipelinev1.TaskRunStepSpec{{
			Name:             task.StepCommit,
			ComputeResources: corev1.ResourceRequirements{Requests: rl, Limits: rl},
		}}
	}
	if cfg.PushSecret != "" {
		tr.Spec.Workspaces = []pipelinev1.WorkspaceBinding{{
			Name: task.WorkspaceDockerConfig,
			Secret: &corev1.SecretVolumeSource{
				SecretName: cfg.PushSecret,
				Items:      []corev1.KeyToPath{{Key: corev1.DockerConfigJsonKey, Path: "config.json"}},
			},
		}}
	}
	return tr
}

// MakeUnpauseTaskRun builds the TaskRun that thaws what a commit pod paused.
func MakeUnpauseTaskRun(s *v1alpha1.SandboxSnapshot, pod *corev1.Pod, cfg *config.Snapshot, namespace string) *pipelinev1.TaskRun {
	tr := makeTaskRun(s, podOf(pod), cfg, namespace, names.UnpauseTaskRun(s), task.ModeUnpause)
	tr.Spec.Timeout = &metav1.Duration{Duration: UnpauseTimeout}
	return tr
}

// MakeReleaseTaskRun builds the TaskRun that removes the images a deleted
// Succeed snapshot kept on its node; the pod, long gone, is named for the logs.
func MakeReleaseTaskRun(s *v1alpha1.SandboxSnapshot, cfg *config.Snapshot, namespace string) *pipelinev1.TaskRun {
	target := sourcePod{name: s.Status.SourcePodName, namespace: s.Namespace, node: s.Status.SourceNodeName}
	tr := makeTaskRun(s, target, cfg, namespace, names.ReleaseTaskRun(s), task.ModeRelease)
	tr.Spec.Timeout = &metav1.Duration{Duration: UnpauseTimeout}
	return tr
}

// sourcePod is the pod a TaskRun works on; uid is empty for a release.
type sourcePod struct {
	name, namespace, uid, node string
}

func podOf(pod *corev1.Pod) sourcePod {
	return sourcePod{name: pod.Name, namespace: pod.Namespace, uid: string(pod.UID), node: pod.Spec.NodeName}
}

func makeTaskRun(s *v1alpha1.SandboxSnapshot, pod sourcePod, cfg *config.Snapshot, namespace, name, mode string) *pipelinev1.TaskRun {
	labels := map[string]string{
		sandbox.SnapshotNameLabel:      s.Name,
		sandbox.SnapshotNamespaceLabel: s.Namespace,
		sandbox.SandboxNameLabel:       s.Spec.SandboxName,
		sandbox.ManagedByLabel:         sandbox.ManagedByValue,
		sandbox.SnapshotUIDLabel:       string(s.UID),
	}
	params := pipelinev1.Params{
		{Name: task.ParamPodName, Value: *pipelinev1.NewStructuredValues(pod.name)},
		{Name: task.ParamPodNamespace, Value: *pipelinev1.NewStructuredValues(pod.namespace)},
	}
	if pod.uid != "" {
		// The commit gate finds a pod's TaskRuns by this label.
		labels[sandbox.SourcePodUIDLabel] = pod.uid
		params = append(params, pipelinev1.Param{Name: task.ParamPodUID, Value: *pipelinev1.NewStructuredValues(pod.uid)})
	}
	params = append(params,
		// A commit and the TaskRuns that clean up after it share the
		// snapshot's UID, so they touch only what that commit froze or kept.
		pipelinev1.Param{Name: task.ParamRunID, Value: *pipelinev1.NewStructuredValues(string(s.UID))},
		pipelinev1.Param{Name: task.ParamMode, Value: *pipelinev1.NewStructuredValues(mode)},
		pipelinev1.Param{Name: task.ParamOverlayfsRoot, Value: *pipelinev1.NewStructuredValues(overlayfsRoot(cfg))},
		pipelinev1.Param{Name: task.ParamCheckpointDir, Value: *pipelinev1.NewStructuredValues(cfg.CheckpointDir)},
	)
	return &pipelinev1.TaskRun{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels:    labels,
		},
		Spec: pipelinev1.TaskRunSpec{
			TaskRef: taskRef(cfg),
			Params:  params,
			Timeout: &metav1.Duration{Duration: cfg.CommitTimeout},
			PodTemplate: &pipelinepod.PodTemplate{
				Affinity:                     nodeAffinity(pod.node),
				Tolerations:                  tolerateAll,
				PriorityClassName:            priorityClass(cfg),
				AutomountServiceAccountToken: ptr.To(false),
				Volumes: []corev1.Volume{{
					Name: task.SocketVolume,
					VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
						Path: cfg.ContainerdSocket,
						Type: ptr.To(corev1.HostPathSocket),
					}},
				}, overlayfsVolume(cfg), {
					// The node's checkpoint directory in every mode: a memory
					// snapshot's dump is written there, and every run removes
					// the dumps of runs that are over from it.
					Name: task.CheckpointVolume,
					VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
						Path: cfg.CheckpointDir,
						Type: ptr.To(corev1.HostPathDirectoryOrCreate),
					}},
				}, registryCAVolume(cfg)},
			},
		},
	}
}

// registryCAVolume supplies the registry's CAs to the commit and push
// steps: registry-ca-configmap, or an empty directory.
func registryCAVolume(cfg *config.Snapshot) corev1.Volume {
	v := corev1.Volume{Name: task.RegistryCAVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	if cfg.RegistryCAConfigMap != "" {
		v.VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cfg.RegistryCAConfigMap},
		}}
	}
	return v
}

// priorityClass is the TaskRuns' pods' PriorityClass, or nil for none.
func priorityClass(cfg *config.Snapshot) *string {
	if cfg.PriorityClass == "" {
		return nil
	}
	return ptr.To(cfg.PriorityClass)
}

// overlayfsRoot is where the commit step mounts the overlayfs volume.
func overlayfsRoot(cfg *config.Snapshot) string {
	if cfg.OverlayfsRoot == "" {
		return config.DefaultOverlayfsRoot
	}
	return cfg.OverlayfsRoot
}

// overlayfsVolume supplies the node's overlayfs snapshots to the commit step,
// or an empty directory when the copy is off. DirectoryOrCreate, not
// Directory: where containerd keeps them elsewhere, the step finds nothing
// and containerd tars the change, rather than the pod not starting.
func overlayfsVolume(cfg *config.Snapshot) corev1.Volume {
	v := corev1.Volume{Name: task.OverlayfsVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	if cfg.OverlayfsRoot != "" {
		v.VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: cfg.OverlayfsRoot,
			Type: ptr.To(corev1.HostPathDirectoryOrCreate),
		}}
	}
	return v
}

// Params of Tekton's bundles resolver.
const (
	bundlesResolver   = "bundles"
	bundleParamBundle = "bundle"
	bundleParamName   = "name"
	bundleParamKind   = "kind"
	bundleKindTask    = "task"
)

// taskRef references the commit Task in TaskBundle, else by name.
func taskRef(cfg *config.Snapshot) *pipelinev1.TaskRef {
	if cfg.TaskBundle == "" {
		return &pipelinev1.TaskRef{Name: cfg.TaskName, Kind: pipelinev1.NamespacedTaskKind}
	}
	return &pipelinev1.TaskRef{ResolverRef: pipelinev1.ResolverRef{
		Resolver: bundlesResolver,
		Params: pipelinev1.Params{
			{Name: bundleParamBundle, Value: *pipelinev1.NewStructuredValues(cfg.TaskBundle)},
			{Name: bundleParamName, Value: *pipelinev1.NewStructuredValues(cfg.TaskName)},
			{Name: bundleParamKind, Value: *pipelinev1.NewStructuredValues(bundleKindTask)},
		},
	}}
}

// nodeNameField is the node field TaskRun pods are pinned on: Tekton's pod
// template has no nodeName.
const nodeNameField = "metadata.name"

// nodeAffinity pins a pod to a node.
func nodeAffinity(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key:      nodeNameField,
					Operator: corev1.NodeSelectorOpIn,
					Values:   []string{node},
				}},
			}},
		},
	}}
}

// SourceOf reads back the pod, node and containers a commit TaskRun was made for.
func SourceOf(tr *pipelinev1.TaskRun) (podName, nodeName string, containers []v1alpha1.ContainerSnapshot, err error) {
	for _, p := range tr.Spec.Params {
		switch p.Name {
		case task.ParamPodName:
			podName = p.Value.StringVal
		case task.ParamContainers:
			for _, item := range p.Value.ArrayVal {
				c, image, err := task.SplitContainerItem(item)
				if err != nil {
					return "", "", nil, fmt.Errorf("TaskRun %s/%s: param %s: %w", tr.Namespace, tr.Name, task.ParamContainers, err)
				}
				containers = append(containers, v1alpha1.ContainerSnapshot{ContainerName: c, ImageURI: image})
			}
		}
	}
	if pt := tr.Spec.PodTemplate; pt != nil && pt.Affinity != nil && pt.Affinity.NodeAffinity != nil &&
		pt.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range pt.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == nodeNameField && len(f.Values) == 1 {
					nodeName = f.Values[0]
				}
			}
		}
	}
	if podName == "" || nodeName == "" || len(containers) == 0 {
		return "", "", nil, fmt.Errorf("TaskRun %s/%s names no pod, node or containers to commit", tr.Namespace, tr.Name)
	}
	return podName, nodeName, containers, nil
}
