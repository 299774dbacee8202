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

package sandboxsnapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	fakepipelineclient "github.com/tektoncd/pipeline/pkg/client/injection/client/fake"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgotesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	rtesting "knative.dev/pkg/reconciler/testing"
	"knative.dev/pkg/system"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	fakesandboxclient "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/client/fake"
	snapshotreconciler "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/reconciler/sandbox/v1alpha1/sandboxsnapshot"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

const (
	ns             = "team-a"
	snapName       = "snap"
	sbName         = "sb"
	node           = "node-1"
	registryPrefix = "registry.test/snapshots"
	// tag is "snap-", the first 32 hex characters of sha256("snap") and the
	// snapshot's UID, snap-uid.
	tag     = "snap-1c27324f013705cbf0c49f3d3bb103c7-snapuid"
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

var (
	key        = ns + "/" + snapName
	twoApps    = []string{"app", "sidecar"}
	defaultCfg = mustConfig(map[string]string{config.RegistryKey: registryPrefix})
	// committed are the containers of pod sb-0 and their images.
	committed = []v1alpha1.ContainerSnapshot{
		{ContainerName: "app", ImageURI: registryPrefix + "/team-a/sb/app:" + tag},
		{ContainerName: "sidecar", ImageURI: registryPrefix + "/team-a/sb/sidecar:" + tag},
	}
	runningPod = Pod(ns, "sb-0", twoApps, WithRunningOn(node))
	// noAPIReads fails every API read of BatchSandboxes and pods, so that a
	// row passes only if it reads them from the informers' caches.
	noAPIReads = []clientgotesting.ReactionFunc{
		rtesting.InduceFailure("get", "batchsandboxes"),
		rtesting.InduceFailure("get", "pods"),
		rtesting.InduceFailure("list", "pods"),
	}
)

func TestReconcile(t *testing.T) {
	trNamespace := system.Namespace()
	trName := "team-a-snap-05307b-commit"
	unpauseName := "team-a-snap-05307b-unpause"

	// snap is a snapshot that already holds our finalizer, as after its first pass.
	snap := func(opts ...SnapshotOption) *v1alpha1.SandboxSnapshot {
		return Snapshot(ns, snapName, sbName, append([]SnapshotOption{WithFinalizers(FinalizerName)}, opts...)...)
	}
	committing := WithCommitting("sb-0", node, committed, trNamespace, trName)
	commitTaskRun := func(opts ...TaskRunOption) *pipelinev1.TaskRun {
		src := resources.Source{Pod: runningPod, Containers: committed}
		return TaskRun(resources.MakeTaskRun(snap(), src, defaultCfg, trNamespace), opts...)
	}
	memory := WithAnnotation(sandbox.SnapshotModeAnnotation, task.SnapshotModeMemory)
	memoryCfg := map[string]string{config.RegistryKey: registryPrefix, config.SnapshotModeKey: "Memory", config.MemoryFallbackKey: "Filesystem"}
	memoryTaskRun := func(cfg *config.Snapshot, opts ...TaskRunOption) *pipelinev1.TaskRun {
		src := resources.Source{Pod: runningPod, Containers: committed, Mode: task.SnapshotModeMemory}
		return TaskRun(resources.MakeTaskRun(snap(), src, cfg, trNamespace), opts...)
	}
	unsupported := `pod team-a/sb-0 container "app": MemorySnapshotUnsupported: CRIU binary not found or too old`
	unpauseTaskRun := resources.MakeUnpauseTaskRun(snap(), runningPod, defaultCfg, trNamespace)
	releaseName := "team-a-snap-05307b-release"
	releaseTaskRun := resources.MakeReleaseTaskRun(snap(committing), defaultCfg, trNamespace)
	killedMidPause := WithStep(task.StepCommit, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}})
	failedMessage := func(reason, message string) string {
		return "TaskRun " + trNamespace + "/" + trName + " failed (" + reason + "): " + message +
			"; see: tkn taskrun logs " + trName + " -n " + trNamespace
	}
	overQuota := `TaskRun Pod exceeded available resources: pods "x-unpause-pod" is forbidden: exceeded quota: no-pods, requested: pods=1, used: pods=0, limited: pods=0`
	thawFailedMessage := "attempt 1: pod sb-0 may still be paused: TaskRun " + trNamespace + "/" + unpauseName +
		" failed (TaskRunTimeout): timed out; see: tkn taskrun logs " + unpauseName + " -n " + trNamespace + "; retrying in 10s"
	// otherSnap is a second snapshot of the same sandbox, as OpenSandbox's
	// pause and public snapshot are.
	otherSnap := Snapshot(ns, "first", sbName, WithFinalizers(FinalizerName))
	otherName := names.CommitTaskRun(otherSnap)
	otherCommit := func(opts ...TaskRunOption) *pipelinev1.TaskRun {
		src := resources.Source{Pod: runningPod, Containers: committed}
		return TaskRun(resources.MakeTaskRun(otherSnap, src, defaultCfg, trNamespace), opts...)
	}
	otherUnpauseMessage := func(namespace string) string {
		return waitingMessage(namespace, names.UnpauseTaskRun(otherSnap))
	}
	// osbFinalizers are those of a snapshot that OpenSandbox's own controller
	// reconciled before the switch, and this operator since.
	osbFinalizers := WithFinalizers(FinalizerName, sandbox.OpenSandboxSnapshotFinalizer)
	osbCommitting := WithOpenSandboxCommitting("sb-0", node, []v1alpha1.ContainerSnapshot{
		{ContainerName: "app", ImageURI: registryPrefix + "/sb-app:snap-gen1-sbuid"},
		{ContainerName: "sidecar", ImageURI: registryPrefix + "/sb-sidecar:snap-gen1-sbuid"},
	})
	osbJob := func(opts ...JobOption) *batchv1.Job { return OpenSandboxCommitJob(snap(), opts...) }
	osbWaiting := "Waiting for Job team-a/snap-commit, the commit that OpenSandbox's own controller started before the switch to this operator, to end"
	osbEnded := func(how string) string {
		return "Job team-a/snap-commit, the commit that OpenSandbox's own controller started before the switch to this operator, " + how +
			"; this operator does not take its result over: snapshot the sandbox again (OpenSandbox's pause deletes this snapshot and does so by itself)"
	}
	unschedulable := `pod status "PodScheduled":"False"; message: "0/1 nodes are available: 1 Insufficient cpu."`
	notReady := `pod status "PodReadyToStartContainers":"False"; message: ""`
	mountFailed := `MountVolume.SetUp failed for volume "containerd-socket" : hostPath type check failed: /run/containerd/containerd.sock is not a socket file`
	// withCommitPod gives the TaskRun its pod, created age ago.
	withCommitPod := func(age time.Duration) TaskRunOption {
		return func(tr *pipelinev1.TaskRun) {
			tr.CreationTimestamp = metav1.NewTime(Now.Add(-age))
			tr.Status.PodName = tr.Name + "-pod"
		}
	}
	// podEvent is an event of a pod in the TaskRun namespace, last seen ago.
	podEvent := func(name, pod, eventType, reason, message string, ago time.Duration) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: trNamespace, Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: trNamespace, Name: pod},
			Type:           eventType, Reason: reason, Message: message,
			LastTimestamp: metav1.NewTime(Now.Add(-ago)),
		}
	}

	table := rtesting.TableTest{{
		Name: "bad workqueue key",
		Key:  "too/many/parts",
	}, {
		Name: "deleted snapshot is ignored",
		Key:  key,
	}, {
		Name: "first reconcile adds the finalizer and creates the TaskRun",
		Objects: []runtime.Object{
			Snapshot(ns, snapName, sbName),
			BatchSandbox(ns, sbName, 1),
			runningPod,
		},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantPatches:             []clientgotesting.PatchActionImpl{patchFinalizers(ns, snapName)},
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing),
		}},
	}, {
		Name: "the first status write builds on the finalizer patch, so it cannot conflict",
		Objects: []runtime.Object{
			Snapshot(ns, snapName, sbName, WithResourceVersion("1")),
			BatchSandbox(ns, sbName, 1),
			runningPod,
		},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{bumpResourceVersionOnPatch},
		WantPatches:             []clientgotesting.PatchActionImpl{patchFinalizers(ns, snapName, "1")},
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithResourceVersion("2"), committing),
		}},
	}, {
		Name:                    "pod <sandbox>-0 is the last resort",
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name: "pods from the alloc-status annotation come first",
		Objects: []runtime.Object{
			snap(),
			BatchSandbox(ns, sbName, 1, WithAllocatedPods("gone", "sb-alloc")),
			Pod(ns, "sb-alloc", twoApps, WithRunningOn("node-2")),
			Pod(ns, "sb-labelled", twoApps, WithRunningOn(node), WithSandboxLabel(sbName)),
			runningPod,
		},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates: []runtime.Object{TaskRun(resources.MakeTaskRun(snap(), resources.Source{
			Pod: Pod(ns, "sb-alloc", twoApps, WithRunningOn("node-2")), Containers: committed,
		}, defaultCfg, trNamespace))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithCommitting("sb-alloc", "node-2", committed, trNamespace, trName))}},
	}, {
		Name:                    "a BatchSandbox and its pod in the informers' caches are read without an API call",
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            noAPIReads,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:                    "a BatchSandbox the informer has not seen yet is read from the API",
		Objects:                 []runtime.Object{snap(), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{getBatchSandbox(BatchSandbox(ns, sbName, 1))},
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:                    "a labelled pod the informer has not seen yet is found in the API before the snapshot fails",
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{listPods(Pod(ns, "sb-labelled", twoApps, WithRunningOn("node-3"), WithSandboxLabel(sbName)))},
		WantCreates: []runtime.Object{TaskRun(resources.MakeTaskRun(snap(), resources.Source{
			Pod: Pod(ns, "sb-labelled", twoApps, WithRunningOn("node-3"), WithSandboxLabel(sbName)), Containers: committed,
		}, defaultCfg, trNamespace))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithCommitting("sb-labelled", "node-3", committed, trNamespace, trName))}},
	}, {
		Name: "labelled pods come before <sandbox>-0, and only Running ones count",
		Objects: []runtime.Object{
			snap(),
			BatchSandbox(ns, sbName, 1, WithAllocatedPods("sb-pending")),
			Pod(ns, "sb-pending", twoApps, WithSandboxLabel(sbName)),
			Pod(ns, "sb-labelled", twoApps, WithRunningOn("node-3"), WithSandboxLabel(sbName)),
			runningPod,
		},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates: []runtime.Object{TaskRun(resources.MakeTaskRun(snap(), resources.Source{
			Pod: Pod(ns, "sb-labelled", twoApps, WithRunningOn("node-3"), WithSandboxLabel(sbName)), Containers: committed,
		}, defaultCfg, trNamespace))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithCommitting("sb-labelled", "node-3", committed, trNamespace, trName))}},
	}, {
		Name: "the BatchSandbox template's containers are committed, not the pod's sidecars",
		Objects: []runtime.Object{
			snap(),
			BatchSandbox(ns, sbName, 1, WithTemplateContainers("app")),
			runningPod,
		},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates: []runtime.Object{TaskRun(resources.MakeTaskRun(snap(), resources.Source{
			Pod: runningPod, Containers: committed[:1],
		}, defaultCfg, trNamespace))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithCommitting("sb-0", node, committed[:1], trNamespace, trName))}},
	}, {
		Name: "a snapshot owned by its BatchSandbox is tagged with the sandbox's generation",
		Objects: []runtime.Object{
			snap(WithControllerOwner(BatchSandbox(ns, sbName, 7))),
			BatchSandbox(ns, sbName, 7),
			runningPod,
		},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates: []runtime.Object{TaskRun(resources.MakeTaskRun(snap(WithControllerOwner(BatchSandbox(ns, sbName, 7))), resources.Source{
			Pod: runningPod, Containers: generationImages,
		}, defaultCfg, trNamespace))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithControllerOwner(BatchSandbox(ns, sbName, 7)), WithCommitting("sb-0", node, generationImages, trNamespace, trName)),
		}},
	}, {
		Name: "the push Secret is bound as the dockerconfig workspace",
		Ctx:  withConfig(map[string]string{config.RegistryKey: registryPrefix, config.PushSecretKey: "push"}),
		Objects: []runtime.Object{
			snap(), BatchSandbox(ns, sbName, 1), runningPod,
			PushSecret(trNamespace, "push", corev1.SecretTypeDockerConfigJson),
		},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates: []runtime.Object{TaskRun(resources.MakeTaskRun(snap(), resources.Source{Pod: runningPod, Containers: committed},
			mustConfig(map[string]string{config.RegistryKey: registryPrefix, config.PushSecretKey: "push"}), trNamespace))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name: "a sandbox on a node of a node pool is committed through that pool's containerd socket and overlayfs root",
		Ctx:  withConfig(map[string]string{config.RegistryKey: registryPrefix, config.NodePoolsKey: k3sPool}),
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"node.example.com/image": "k3s"}}}},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates: []runtime.Object{TaskRun(resources.MakeTaskRun(snap(), resources.Source{Pod: runningPod, Containers: committed},
			mustConfig(map[string]string{config.RegistryKey: registryPrefix, config.ContainerdSocketKey: k3sSocket, config.OverlayfsRootKey: k3sSnapshots}), trNamespace))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name: "a sandbox on a node no node pool selects is committed through the default socket and overlayfs root",
		Ctx:  withConfig(map[string]string{config.RegistryKey: registryPrefix, config.NodePoolsKey: k3sPool}),
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"node.example.com/image": "ubuntu"}}}},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:                    "a node whose labels cannot be read is retried, and no TaskRun is made with the wrong socket",
		Ctx:                     withConfig(map[string]string{config.RegistryKey: registryPrefix, config.NodePoolsKey: k3sPool}),
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{rtesting.InduceFailure("get", "nodes")},
		WantErr:                 true,
		WantEvents:              []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError", "reading the labels of node %s for config-snapshot node-pools: inducing failure for get nodes", node)},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(WithPending)}},
	}, {
		Name:                    "a snapshot annotated snapshot-mode Memory gets a memory snapshot TaskRun",
		Objects:                 []runtime.Object{snap(memory), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{memoryTaskRun(defaultCfg)},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(memory, committing)}},
	}, {
		Name:                    "snapshot-mode Memory in config-snapshot applies to snapshots without the annotation, with its fallback",
		Ctx:                     withConfig(memoryCfg),
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{memoryTaskRun(mustConfig(memoryCfg))},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:                    "the snapshot-mode annotation Filesystem overrides config-snapshot's Memory",
		Ctx:                     withConfig(memoryCfg),
		Objects:                 []runtime.Object{snap(WithAnnotation(sandbox.SnapshotModeAnnotation, "Filesystem")), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates: []runtime.Object{TaskRun(resources.MakeTaskRun(snap(), resources.Source{Pod: runningPod, Containers: committed},
			mustConfig(memoryCfg), trNamespace))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithAnnotation(sandbox.SnapshotModeAnnotation, "Filesystem"), committing)}},
	}, {
		Name:    "an unknown snapshot-mode annotation fails with InvalidSpec, naming it",
		Objects: []runtime.Object{snap(WithAnnotation(sandbox.SnapshotModeAnnotation, "memory")), BatchSandbox(ns, sbName, 1), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithAnnotation(sandbox.SnapshotModeAnnotation, "memory"), WithFailed(v1alpha1.ReasonInvalidSpec, badModeMessage)),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonInvalidSpec, "%s", badModeMessage)},
	}, {
		Name:    "a BatchSandbox neither in the informer's cache nor in the API fails without a TaskRun",
		Objects: []runtime.Object{snap(), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithFailed(v1alpha1.ReasonBatchSandboxLookupFailed, "BatchSandbox team-a/sb not found")),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonBatchSandboxLookupFailed, "BatchSandbox team-a/sb not found")},
	}, {
		Name:    "no Running pod fails with SourcePodNotFound",
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), Pod(ns, "sb-0", twoApps)},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithFailed(v1alpha1.ReasonSourcePodNotFound, noPodMessage)),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonSourcePodNotFound, "%s", noPodMessage)},
	}, {
		Name:                    "a malformed alloc-status annotation is passed over, as OpenSandbox does",
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1, WithAllocStatus("pods: [sb-0]")), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:                    "an empty alloc-status annotation is passed over, as OpenSandbox does",
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1, WithAllocStatus(`{"pods":[]}`)), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:    "a template without containers fails with NoContainers",
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1, WithTemplateContainers()), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithFailed(v1alpha1.ReasonNoContainers, "BatchSandbox team-a/sb and pod sb-0 have no containers to commit")),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonNoContainers, "BatchSandbox team-a/sb and pod sb-0 have no containers to commit")},
	}, {
		Name:    "no registry configured fails with RegistryNotConfigured",
		Ctx:     withConfig(map[string]string{}),
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithFailed(v1alpha1.ReasonRegistryNotConfigured, noRegistryMessage)),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonRegistryNotConfigured, "%s", noRegistryMessage)},
	}, {
		Name:    "a bad commit timeout fails with InvalidConfiguration",
		Ctx:     withConfig(map[string]string{config.RegistryKey: registryPrefix, config.CommitTimeoutKey: "soon"}),
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithFailed(v1alpha1.ReasonInvalidConfiguration, badTimeoutMessage)),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonInvalidConfiguration, "%s", badTimeoutMessage)},
	}, {
		Name:    "a task-bundle by tag fails with InvalidConfiguration",
		Ctx:     withConfig(map[string]string{config.RegistryKey: registryPrefix, config.TaskBundleKey: "registry.test/tasks/sandbox-commit:v1"}),
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithFailed(v1alpha1.ReasonInvalidConfiguration, bundleByTagMessage)),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonInvalidConfiguration, "%s", bundleByTagMessage)},
	}, {
		Name:                    "a task-bundle pinned by digest: the TaskRun takes the Task from it",
		Ctx:                     withConfig(map[string]string{config.RegistryKey: registryPrefix, config.TaskBundleKey: taskBundle}),
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates: []runtime.Object{TaskRun(resources.MakeTaskRun(snap(), resources.Source{Pod: runningPod, Containers: committed},
			mustConfig(map[string]string{config.RegistryKey: registryPrefix, config.TaskBundleKey: taskBundle}), trNamespace))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:    "a missing push Secret fails with InvalidConfiguration",
		Ctx:     withConfig(map[string]string{config.RegistryKey: registryPrefix, config.PushSecretKey: "push"}),
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithFailed(v1alpha1.ReasonInvalidConfiguration, missingSecretMessage(trNamespace))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonInvalidConfiguration, "%s", missingSecretMessage(trNamespace))},
	}, {
		Name: "a push Secret of the wrong type fails with InvalidConfiguration",
		Ctx:  withConfig(map[string]string{config.RegistryKey: registryPrefix, config.PushSecretKey: "push"}),
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod,
			PushSecret(trNamespace, "push", corev1.SecretTypeOpaque)},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithFailed(v1alpha1.ReasonInvalidConfiguration, wrongSecretMessage(trNamespace))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonInvalidConfiguration, "%s", wrongSecretMessage(trNamespace))},
	}, {
		Name:    "an invalid sandboxName fails with InvalidSpec",
		Objects: []runtime.Object{Snapshot(ns, snapName, "Not_A_Name", WithFinalizers(FinalizerName))},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: Snapshot(ns, snapName, "Not_A_Name", WithFinalizers(FinalizerName), WithFailed(v1alpha1.ReasonInvalidSpec, invalidSpecMessage)),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonInvalidSpec, "%s", invalidSpecMessage)},
	}, {
		Name:    "an image name registries refuse fails with InvalidImageReference",
		Ctx:     withConfig(map[string]string{config.RegistryKey: "registry.test/Snapshots"}),
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(WithFailed(v1alpha1.ReasonInvalidImageReference, badImageMessage)),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonInvalidImageReference, "%s", badImageMessage)},
	}, {
		Name:                    "a TaskRun made for this snapshot by an earlier pass is adopted, without a second create event",
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod, commitTaskRun(WithTaskRunRunning)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:                    "a TaskRun the informer has not seen yet is adopted after the create says it exists",
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{alreadyExists(commitTaskRun(WithTaskRunRunning))},
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:    "a TaskRun the informer has not seen yet is read from the API, not taken for deleted",
		Objects: []runtime.Object{snap(committing)},
		Key:     key,
		WithReactors: []clientgotesting.ReactionFunc{getReturns(commitTaskRun(WithTaskRunSucceeded,
			WithResult(task.ResultDigests, digestA+","+digestB), WithResult(task.ResultPauseWindowMS, "412")))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing, WithSucceeded(412, digestA, digestB))}},
	}, {
		Name: "a TaskRun left by an earlier snapshot of the same name is deleted, pod first, and the snapshot waits for it",
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod,
			commitTaskRun(WithTaskRunRunning, func(tr *pipelinev1.TaskRun) { tr.Labels[sandbox.SnapshotUIDLabel] = "old-uid" })},
		Key:               key,
		WantDeletes:       []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName)},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithWaiting(orphanMessage(trNamespace, trName)))}},
	}, {
		Name: "a snapshot keeps waiting while the earlier snapshot's TaskRun is being deleted",
		Objects: []runtime.Object{snap(WithWaiting(orphanMessage(trNamespace, trName))), BatchSandbox(ns, sbName, 1), runningPod,
			commitTaskRun(WithTaskRunDeleting, func(tr *pipelinev1.TaskRun) { tr.Labels[sandbox.SnapshotUIDLabel] = "old-uid" })},
		Key: key,
	}, {
		Name: "a second snapshot of the same pod waits for the commit in flight",
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod,
			otherCommit(WithTaskRunRunning)},
		Key:               key,
		WantErr:           true, // a requeue after holderRecheck, should the commit's end be missed
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithWaiting(waitingMessage(trNamespace, otherName)))}},
	}, {
		Name: "a snapshot waiting for another commit starts once that commit has ended",
		Objects: []runtime.Object{snap(WithWaiting(waitingMessage(trNamespace, otherName))), BatchSandbox(ns, sbName, 1), runningPod,
			otherCommit(WithTaskRunSucceeded)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name: "a commit that may have left the pod paused holds it until its snapshot starts the thaw",
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod,
			otherCommit(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause, WithCompletedAt(metav1.NewTime(Now.Add(-10*time.Second))))},
		Key:               key,
		WantErr:           true, // a requeue after the rest of thawGrace, in case no thaw comes
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithWaiting(waitingMessage(trNamespace, otherName)))}},
	}, {
		Name: "an unpause TaskRun of another snapshot holds the pod",
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod,
			otherCommit(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause, WithCompletedAt(Now)),
			TaskRun(resources.MakeUnpauseTaskRun(otherSnap, runningPod, defaultCfg, trNamespace), WithTaskRunRunning)},
		Key:               key,
		WantErr:           true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithWaiting(otherUnpauseMessage(trNamespace)))}},
	}, {
		Name: "a commit that thawed by itself frees the pod at once",
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod,
			otherCommit(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "boom"), WithCompletedAt(Now),
				WithStep(task.StepCommit, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}))},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name: "a commit of another pod of the same sandbox does not hold this one",
		Objects: []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod,
			TaskRun(resources.MakeTaskRun(otherSnap, resources.Source{Pod: Pod(ns, "sb-1", twoApps, WithRunningOn(node)), Containers: committed}, defaultCfg, trNamespace), WithTaskRunRunning)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name: "a Pending snapshot adopts its TaskRun with the source the TaskRun was made for",
		// The BatchSandbox is gone and nothing is resolved again: the
		// images recorded are those the TaskRun pushes.
		Objects:           []runtime.Object{snap(), commitTaskRun(WithTaskRunRunning)},
		Key:               key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name: "a Committing snapshot whose status lost taskRunRef, as OpenSandbox's CRD prunes it, still mirrors its TaskRun",
		Objects: []runtime.Object{snap(committing, withoutOwnFields), commitTaskRun(WithTaskRunSucceeded,
			WithResult(task.ResultDigests, digestA+","+digestB), WithResult(task.ResultPauseWindowMS, "412"))},
		Key:               key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing, withoutOwnFields, WithSucceeded(412, digestA, digestB))}},
	}, {
		Name:    "a Committing snapshot whose status lost taskRunRef writes nothing while its TaskRun runs",
		Objects: []runtime.Object{snap(committing, withoutOwnFields), commitTaskRun(WithTaskRunRunning)},
		Key:     key,
	}, {
		Name:    "a commit pod the scheduler cannot place is reported while Committing",
		Objects: []runtime.Object{snap(committing), commitTaskRun(WithTaskRunWaiting("Pending", unschedulable))},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithCommitPodPending("TaskRun "+trNamespace+"/"+trName+" cannot start its pod on node "+node+" yet (Pending): "+unschedulable)),
		}},
	}, {
		Name: "a commit pod pending past the grace is reported with its pod's latest warning event",
		Objects: []runtime.Object{snap(committing), commitTaskRun(withCommitPod(15*time.Second), WithTaskRunWaiting("Pending", notReady)),
			podEvent("mount-1", trName+"-pod", corev1.EventTypeWarning, "FailedMount", "old news", 12*time.Second),
			podEvent("mount-2", trName+"-pod", corev1.EventTypeWarning, "FailedMount", mountFailed, 2*time.Second),
			podEvent("scheduled", trName+"-pod", corev1.EventTypeNormal, "Scheduled", "assigned", time.Second),
			podEvent("other", "other-pod", corev1.EventTypeWarning, "BackOff", "not this pod", 0)},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithCommitPodPending("TaskRun "+trNamespace+"/"+trName+" cannot start its pod on node "+node+" yet (Pending): FailedMount: "+mountFailed)),
		}},
	}, {
		Name:    "a commit pod pending within the grace is looked at again when the grace is over",
		Objects: []runtime.Object{snap(committing), commitTaskRun(withCommitPod(3*time.Second), WithTaskRunWaiting("Pending", notReady))},
		Key:     key,
		WantErr: true, // a requeue after the rest of podStartGrace
	}, {
		Name:    "a commit pod pending past the grace with no warning is looked at again",
		Objects: []runtime.Object{snap(committing), commitTaskRun(withCommitPod(time.Minute), WithTaskRunWaiting("Pending", notReady))},
		Key:     key,
		WantErr: true, // a requeue after podStartGrace
	}, {
		Name:    "the ordinary moments before the commit pod runs are not reported",
		Objects: []runtime.Object{snap(committing), commitTaskRun(WithTaskRunWaiting("Pending", `pod status "Initialized":"False"; message: "containers with incomplete status: [prepare]"`))},
		Key:     key,
	}, {
		Name:              "a commit pod that starts after being held back clears the report",
		Objects:           []runtime.Object{snap(committing, WithCommitPodPending("held back")), commitTaskRun(WithTaskRunRunning)},
		Key:               key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:                    "a failed TaskRun create is retried and leaves the snapshot Pending",
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{rtesting.InduceFailure("create", "taskruns")},
		WantErr:                 true,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(WithPending)}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"creating TaskRun %s/%s: inducing failure for create taskruns", trNamespace, trName)},
	}, {
		Name:              "a failed read of a BatchSandbox the informer has not seen yet is retried",
		Objects:           []runtime.Object{snap(), runningPod},
		Key:               key,
		WithReactors:      []clientgotesting.ReactionFunc{rtesting.InduceFailure("get", "batchsandboxes")},
		WantErr:           true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(WithPending)}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"getting BatchSandbox team-a/sb: inducing failure for get batchsandboxes")},
	}, {
		Name:    "a running TaskRun keeps the snapshot Committing, and a second pass changes nothing",
		Objects: []runtime.Object{snap(committing), commitTaskRun(WithTaskRunRunning)},
		Key:     key,
	}, {
		Name: "a succeeded TaskRun marks the snapshot Succeed with the registry's digests",
		Objects: []runtime.Object{snap(committing), commitTaskRun(WithTaskRunSucceeded,
			WithResult(task.ResultDigests, digestA+","+digestB), WithResult(task.ResultPauseWindowMS, "412"))},
		Key:               key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing, WithSucceeded(412, digestA, digestB))}},
	}, {
		Name:    "a succeeded TaskRun with too few digests fails with CommitResultsInvalid",
		Objects: []runtime.Object{snap(committing), commitTaskRun(WithTaskRunSucceeded, WithResult(task.ResultDigests, digestA))},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonCommitResultsInvalid, badResultsMessage(trNamespace, trName))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonCommitResultsInvalid, "%s", badResultsMessage(trNamespace, trName))},
	}, {
		Name:    "a succeeded TaskRun with a malformed pause window fails with CommitResultsInvalid",
		Objects: []runtime.Object{snap(committing), commitTaskRun(WithTaskRunSucceeded, WithResult(task.ResultDigests, digestA+","+digestB), WithResult(task.ResultPauseWindowMS, "soon"))},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonCommitResultsInvalid, badPauseMessage(trNamespace, trName))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonCommitResultsInvalid, "%s", badPauseMessage(trNamespace, trName))},
	}, {
		Name: "a failed TaskRun carries the committer's error and a logs hint",
		Objects: []runtime.Object{snap(committing), runningPod, commitTaskRun(
			WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "\"step-push\" exited with code 1"),
			WithStep(task.StepCommit, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}),
			WithResult(task.ResultError, "pushing registry.test/snapshots/team-a/sb/app: connection refused"))},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonCommitJobFailed, pushFailedMessage(failedMessage))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonCommitJobFailed, "%s", pushFailedMessage(failedMessage))},
	}, {
		Name: "a commit step that failed and thawed by itself needs no unpause",
		Objects: []runtime.Object{snap(committing), runningPod, commitTaskRun(
			WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "\"step-commit\" exited with code 1"),
			WithStep(task.StepCommit, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}))},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonCommitJobFailed, failedMessage("Failed", "\"step-commit\" exited with code 1"))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonCommitJobFailed, "%s", failedMessage("Failed", "\"step-commit\" exited with code 1"))},
	}, {
		Name: "a commit that found the pod frozen by another run fails with CommitConflict and needs no unpause",
		Objects: []runtime.Object{snap(committing), runningPod, commitTaskRun(
			WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "\"step-commit\" exited with code 4"),
			WithStep(task.StepCommit, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: task.ExitCodeFrozenElsewhere, Reason: "Error"}}))},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonCommitConflict, failedMessage("Failed", "\"step-commit\" exited with code 4"))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonCommitConflict, "%s", failedMessage("Failed", "\"step-commit\" exited with code 4"))},
	}, {
		Name: "a node that cannot take a memory snapshot fails it with MemorySnapshotUnsupported and needs no unpause",
		Objects: []runtime.Object{snap(committing), runningPod, memoryTaskRun(defaultCfg,
			WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "\"step-commit\" exited with code 5"),
			WithStep(task.StepCommit, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: task.ExitCodeMemoryUnsupported, Reason: "Error"}}),
			WithResult(task.ResultError, unsupported))},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonMemorySnapshotUnsupported, failedMessage("Failed", "\"step-commit\" exited with code 5; committer: "+unsupported))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonMemorySnapshotUnsupported, "%s",
			failedMessage("Failed", "\"step-commit\" exited with code 5; committer: "+unsupported))},
	}, {
		Name: "a memory snapshot whose node fell back to a filesystem one is Succeed, and says so",
		Objects: []runtime.Object{snap(committing), memoryTaskRun(mustConfig(memoryCfg), WithTaskRunSucceeded,
			WithResult(task.ResultDigests, digestA+","+digestB), WithResult(task.ResultPauseWindowMS, "412"),
			WithResult(task.ResultSnapshotMode, task.SnapshotModeFilesystem))},
		Key:               key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing, WithSucceeded(412, digestA, digestB), WithFellBackToFilesystem)}},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonMemorySnapshotFellBack,
				"Node %s could not take this memory snapshot (see: tkn taskrun logs %s -n %s); took a filesystem snapshot, as memory-fallback allows", node, trName, trNamespace),
		},
	}, {
		Name: "a memory snapshot taken is Succeed like any other",
		Objects: []runtime.Object{snap(committing), memoryTaskRun(defaultCfg, WithTaskRunSucceeded,
			WithResult(task.ResultDigests, digestA+","+digestB), WithResult(task.ResultPauseWindowMS, "180"),
			WithResult(task.ResultSnapshotMode, task.SnapshotModeMemory))},
		Key:               key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing, WithSucceeded(180, digestA, digestB))}},
	}, {
		Name: "a commit pod killed mid-pause gets an unpause TaskRun on the same node, the pod checked in the informer's cache without an API call",
		Objects: []runtime.Object{snap(committing), runningPod, commitTaskRun(
			WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "\"step-commit\" exited with code 137"), killedMidPause)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            noAPIReads,
		WantCreates:             []runtime.Object{unpauseTaskRun},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName),
				WithFailed(v1alpha1.ReasonCommitJobFailed, failedMessage("Failed", "\"step-commit\" exited with code 137"))),
		}},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawing, "The commit pod may have left pod sb-0 paused; TaskRun %s/%s is unpausing it (attempt 1)", trNamespace, unpauseName),
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonCommitJobFailed, "%s", failedMessage("Failed", "\"step-commit\" exited with code 137")),
		},
	}, {
		Name: "an unpause TaskRun left by an earlier snapshot of the same name is deleted, and the thaw retried",
		Objects: []runtime.Object{snap(committing), runningPod, commitTaskRun(
			WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "\"step-commit\" exited with code 137"), killedMidPause),
			TaskRun(unpauseTaskRun, WithTaskRunSucceeded, func(tr *pipelinev1.TaskRun) { tr.Labels[sandbox.SnapshotUIDLabel] = "old-uid" })},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantErr:                 true,
		WantCreates:             []runtime.Object{unpauseTaskRun},
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, unpauseName)},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"TaskRun %s/%s of an earlier SandboxSnapshot of the same name (uid %q) is being deleted", trNamespace, unpauseName, "old-uid")},
	}, {
		Name: "a failed unpause TaskRun create keeps the snapshot Committing and is retried",
		Objects: []runtime.Object{snap(committing), runningPod, commitTaskRun(
			WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "\"step-commit\" exited with code 137"), killedMidPause)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{rtesting.InduceFailure("create", "taskruns")},
		WantErr:                 true,
		WantCreates:             []runtime.Object{unpauseTaskRun},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"creating TaskRun %s/%s: inducing failure for create taskruns", trNamespace, unpauseName)},
	}, {
		Name: "a commit pod killed mid-pause whose sandbox pod is gone fails with SourcePodNotFound and needs no unpause",
		Objects: []runtime.Object{snap(committing), commitTaskRun(
			WithTaskRunFailed(pipelinev1.TaskRunReasonStepOOM, "step commit ran out of memory"),
			WithStep(task.StepCommit, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}))},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonSourcePodNotFound, podGone(failedMessage("StepOOM", "step commit ran out of memory")))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonSourcePodNotFound, "%s", podGone(failedMessage("StepOOM", "step commit ran out of memory")))},
	}, {
		Name: "a sandbox pod replaced during the commit fails with SourcePodNotFound",
		Objects: []runtime.Object{snap(committing), Pod(ns, "sb-0", twoApps, WithRunningOn(node), func(p *corev1.Pod) {
			p.UID = "new-uid"
		}), commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "\"step-commit\" exited with code 1"))},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonSourcePodNotFound, podGone(failedMessage("Failed", "\"step-commit\" exited with code 1")))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonSourcePodNotFound, "%s", podGone(failedMessage("Failed", "\"step-commit\" exited with code 1")))},
	}, {
		Name: "a sandbox pod whose node went away fails with SourcePodNotFound",
		Objects: []runtime.Object{snap(committing), Pod(ns, "sb-0", twoApps, WithRunningOn("node-2")),
			commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "\"step-commit\" exited with code 1"))},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonSourcePodNotFound, podGone(failedMessage("Failed", "\"step-commit\" exited with code 1")))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonSourcePodNotFound, "%s", podGone(failedMessage("Failed", "\"step-commit\" exited with code 1")))},
	}, {
		Name:         "a failed read of a sandbox pod the informer has not seen, after a failed TaskRun, is retried",
		Objects:      []runtime.Object{snap(committing), commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "boom"))},
		Key:          key,
		WithReactors: []clientgotesting.ReactionFunc{rtesting.InduceFailure("get", "pods")},
		WantErr:      true,
		WantEvents:   []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError", "getting pod team-a/sb-0: inducing failure for get pods")},
	}, {
		Name:                    "a TaskRun deleted before it completed fails the snapshot and thaws the sandbox",
		Objects:                 []runtime.Object{snap(committing), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{unpauseTaskRun},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName),
				WithFailed(v1alpha1.ReasonCommitTaskRunMissing, "TaskRun "+trNamespace+"/"+trName+" was deleted before it completed")),
		}},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawing, "The commit pod may have left pod sb-0 paused; TaskRun %s/%s is unpausing it (attempt 1)", trNamespace, unpauseName),
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonCommitTaskRunMissing, "TaskRun %s/%s was deleted before it completed", trNamespace, trName),
		},
	}, {
		Name:                    "a Committing snapshot whose commit OpenSandbox's Job runs waits for that Job, naming it, instead of reporting its TaskRun missing",
		Objects:                 []runtime.Object{snap(osbFinalizers, osbCommitting), osbJob(), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(osbFinalizers, osbCommitting, WithWaitingForOpenSandboxJob(osbWaiting))}},
		WantEvents:              []string{rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonWaitingForOpenSandboxJob, "%s", osbWaiting)},
	}, {
		Name:              "a Pending snapshot whose commit OpenSandbox's Job runs waits for that Job rather than commit the sandbox a second time",
		Objects:           []runtime.Object{snap(osbFinalizers, WithPending), BatchSandbox(ns, sbName, 1), runningPod, osbJob()},
		Key:               key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(osbFinalizers, WithPending, WithWaitingForOpenSandboxJob(osbWaiting))}},
		WantEvents:        []string{rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonWaitingForOpenSandboxJob, "%s", osbWaiting)},
	}, {
		Name:    "a snapshot waiting for OpenSandbox's Job writes nothing while the Job runs",
		Objects: []runtime.Object{snap(osbFinalizers, osbCommitting, WithWaitingForOpenSandboxJob(osbWaiting)), osbJob(), runningPod},
		Key:     key,
	}, {
		Name:    "OpenSandbox's Job the informer has not seen yet is read from the API, not taken for absent",
		Objects: []runtime.Object{snap(osbFinalizers, osbCommitting), runningPod},
		Key:     key,
		WithReactors: []clientgotesting.ReactionFunc{func(action clientgotesting.Action) (bool, runtime.Object, error) {
			return action.GetVerb() == "get" && action.GetResource().Resource == "jobs", osbJob(), nil
		}},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(osbFinalizers, osbCommitting, WithWaitingForOpenSandboxJob(osbWaiting))}},
		WantEvents:        []string{rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonWaitingForOpenSandboxJob, "%s", osbWaiting)},
	}, {
		Name:         "a failed read of OpenSandbox's Job is retried, the snapshot left as it is",
		Objects:      []runtime.Object{snap(osbFinalizers, osbCommitting), runningPod},
		Key:          key,
		WithReactors: []clientgotesting.ReactionFunc{rtesting.InduceFailure("get", "jobs")},
		WantErr:      true,
		WantEvents:   []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError", "getting Job team-a/snap-commit: inducing failure for get jobs")},
	}, {
		Name:    "OpenSandbox's commit Job that succeeded fails the snapshot with OpenSandboxJobEnded, naming the Job, and starts no unpause",
		Objects: []runtime.Object{snap(osbFinalizers, osbCommitting, WithWaitingForOpenSandboxJob(osbWaiting)), osbJob(WithJobComplete), runningPod},
		Key:     key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(osbFinalizers, osbCommitting, WithFailed(v1alpha1.ReasonOpenSandboxJobEnded, osbEnded("succeeded"))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonOpenSandboxJobEnded, "%s", osbEnded("succeeded"))},
	}, {
		Name: "OpenSandbox's commit Job that failed fails the snapshot with OpenSandboxJobEnded and the Job's own reason",
		Objects: []runtime.Object{snap(osbFinalizers, osbCommitting, WithWaitingForOpenSandboxJob(osbWaiting)), runningPod,
			osbJob(WithJobFailed("BackoffLimitExceeded", "Job has reached the specified backoff limit"))},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(osbFinalizers, osbCommitting, WithFailed(v1alpha1.ReasonOpenSandboxJobEnded,
				osbEnded("failed (BackoffLimitExceeded: Job has reached the specified backoff limit)"))),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonOpenSandboxJobEnded, "%s",
			osbEnded("failed (BackoffLimitExceeded: Job has reached the specified backoff limit)"))},
	}, {
		Name: "a commit Job OpenSandbox left for an earlier snapshot of the same name is not waited for",
		Objects: []runtime.Object{snap(osbFinalizers, committing), runningPod,
			osbJob(WithJobControlledBy(Snapshot(ns, snapName, sbName, func(s *v1alpha1.SandboxSnapshot) { s.UID = "old-uid" })))},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{unpauseTaskRun},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(osbFinalizers, committing, WithUnpauseTaskRun(trNamespace, unpauseName),
				WithFailed(v1alpha1.ReasonCommitTaskRunMissing, "TaskRun "+trNamespace+"/"+trName+" was deleted before it completed")),
		}},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawing, "The commit pod may have left pod sb-0 paused; TaskRun %s/%s is unpausing it (attempt 1)", trNamespace, unpauseName),
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonCommitTaskRunMissing, "TaskRun %s/%s was deleted before it completed", trNamespace, trName),
		},
	}, {
		Name:         "a Job of a snapshot without OpenSandbox's finalizer is not looked for: OpenSandbox's controller never started its commit",
		Objects:      []runtime.Object{snap(WithPending), BatchSandbox(ns, sbName, 1), runningPod, osbJob()},
		Key:          key,
		WithReactors: []clientgotesting.ReactionFunc{rtesting.InduceFailure("get", "jobs")},
		// As any snapshot: the TaskRun is created.
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
	}, {
		Name:         "a snapshot committing with its own TaskRun since the switch looks for no Job of OpenSandbox's",
		Objects:      []runtime.Object{snap(osbFinalizers, committing), commitTaskRun(WithTaskRunRunning), osbJob()},
		Key:          key,
		WithReactors: []clientgotesting.ReactionFunc{rtesting.InduceFailure("get", "jobs")},
	}, {
		Name:    "a running unpause TaskRun keeps the thaw pending",
		Objects: []runtime.Object{snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")), TaskRun(unpauseTaskRun, WithTaskRunRunning)},
		Key:     key,
	}, {
		Name: "an unpause TaskRun whose pod a quota refuses keeps the thaw pending, saying why",
		Objects: []runtime.Object{snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")),
			TaskRun(unpauseTaskRun, WithTaskRunWaiting("ExceededResourceQuota", overQuota))},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), func(s *v1alpha1.SandboxSnapshot) {
				s.Status.MarkThawWaiting(v1alpha1.TaskRunReference{Namespace: trNamespace, Name: unpauseName}, "sb-0", 1, overQuota)
			}),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawing,
			"TaskRun %s/%s, unpausing pod sb-0 (attempt 1), cannot start its pod yet: %s", trNamespace, unpauseName, overQuota)},
	}, {
		Name: "an unpause TaskRun still over quota says nothing new",
		Objects: []runtime.Object{snap(committing, WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), func(s *v1alpha1.SandboxSnapshot) {
			s.Status.MarkThawWaiting(v1alpha1.TaskRunReference{Namespace: trNamespace, Name: unpauseName}, "sb-0", 1, overQuota)
		}), TaskRun(unpauseTaskRun, WithTaskRunWaiting("ExceededResourceQuota", overQuota))},
		Key: key,
	}, {
		Name: "a succeeded unpause TaskRun marks the sandbox thawed",
		Ctx:  withConfig(map[string]string{config.RegistryKey: registryPrefix, config.TaskRunRetentionFailedKey: "-1"}),
		Objects: []runtime.Object{snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")),
			TaskRun(unpauseTaskRun, WithTaskRunSucceeded)},
		Key: key,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithThawed),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeNormal, v1alpha1.ReasonThawed, "TaskRun %s/%s unpaused pod sb-0", trNamespace, unpauseName)},
	}, {
		Name: "a failed unpause TaskRun says the sandbox may still be paused, and is retried once its backoff is over",
		Objects: []runtime.Object{snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")),
			runningPod, commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause),
			TaskRun(unpauseTaskRun, WithTaskRunFailed(pipelinev1.TaskRunReasonTimedOut, "timed out"), WithCompletedAt(Now))},
		Key:     key,
		WantErr: true, // a requeue when the backoff is over
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithThawFailed(thawFailedMessage)),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawFailed, "%s", thawFailedMessage)},
	}, {
		Name: "past its backoff, a failed unpause TaskRun is deleted and the next attempt counted",
		Objects: []runtime.Object{snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithThawFailed(thawFailedMessage)),
			runningPod, commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause),
			TaskRun(unpauseTaskRun, WithTaskRunFailed(pipelinev1.TaskRunReasonTimedOut, "timed out"), WithCompletedAt(metav1.NewTime(Now.Add(-11*time.Second))))},
		Key:         key,
		WantErr:     true,
		WantPatches: []clientgotesting.PatchActionImpl{thawAttemptPatch(2)},
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, unpauseName)},
	}, {
		Name: "with the failed attempt gone, the next one starts",
		Objects: []runtime.Object{snap(committing, WithAnnotation(sandbox.ThawAttemptAnnotation, "2"), WithUnpauseTaskRun(trNamespace, unpauseName),
			WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithThawFailed(thawFailedMessage)),
			runningPod, commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{unpauseTaskRun},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithAnnotation(sandbox.ThawAttemptAnnotation, "2"), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"),
				func(s *v1alpha1.SandboxSnapshot) {
					s.Status.MarkThawing(v1alpha1.TaskRunReference{Namespace: trNamespace, Name: unpauseName}, "sb-0", 2)
				}),
		}},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawing,
			"The commit pod may have left pod sb-0 paused; TaskRun %s/%s is unpausing it (attempt 2)", trNamespace, unpauseName)},
	}, {
		Name: "the backoff doubles with each attempt: the third waits 40 seconds",
		Objects: []runtime.Object{snap(committing, WithAnnotation(sandbox.ThawAttemptAnnotation, "3"), WithUnpauseTaskRun(trNamespace, unpauseName),
			WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithThawFailed(thawFailedMessage)),
			runningPod, commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause),
			TaskRun(unpauseTaskRun, WithTaskRunFailed(pipelinev1.TaskRunReasonTimedOut, "timed out"), WithCompletedAt(metav1.NewTime(Now.Add(-30*time.Second))))},
		Key:     key,
		WantErr: true,
	}, {
		Name: "a deleted unpause TaskRun is started again",
		Objects: []runtime.Object{snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")),
			runningPod, commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{unpauseTaskRun},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawing,
			"The commit pod may have left pod sb-0 paused; TaskRun %s/%s is unpausing it (attempt 1)", trNamespace, unpauseName)},
	}, {
		Name: "a thaw whose pod went away ends: nothing of it is frozen",
		Objects: []runtime.Object{snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")),
			commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause),
			TaskRun(unpauseTaskRun, WithTaskRunFailed(pipelinev1.TaskRunReasonTimedOut, "timed out"), WithCompletedAt(Now))},
		Key: key,
		Ctx: withConfig(map[string]string{config.RegistryKey: registryPrefix, config.TaskRunRetentionFailedKey: "-1"}),
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"),
				WithThawFailed("pod sb-0 went away before it was thawed; nothing is left to thaw")),
		}},
	}, {
		Name:    "a terminal snapshot is never changed again",
		Objects: []runtime.Object{snap(committing, WithSucceeded(412, digestA, digestB)), commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "late"))},
		Key:     key,
		// TaskRuns kept until the snapshot goes: retention_test.go has the rest.
		Ctx: withConfig(map[string]string{config.RegistryKey: registryPrefix, config.TaskRunRetentionSucceededKey: "-1"}),
	}, {
		Name: "a status update conflict is retried with a fresh read",
		Objects: []runtime.Object{snap(committing), commitTaskRun(WithTaskRunSucceeded,
			WithResult(task.ResultDigests, digestA+","+digestB), WithResult(task.ResultPauseWindowMS, "412"))},
		Key:          key,
		WithReactors: []clientgotesting.ReactionFunc{conflictOnce()},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{
			{Object: snap(committing, WithSucceeded(412, digestA, digestB))},
			{Object: snap(committing, WithSucceeded(412, digestA, digestB))},
		},
	}, {
		Name:    "a status write that meets a conflict never overwrites a terminal phase written meanwhile",
		Objects: []runtime.Object{snap(committing), commitTaskRun(WithTaskRunRunning, WithTaskRunWaiting("Pending", unschedulable))},
		Key:     key,
		WithReactors: []clientgotesting.ReactionFunc{conflictOnce(),
			getSnapshot(snap(committing, WithSucceeded(412, digestA, digestB)))},
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{
			Object: snap(committing, WithCommitPodPending("TaskRun "+trNamespace+"/"+trName+" cannot start its pod on node "+node+" yet (Pending): "+unschedulable)),
		}},
	}, {
		Name:                    "a TaskRun made by a pass whose snapshot went meanwhile is deleted, not orphaned",
		Objects:                 []runtime.Object{snap(), BatchSandbox(ns, sbName, 1), runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{statusUpdateNotFound},
		WantCreates:             []runtime.Object{commitTaskRun()},
		WantStatusUpdates:       []clientgotesting.UpdateActionImpl{{Object: snap(committing)}},
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName)},
	}, {
		Name: "a failed status update is reported and retried",
		Objects: []runtime.Object{snap(committing), commitTaskRun(WithTaskRunSucceeded,
			WithResult(task.ResultDigests, digestA+","+digestB), WithResult(task.ResultPauseWindowMS, "412"))},
		Key:               key,
		WithReactors:      []clientgotesting.ReactionFunc{rtesting.InduceFailure("update", "sandboxsnapshots")},
		WantErr:           true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing, WithSucceeded(412, digestA, digestB))}},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeWarning, "InternalError", "updating the status of SandboxSnapshot %s: %v", key, "inducing failure for update sandboxsnapshots"),
		},
	}, {
		Name:                    "deleting a snapshot cancels its running TaskRun and keeps the finalizer until it has ended",
		Objects:                 []runtime.Object{snap(committing, WithDeletionTimestamp), commitTaskRun(WithTaskRunRunning)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantErr:                 true, // a requeue, in case the TaskRun's own event is missed
		WantPatches:             []clientgotesting.PatchActionImpl{cancelPatch(trNamespace, trName)},
	}, {
		Name:    "deleting a snapshot waits for its cancelled TaskRun to end",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp), commitTaskRun(WithTaskRunRunning, WithCancelled)},
		Key:     key,
		WantErr: true,
	}, {
		Name:                    "deleting a snapshot right after its TaskRun was created finds the TaskRun through the API",
		Objects:                 []runtime.Object{snap(WithDeletionTimestamp)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{getTaskRuns(map[string]*pipelinev1.TaskRun{trName: commitTaskRun(WithTaskRunRunning)})},
		WantErr:                 true,
		WantPatches:             []clientgotesting.PatchActionImpl{cancelPatch(trNamespace, trName)},
	}, {
		Name: "deleting a snapshot whose cancelled commit may have left the pod paused thaws it before dropping the finalizer",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp), runningPod,
			commitTaskRun(WithCancelled, WithTaskRunFailed(pipelinev1.TaskRunReasonCancelled, "SandboxSnapshot deleted"),
				WithStep(task.StepCommit, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "TaskRunCancelled"}}),
				withImageID(task.StepCommit))},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantErr:                 true,
		WantCreates:             []runtime.Object{unpauseTaskRun},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawing, "The commit pod may have left pod sb-0 paused; TaskRun %s/%s is unpausing it (attempt 1)", trNamespace, unpauseName),
			deletionWaits("TaskRun %s/%s is unpausing pod sb-0 (attempt 1)", trNamespace, unpauseName),
		},
	}, {
		Name: "deleting a snapshot whose cancelled commit never started needs no thaw",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp), runningPod,
			commitTaskRun(WithCancelled, WithTaskRunFailed(pipelinev1.TaskRunReasonCancelled, "SandboxSnapshot deleted"),
				WithStep(task.StepCommit, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "TaskRunCancelled"}}))},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName)},
	}, {
		Name: "deleting a snapshot stops waiting for its commit TaskRun past the bound",
		Objects: []runtime.Object{snap(committing, func(s *v1alpha1.SandboxSnapshot) {
			s.DeletionTimestamp = &metav1.Time{Time: Now.Add(-resources.UnpauseTimeout)}
		}), commitTaskRun(WithTaskRunRunning, WithCancelled)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName)},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawFailed,
				"Gave up waiting for the commit TaskRun of SandboxSnapshot %s after %v; pod sb-0 may still be paused", key, resources.UnpauseTimeout),
		},
	}, {
		Name:                    "deleting a snapshot deletes its finished TaskRuns",
		Objects:                 []runtime.Object{snap(committing, WithDeletionTimestamp), commitTaskRun(WithTaskRunSucceeded), TaskRun(unpauseTaskRun, WithTaskRunSucceeded)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName), deleteTaskRun(trNamespace, unpauseName)},
	}, {
		Name:        "deleting a snapshot OpenSandbox's controller also finalized drops OpenSandbox's finalizer with ours",
		Objects:     []runtime.Object{snap(osbFinalizers, WithDeletionTimestamp)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name:        "deleting a snapshot keeps the finalizers that are neither ours nor OpenSandbox's",
		Objects:     []runtime.Object{snap(WithFinalizers("example.com/keep", FinalizerName, sandbox.OpenSandboxSnapshotFinalizer), WithDeletionTimestamp)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName, "example.com/keep")},
	}, {
		Name:    "deleting a snapshot keeps OpenSandbox's finalizer while its own finalization waits",
		Objects: []runtime.Object{snap(osbFinalizers, committing, WithDeletionTimestamp), commitTaskRun(WithTaskRunRunning, WithCancelled)},
		Key:     key,
		WantErr: true,
	}, {
		Name:        "deleting a snapshot that only OpenSandbox's controller finalized drops OpenSandbox's finalizer, and only that",
		Objects:     []runtime.Object{Snapshot(ns, snapName, sbName, WithFinalizers(sandbox.OpenSandboxSnapshotFinalizer, "example.com/keep"), WithDeletionTimestamp)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName, "example.com/keep")},
	}, {
		Name:    "deleting a snapshot with neither our finalizer nor OpenSandbox's leaves it alone",
		Objects: []runtime.Object{Snapshot(ns, snapName, sbName, WithFinalizers("example.com/keep"), WithDeletionTimestamp)},
		Key:     key,
	}, {
		Name:        "deleting a snapshot without TaskRuns drops the finalizer",
		Objects:     []runtime.Object{snap(WithDeletionTimestamp)},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name: "deleting a snapshot leaves a TaskRun of another snapshot alone",
		Objects: []runtime.Object{snap(WithDeletionTimestamp),
			commitTaskRun(func(tr *pipelinev1.TaskRun) { tr.Labels[sandbox.SnapshotUIDLabel] = "old-uid" })},
		Key:         key,
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
	}, {
		Name: "deleting a snapshot waits for a running unpause TaskRun, keeping the finalizer and naming the sandbox",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp), commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed")),
			TaskRun(unpauseTaskRun, WithTaskRunRunning, func(tr *pipelinev1.TaskRun) { tr.CreationTimestamp = Now })},
		Key:        key,
		WantErr:    true,
		WantEvents: []string{deletionWaits("its unpause TaskRun is running")},
	}, {
		Name: "deleting a snapshot keeps waiting for an unpause TaskRun past its timeout: Tekton ends it, or a quota holds its pod",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp), commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed")),
			TaskRun(unpauseTaskRun, WithTaskRunRunning, func(tr *pipelinev1.TaskRun) {
				tr.CreationTimestamp = metav1.NewTime(Now.Add(-resources.UnpauseTimeout))
			})},
		Key:        key,
		WantErr:    true,
		WantEvents: []string{deletionWaits("its unpause TaskRun is running")},
	}, {
		Name: "deleting a snapshot whose unpause failed keeps the finalizer through the thaw's backoff",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")),
			runningPod, commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause),
			TaskRun(unpauseTaskRun, WithTaskRunFailed(pipelinev1.TaskRunReasonTimedOut, "timed out"), WithCompletedAt(Now))},
		Key:     key,
		WantErr: true,
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawFailed, "%s", thawFailedMessage),
			deletionWaits("%s", thawFailedMessage),
		},
	}, {
		Name: "deleting a snapshot whose unpause failed retries the thaw past its backoff, keeping the finalizer",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithThawFailed(thawFailedMessage)),
			runningPod, commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause),
			TaskRun(unpauseTaskRun, WithTaskRunFailed(pipelinev1.TaskRunReasonTimedOut, "timed out"), WithCompletedAt(metav1.NewTime(Now.Add(-11*time.Second))))},
		Key:         key,
		WantErr:     true,
		WantPatches: []clientgotesting.PatchActionImpl{thawAttemptPatch(2)},
		WantDeletes: []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, unpauseName)},
		WantEvents:  []string{deletionWaits("%s", thawFailedMessage)},
	}, {
		Name: "deleting a snapshot whose earlier unpause attempts failed starts the next one",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp, WithAnnotation(sandbox.ThawAttemptAnnotation, "2"), WithUnpauseTaskRun(trNamespace, unpauseName),
			WithFailed(v1alpha1.ReasonCommitJobFailed, "killed"), WithThawFailed(thawFailedMessage)),
			runningPod, commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantErr:                 true,
		WantCreates:             []runtime.Object{unpauseTaskRun},
		WantEvents: []string{
			rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonThawing,
				"The commit pod may have left pod sb-0 paused; TaskRun %s/%s is unpausing it (attempt 2)", trNamespace, unpauseName),
			deletionWaits("TaskRun %s/%s is unpausing pod sb-0 (attempt 2)", trNamespace, unpauseName),
		},
	}, {
		Name: "deleting a snapshot whose unpause succeeded drops the finalizer",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp, WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")),
			runningPod, commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause),
			TaskRun(unpauseTaskRun, WithTaskRunSucceeded)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName), deleteTaskRun(trNamespace, unpauseName)},
	}, {
		// The pass queued by the TaskRuns' deletion may read a cached copy
		// of the snapshot that the finalizer's removal has already deleted.
		Name: "a cached copy of a snapshot deleted after its thaw starts no second thaw",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")),
			runningPod},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{snapshotGone(ns, snapName)},
		// The generated reconciler still tries to remove the finalizer.
		WantPatches: []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "FinalizerUpdateFailed",
			`Failed to update finalizers for "snap": sandboxsnapshots.sandbox.opensandbox.io "snap" not found`)},
	}, {
		Name: "deleting a snapshot whose paused pod went away drops the finalizer: nothing is left to thaw",
		Objects: []runtime.Object{snap(committing, WithDeletionTimestamp, WithUnpauseTaskRun(trNamespace, unpauseName), WithFailed(v1alpha1.ReasonCommitJobFailed, "killed")),
			commitTaskRun(WithTaskRunFailed(pipelinev1.TaskRunReasonFailed, "killed"), killedMidPause),
			TaskRun(unpauseTaskRun, WithTaskRunFailed(pipelinev1.TaskRunReasonTimedOut, "timed out"), WithCompletedAt(Now))},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName), deleteTaskRun(trNamespace, unpauseName)},
	}, {
		Name:                    "deleting a Succeed snapshot keeps its TaskRuns while the release cannot start",
		Objects:                 []runtime.Object{snap(committing, WithSucceeded(412, digestA, digestB), WithDeletionTimestamp), commitTaskRun(WithTaskRunSucceeded)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{rtesting.InduceFailure("create", "taskruns")},
		WantErr:                 true,
		WantCreates:             []runtime.Object{releaseTaskRun},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"creating TaskRun %s/team-a-snap-05307b-release: inducing failure for create taskruns", trNamespace)},
	}, {
		Name:                    "deleting a Succeed snapshot starts the release of the images its commit kept on the node, without waiting for it",
		Objects:                 []runtime.Object{snap(committing, WithSucceeded(412, digestA, digestB), WithDeletionTimestamp), commitTaskRun(WithTaskRunSucceeded)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantCreates:             []runtime.Object{releaseTaskRun},
		WantPatches:             []clientgotesting.PatchActionImpl{removeFinalizers(ns, snapName)},
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName)},
	}, {
		Name:                    "the done TaskRuns of a snapshot that is gone are deleted: its finalizer was forced off, or its release ended",
		Objects:                 []runtime.Object{commitTaskRun(WithTaskRunSucceeded), TaskRun(releaseTaskRun, WithTaskRunSucceeded)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName), deleteTaskRun(trNamespace, releaseName)},
	}, {
		Name:                    "the running commit TaskRun of a snapshot that is gone is cancelled, so that its committer thaws the sandbox",
		Objects:                 []runtime.Object{commitTaskRun(WithTaskRunRunning), TaskRun(releaseTaskRun, WithTaskRunRunning)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WantPatches:             []clientgotesting.PatchActionImpl{cancelPatch(trNamespace, trName)},
	}, {
		Name: "the TaskRuns of an earlier snapshot of a name that another snapshot holds now are left to that snapshot's passes",
		Objects: []runtime.Object{snap(committing, WithSucceeded(412, digestA, digestB)),
			TaskRun(releaseTaskRun, WithTaskRunSucceeded, func(tr *pipelinev1.TaskRun) { tr.Labels[sandbox.SnapshotUIDLabel] = "old-uid" })},
		Key: key,
	}, {
		Name:                    "a failed TaskRun delete keeps the finalizer",
		Objects:                 []runtime.Object{snap(committing, WithDeletionTimestamp), commitTaskRun(WithTaskRunSucceeded)},
		Key:                     key,
		SkipNamespaceValidation: true,
		WithReactors:            []clientgotesting.ReactionFunc{rtesting.InduceFailure("delete", "taskruns")},
		WantErr:                 true,
		WantDeletes:             []clientgotesting.DeleteActionImpl{deleteTaskRun(trNamespace, trName)},
		WantEvents: []string{rtesting.Eventf(corev1.EventTypeWarning, "InternalError",
			"deleting TaskRun %s/%s: inducing failure for delete taskruns", trNamespace, trName)},
	}}

	table.Test(t, MakeFactory(newReconciler))
}

