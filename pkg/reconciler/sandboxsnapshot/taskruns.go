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
	"fmt"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	pipelinelisters "github.com/tektoncd/pipeline/pkg/client/listers/pipeline/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// Indexes of the TaskRun informer: by the sandbox pod a TaskRun works on, and
// by its snapshot. Both keys start with the TaskRun's namespace.
const (
	podIndex      = "pod"
	snapshotIndex = "snapshot"
)

// taskRunIndexers are the TaskRun informer's indexes.
var taskRunIndexers = cache.Indexers{
	podIndex: func(obj any) ([]string, error) {
		tr, ok := obj.(*pipelinev1.TaskRun)
		if !ok || tr.Labels[sandbox.SourcePodUIDLabel] == "" {
			return nil, nil
		}
		return []string{podKey(tr.Namespace, types.UID(tr.Labels[sandbox.SourcePodUIDLabel]))}, nil
	},
	snapshotIndex: func(obj any) ([]string, error) {
		tr, ok := obj.(*pipelinev1.TaskRun)
		if !ok || tr.Labels[sandbox.SnapshotNameLabel] == "" {
			return nil, nil
		}
		return []string{snapshotKey(tr.Namespace, tr.Labels[sandbox.SnapshotNamespaceLabel], tr.Labels[sandbox.SnapshotNameLabel])}, nil
	},
}

// podKey is podIndex's key of the TaskRuns in trNamespace made for pod.
func podKey(trNamespace string, pod types.UID) string {
	return trNamespace + "/" + string(pod)
}

// snapshotKey is snapshotIndex's key of the TaskRuns in trNamespace made for
// the snapshot namespace/name.
func snapshotKey(trNamespace, namespace, name string) string {
	return trNamespace + "/" + namespace + "/" + name
}

// taskRunLister lists the informer's TaskRuns in r's namespace.
func (r *Reconciler) taskRunLister() pipelinelisters.TaskRunNamespaceLister {
	return pipelinelisters.NewTaskRunLister(r.taskRunIndex).TaskRuns(r.namespace)
}

// indexedTaskRuns returns the TaskRuns the informer's index holds under key.
func (r *Reconciler) indexedTaskRuns(index, key string) ([]*pipelinev1.TaskRun, error) {
	objs, err := r.taskRunIndex.ByIndex(index, key)
	if err != nil {
		return nil, fmt.Errorf("listing TaskRuns by %s %s: %w", index, key, err)
	}
	trs := make([]*pipelinev1.TaskRun, 0, len(objs))
	for _, o := range objs {
		if tr, ok := o.(*pipelinev1.TaskRun); ok {
			trs = append(trs, tr)
		}
	}
	return trs, nil
}

// cachedCommit returns s's commit TaskRun from the informer, or nil.
func (r *Reconciler) cachedCommit(s *v1alpha1.SandboxSnapshot) *pipelinev1.TaskRun {
	return r.cachedTaskRun(s, names.CommitTaskRun(s))
}

// cachedTaskRun returns s's TaskRun of the given name from the informer, or nil.
func (r *Reconciler) cachedTaskRun(s *v1alpha1.SandboxSnapshot, name string) *pipelinev1.TaskRun {
	tr, err := r.taskRunLister().Get(name)
	if err != nil || !ownedBy(tr, s) {
		return nil
	}
	return tr
}

// findTaskRun returns the TaskRun of the given name from the informer, or nil;
// with live set, from the API on a miss, lest one not yet cached pass for deleted.
func (r *Reconciler) findTaskRun(ctx context.Context, name string, live bool) (*pipelinev1.TaskRun, error) {
	tr, err := r.taskRunLister().Get(name)
	if apierrs.IsNotFound(err) && live {
		tr, err = r.pipelineClient.TektonV1().TaskRuns(r.namespace).Get(ctx, name, metav1.GetOptions{})
	}
	switch {
	case apierrs.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("getting TaskRun %s/%s: %w", r.namespace, name, err)
	}
	return tr, nil
}

// ownedBy reports whether tr was made for s, not an earlier snapshot of its name.
func ownedBy(tr *pipelinev1.TaskRun, s *v1alpha1.SandboxSnapshot) bool {
	return tr.Labels[sandbox.SnapshotUIDLabel] == string(s.UID)
}