// TestReconcileFailureReasons checks that each way a TaskRun fails maps to
// its own snapshot reason.
func TestReconcileFailureReasons(t *testing.T) {
	trNamespace := system.Namespace()
	trName := "team-a-snap-05307b-commit"
	committing := WithCommitting("sb-0", node, committed, trNamespace, trName)
	snap := func(opts ...SnapshotOption) *v1alpha1.SandboxSnapshot {
		return Snapshot(ns, snapName, sbName, append([]SnapshotOption{WithFinalizers(FinalizerName)}, opts...)...)
	}
	var table rtesting.TableTest
	for tekton, want := range map[pipelinev1.TaskRunReason]string{
		pipelinev1.TaskRunReasonTimedOut:         v1alpha1.ReasonCommitTimedOut,
		pipelinev1.TaskRunReasonCancelled:        v1alpha1.ReasonCommitCancelled,
		pipelinev1.TaskRunReasonStepOOM:          v1alpha1.ReasonCommitOOMKilled,
		pipelinev1.TaskRunReasonPodEvicted:       v1alpha1.ReasonCommitPodEvicted,
		pipelinev1.TaskRunReasonImagePullFailed:  v1alpha1.ReasonCommitImagePullFailed,
		pipelinev1.TaskRunReasonFailedResolution: v1alpha1.ReasonCommitResolutionFailed,
		pipelinev1.TaskRunReasonFailed:           v1alpha1.ReasonCommitJobFailed,
	} {
		message := "TaskRun " + trNamespace + "/" + trName + " failed (" + tekton.String() + "): boom; see: tkn taskrun logs " + trName + " -n " + trNamespace
		src := resources.Source{Pod: runningPod, Containers: committed}
		table = append(table, rtesting.TableRow{
			Name: "TaskRun reason " + tekton.String() + " fails the snapshot with " + want,
			Objects: []runtime.Object{snap(committing), runningPod,
				TaskRun(resources.MakeTaskRun(snap(), src, defaultCfg, trNamespace), WithTaskRunFailed(tekton, "boom"))},
			Key:               key,
			WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: snap(committing, WithFailed(want, message))}},
			WantEvents:        []string{rtesting.Eventf(corev1.EventTypeWarning, want, "%s", message)},
		})
	}
	table.Test(t, MakeFactory(newReconciler))
}

var (
	generationImages = []v1alpha1.ContainerSnapshot{
		{ContainerName: "app", ImageURI: registryPrefix + "/team-a/sb/app:snap-gen7-sbuid"},
		{ContainerName: "sidecar", ImageURI: registryPrefix + "/team-a/sb/sidecar:snap-gen7-sbuid"},
	}
	noPodMessage = "no Running pod found for BatchSandbox team-a/sb (tried [pods labelled " +
		sandbox.BatchSandboxPodLabel + "=sb pod sb-0])"
	noRegistryMessage  = "ConfigMap config-snapshot: " + config.ErrRegistryNotConfigured.Error()
	badTimeoutMessage  = "ConfigMap config-snapshot: key \"commit-timeout\": \"soon\" is not a duration such as 10m"
	taskBundle         = "registry.test/tasks/sandbox-commit@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
	bundleByTagMessage = "ConfigMap config-snapshot: key \"task-bundle\": \"registry.test/tasks/sandbox-commit:v1\" is not a bundle pinned by digest, <registry>/<repository>@sha256:<hex> (tkn bundle push prints it): a digest must contain exactly one '@' separator (e.g. registry/repository@digest) saw: registry.test/tasks/sandbox-commit:v1"
	invalidSpecMessage = "SandboxSnapshot team-a/snap: invalid value: Not_A_Name: spec.sandboxName\n" +
		"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
	badModeMessage  = "SandboxSnapshot team-a/snap: annotation " + sandbox.SnapshotModeAnnotation + ": \"memory\" is neither \"Filesystem\" nor \"Memory\""
	badImageMessage = "BatchSandbox team-a/sb: image \"registry.test/Snapshots/team-a/sb/app:" + tag +
		"\" for container \"app\" is not a valid OCI reference: repository can only contain the characters `abcdefghijklmnopqrstuvwxyz0123456789_-./`: Snapshots/team-a/sb/app"
)