// createTaskRun creates want, or returns the one another pass made for s, and
// reports whether it created it; one an earlier snapshot left is deleted.
func (r *Reconciler) createTaskRun(ctx context.Context, s *v1alpha1.SandboxSnapshot, want *pipelinev1.TaskRun) (*pipelinev1.TaskRun, bool, error) {
	taskRuns := r.pipelineClient.TektonV1().TaskRuns(want.Namespace)
	tr, err := taskRuns.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		return tr, true, nil
	}
	if !apierrs.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("creating TaskRun %s/%s: %w", want.Namespace, want.Name, err)
	}
	tr, err = taskRuns.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("getting TaskRun %s/%s: %w", want.Namespace, want.Name, err)
	}
	if !ownedBy(tr, s) {
		// Left by an earlier snapshot of the same name, which is gone.
		if err := r.deleteOrphan(ctx, tr); err != nil {
			return nil, false, err
		}
		return nil, false, fmt.Errorf("TaskRun %s/%s of an earlier SandboxSnapshot of the same name (uid %q) is being deleted",
			tr.Namespace, tr.Name, tr.Labels[sandbox.SnapshotUIDLabel])
	}
	return tr, false, nil
}

// settingsOn returns cfg as it applies on node: with node-pools set, the
// containerd socket and overlayfs root of the pool the node's labels select
// (config.Snapshot.OnNode). A node that is gone takes cfg: no TaskRun runs
// there.
func (r *Reconciler) settingsOn(ctx context.Context, cfg *config.Snapshot, node string) (*config.Snapshot, error) {
	if len(cfg.NodePools) == 0 || node == "" {
		return cfg, nil
	}
	n, err := r.kubeClient.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrs.IsNotFound(err) {
		return cfg, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading the labels of node %s for config-snapshot %s: %w", node, config.NodePoolsKey, err)
	}
	return cfg.OnNode(n.Labels), nil
}

// cancelTaskRun cancels a running TaskRun rather than delete it: the
// committer thaws the sandbox on the SIGTERM Tekton then sends.
func (r *Reconciler) cancelTaskRun(ctx context.Context, tr *pipelinev1.TaskRun) error {
	if tr.IsCancelled() {
		return nil
	}
	patch := []byte(`{"spec":{"status":"` + pipelinev1.TaskRunSpecStatusCancelled + `","statusMessage":"SandboxSnapshot deleted"}}`)
	if _, err := r.pipelineClient.TektonV1().TaskRuns(tr.Namespace).Patch(ctx, tr.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrs.IsNotFound(err) {
		return fmt.Errorf("cancelling TaskRun %s/%s: %w", tr.Namespace, tr.Name, err)
	}
	return nil
}

// ownTaskRun returns s's TaskRun of the given name, or nil, asking the API on a
// miss so that a snapshot deleted right after creating one does not leave it running.
func (r *Reconciler) ownTaskRun(ctx context.Context, s *v1alpha1.SandboxSnapshot, name string) (*pipelinev1.TaskRun, error) {
	tr, err := r.findTaskRun(ctx, name, true)
	if err != nil || tr == nil || !ownedBy(tr, s) {
		return nil, err
	}
	return tr, nil
}

// deleteOrphan deletes a TaskRun whose snapshot is gone, its pod first, so the
// TaskRun holds the commit gate until the pod has thawed what it froze.
func (r *Reconciler) deleteOrphan(ctx context.Context, tr *pipelinev1.TaskRun) error {
	if tr.DeletionTimestamp != nil {
		return nil
	}
	return r.deleteTaskRun(ctx, tr, metav1.DeletePropagationForeground)
}

func (r *Reconciler) deleteTaskRun(ctx context.Context, tr *pipelinev1.TaskRun, propagation metav1.DeletionPropagation) error {
	err := r.pipelineClient.TektonV1().TaskRuns(tr.Namespace).Delete(ctx, tr.Name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &tr.UID},
		PropagationPolicy: ptr.To(propagation),
	})
	if err != nil && !apierrs.IsNotFound(err) {
		return fmt.Errorf("deleting TaskRun %s/%s: %w", tr.Namespace, tr.Name, err)
	}
	r.commits.deleted(tr)
	return nil
}