// withImageID marks a step's container as created, as the kubelet reports
// it once the container exists.
func withImageID(step string) TaskRunOption {
	return func(tr *pipelinev1.TaskRun) {
		for i := range tr.Status.Steps {
			if tr.Status.Steps[i].Name == step {
				tr.Status.Steps[i].ImageID = "registry.test/committer@sha256:0123"
			}
		}
	}
}

// withoutOwnFields drops the status fields OpenSandbox's CRD prunes.
func withoutOwnFields(s *v1alpha1.SandboxSnapshot) {
	s.Status.TaskRunRef = nil
	s.Status.StartTime = nil
	s.Status.CompletionTime = nil
	s.Status.PauseWindowMilliseconds = nil
	s.Status.Thaw = nil
	s.Status.RemovedTaskRuns = nil
	s.Status.MissingImages = nil
}

// thawAttemptPatch is the patch that counts an attempt to thaw.
func thawAttemptPatch(attempt int) clientgotesting.PatchActionImpl {
	return clientgotesting.PatchActionImpl{
		ActionImpl: clientgotesting.ActionImpl{Namespace: ns},
		Name:       snapName,
		PatchType:  types.MergePatchType,
		Patch:      []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, sandbox.ThawAttemptAnnotation, attempt)),
	}
}

// deletionWaits is the event of a deleted snapshot that waits for its
// sandbox, sb-0 of sb, to be thawed, for the reason format says.
func deletionWaits(format string, args ...any) string {
	return rtesting.Eventf(corev1.EventTypeWarning, v1alpha1.ReasonDeletionWaitsForThaw,
		"SandboxSnapshot "+ns+"/"+snapName+" is deleted once sandbox "+sbName+" (pod sb-0) is thawed: "+format, args...)
}

func orphanMessage(namespace, name string) string {
	return "Waiting for TaskRun " + namespace + "/" + name + " of an earlier SandboxSnapshot team-a/snap (uid old-uid) to be deleted"
}

func waitingMessage(namespace, name string) string {
	return "Waiting for SandboxSnapshot team-a/first (TaskRun " + namespace + "/" + name + ") to finish with pod sb-0"
}

func podGone(message string) string {
	return "pod team-a/sb-0 went away during the commit; " + message
}

func missingSecretMessage(namespace string) string {
	return "push Secret " + namespace + "/push named by ConfigMap config-snapshot (key \"push-secret\") not found"
}

func wrongSecretMessage(namespace string) string {
	return "push Secret " + namespace + "/push is of type \"Opaque\", want \"kubernetes.io/dockerconfigjson\""
}

func badResultsMessage(namespace, name string) string {
	return "TaskRun " + namespace + "/" + name + ": result DIGESTS holds 1 digest(s), want 2"
}

func badPauseMessage(namespace, name string) string {
	return "TaskRun " + namespace + "/" + name + ": result PAUSE_WINDOW_MS is \"soon\", not a number of milliseconds"
}

func pushFailedMessage(failedMessage func(reason, message string) string) string {
	m := failedMessage("Failed", "\"step-push\" exited with code 1")
	i := len(m) - len("; see: tkn taskrun logs team-a-snap-05307b-commit -n "+system.Namespace())
	return m[:i] + "; committer: pushing registry.test/snapshots/team-a/sb/app: connection refused" + m[i:]
}

// k3sPool is a node-pools value for nodes labelled as k3s's, whose
// containerd keeps its socket and snapshots at k3sSocket and k3sSnapshots.
const (
	k3sSocket    = "/run/k3s/containerd/containerd.sock"
	k3sSnapshots = "/var/lib/rancher/k3s/agent/containerd/io.containerd.snapshotter.v1.overlayfs"
	k3sPool      = "- nodeSelector: {node.example.com/image: k3s}\n  containerd-socket: " + k3sSocket + "\n  containerd-overlayfs-root: " + k3sSnapshots + "\n"
)

func newReconciler(ctx context.Context, ls *Listers) controller.Reconciler {
	r := &Reconciler{
		kubeClient:     fakekubeclient.Get(ctx),
		sandboxClient:  fakesandboxclient.Get(ctx),
		pipelineClient: fakepipelineclient.Get(ctx),
		taskRunIndex:   ls.Indexer(&pipelinev1.TaskRun{}, taskRunIndexers),
		snapshotLister: ls.GetSandboxSnapshotLister(),
		sandboxLister:  ls.GetBatchSandboxLister(),
		podLister:      ls.GetPodLister(),
		jobLister:      ls.GetJobLister(),
		clock:          clocktesting.NewFakePassiveClock(Now.Time),
		namespace:      system.Namespace(),
		commits:        newCommitGate(),
		writes:         newOwnWrites(),
		registry:       registryOf(ctx),
		checks:         imageChecksOf(ctx),
		metrics:        testMetrics(ctx, ls),
	}
	// The controller's recorder, around the row's.
	recorder := controller.GetEventRecorder(withEventRecorder(ctx))
	return withSweep(snapshotreconciler.NewReconciler(ctx, logging.FromContext(ctx), fakesandboxclient.Get(ctx),
		ls.GetSandboxSnapshotLister(), recorder, r,
		controller.Options{ConfigStore: staticConfig{}, FinalizerName: FinalizerName, SkipStatusUpdates: true}), r)
}

// staticConfig attaches defaultCfg unless the row's context carries its own.
type staticConfig struct{}

func (staticConfig) ToContext(ctx context.Context) context.Context {
	if config.FromContext(ctx) != nil {
		return ctx
	}
	return config.ToContext(ctx, &config.Config{Snapshot: defaultCfg})
}

func withConfig(data map[string]string) context.Context {
	return config.ToContext(context.Background(), &config.Config{Snapshot: mustConfig(data)})
}

// mustConfig parses data; the missing-image check is off unless data turns
// it on, so that only imagecheck_test.go's rows look images up.
func mustConfig(data map[string]string) *config.Snapshot {
	if _, ok := data[config.ImageCheckIntervalKey]; !ok {
		data = maps.Clone(data)
		data[config.ImageCheckIntervalKey] = "0"
	}
	cfg, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: data})
	return cfg
}

func patchFinalizers(namespace, name string, resourceVersion ...string) clientgotesting.PatchActionImpl {
	rv := ""
	if len(resourceVersion) > 0 {
		rv = resourceVersion[0]
	}
	return clientgotesting.PatchActionImpl{
		ActionImpl: clientgotesting.ActionImpl{Namespace: namespace},
		Name:       name,
		Patch:      []byte(`{"metadata":{"finalizers":["` + FinalizerName + `"],"resourceVersion":"` + rv + `"}}`),
	}
}

// removeFinalizers is the patch that leaves the named snapshot with only the
// kept finalizers.
func removeFinalizers(namespace, name string, kept ...string) clientgotesting.PatchActionImpl {
	finalizers, _ := json.Marshal(append([]string{}, kept...))
	return clientgotesting.PatchActionImpl{
		ActionImpl: clientgotesting.ActionImpl{Namespace: namespace},
		Name:       name,
		Patch:      []byte(`{"metadata":{"finalizers":` + string(finalizers) + `,"resourceVersion":""}}`),
	}
}

func cancelPatch(namespace, name string) clientgotesting.PatchActionImpl {
	return clientgotesting.PatchActionImpl{
		ActionImpl: clientgotesting.ActionImpl{Namespace: namespace},
		Name:       name,
		Patch:      []byte(`{"spec":{"status":"TaskRunCancelled","statusMessage":"SandboxSnapshot deleted"}}`),
	}
}

func deleteTaskRun(namespace, name string) clientgotesting.DeleteActionImpl {
	return clientgotesting.DeleteActionImpl{
		ActionImpl: clientgotesting.ActionImpl{Namespace: namespace, Resource: pipelinev1.SchemeGroupVersion.WithResource("taskruns")},
		Name:       name,
	}
}

// bumpResourceVersionOnPatch makes the finalizer patch return a newer version
// than the informer holds, as a real API server does.
func bumpResourceVersionOnPatch(action clientgotesting.Action) (bool, runtime.Object, error) {
	if action.GetVerb() != "patch" || action.GetResource().Resource != "sandboxsnapshots" {
		return false, nil, nil
	}
	s := Snapshot(ns, snapName, sbName, WithFinalizers(FinalizerName), WithResourceVersion("2"))
	return true, s, nil
}

// alreadyExists makes TaskRun creates fail as when the TaskRun exists but
// the informer has not seen it, and serves tr to the follow-up get.
func alreadyExists(tr *pipelinev1.TaskRun) clientgotesting.ReactionFunc {
	return func(action clientgotesting.Action) (bool, runtime.Object, error) {
		switch {
		case action.GetResource().Resource != "taskruns":
			return false, nil, nil
		case action.GetVerb() == "create":
			return true, nil, apierrs.NewAlreadyExists(pipelinev1.Resource("taskruns"), tr.Name)
		case action.GetVerb() == "get":
			return true, tr, nil
		}
		return false, nil, nil
	}
}

// getTaskRuns serves the TaskRuns to gets by name, as the API does for
// TaskRuns the informer has not seen yet.
func getTaskRuns(trs map[string]*pipelinev1.TaskRun) clientgotesting.ReactionFunc {
	return func(action clientgotesting.Action) (bool, runtime.Object, error) {
		get, ok := action.(clientgotesting.GetAction)
		if !ok || action.GetResource().Resource != "taskruns" {
			return false, nil, nil
		}
		if tr, ok := trs[get.GetName()]; ok {
			return true, tr, nil
		}
		return true, nil, apierrs.NewNotFound(pipelinev1.Resource("taskruns"), get.GetName())
	}
}

// getReturns serves tr to TaskRun gets, as the API does for a TaskRun the
// informer has not seen yet.
func getReturns(tr *pipelinev1.TaskRun) clientgotesting.ReactionFunc {
	return func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetVerb() != "get" || action.GetResource().Resource != "taskruns" {
			return false, nil, nil
		}
		return true, tr, nil
	}
}

// getBatchSandbox serves sb to BatchSandbox gets, as the API does for a
// BatchSandbox the informer has not seen yet.
func getBatchSandbox(sb *v1alpha1.BatchSandbox) clientgotesting.ReactionFunc {
	return func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetVerb() != "get" || action.GetResource().Resource != "batchsandboxes" {
			return false, nil, nil
		}
		return true, sb, nil
	}
}

// snapshotGone answers every request for the named snapshot with NotFound,
// as after its deletion, while the informer's cache still holds it.
func snapshotGone(namespace, name string) clientgotesting.ReactionFunc {
	return func(action clientgotesting.Action) (bool, runtime.Object, error) {
		get, ok := action.(clientgotesting.GetAction)
		if !ok || action.GetResource().Resource != "sandboxsnapshots" || get.GetNamespace() != namespace || get.GetName() != name {
			return false, nil, nil
		}
		return true, nil, apierrs.NewNotFound(v1alpha1.Resource("sandboxsnapshots"), name)
	}
}

// listPods serves pods to pod lists, as the API does for pods the informer
// has not seen yet.
func listPods(pods ...*corev1.Pod) clientgotesting.ReactionFunc {
	return func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetVerb() != "list" || action.GetResource().Resource != "pods" {
			return false, nil, nil
		}
		list := &corev1.PodList{}
		for _, p := range pods {
			list.Items = append(list.Items, *p)
		}
		return true, list, nil
	}
}

// getSnapshot serves s to snapshot gets, as another writer left it.
func getSnapshot(s *v1alpha1.SandboxSnapshot) clientgotesting.ReactionFunc {
	return func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetVerb() != "get" || action.GetResource().Resource != "sandboxsnapshots" {
			return false, nil, nil
		}
		return true, s, nil
	}
}

// statusUpdateNotFound fails status updates as when the snapshot is gone.
func statusUpdateNotFound(action clientgotesting.Action) (bool, runtime.Object, error) {
	if action.GetVerb() != "update" || action.GetSubresource() != "status" {
		return false, nil, nil
	}
	return true, nil, apierrs.NewNotFound(v1alpha1.Resource("sandboxsnapshots"), snapName)
}

// conflictOnce fails the first status update with a conflict.
func conflictOnce() clientgotesting.ReactionFunc {
	failed := false
	return func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if failed || action.GetVerb() != "update" || action.GetSubresource() != "status" {
			return false, nil, nil
		}
		failed = true
		return true, nil, apierrs.NewConflict(v1alpha1.Resource("sandboxsnapshots"), snapName, errors.New("the object has been modified"))
	}
}
