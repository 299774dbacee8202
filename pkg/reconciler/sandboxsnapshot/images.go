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

	"github.com/google/go-containerregistry/pkg/name"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/controller"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/snapshotimage"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
)

// imagesOf returns the images a snapshot recorded: repository@imageDigest
// for a pinned imageUri, as this operator writes it, and the tag alone for
// an unpinned one, as OpenSandbox's controller writes it. Its imageDigest is
// nerdctl's image ID, the config's digest, which names no manifest, and its
// resume pulls the tag.
func imagesOf(s *v1alpha1.SandboxSnapshot, opts []name.Option) ([]name.Reference, error) {
	var out []name.Reference
	for _, c := range s.Status.Containers {
		if c.ImageDigest == "" {
			continue
		}
		ref, err := name.ParseReference(c.ImageURI, opts...)
		if err != nil {
			return nil, fmt.Errorf("SandboxSnapshot %s/%s: status.containers[%s].imageUri %q: %w", s.Namespace, s.Name, c.ContainerName, c.ImageURI, err)
		}
		if _, pinned := ref.(name.Digest); !pinned {
			out = append(out, ref)
			continue
		}
		d, err := name.NewDigest(ref.Context().Name()+"@"+c.ImageDigest, opts...)
		if err != nil {
			return nil, fmt.Errorf("SandboxSnapshot %s/%s: status.containers[%s].imageDigest %q: %w", s.Namespace, s.Name, c.ContainerName, c.ImageDigest, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// deleteImages hands, under the Delete policy, each image a deleted snapshot
// recorded and owns to the imagedeletion reconciler, and reports each it
// names but does not own; commit is its commit TaskRun, nil once gone. It is
// not waited for: OpenSandbox deletes <sandbox>-pause while the resumed pod
// still runs from its image.
func (r *Reconciler) deleteImages(ctx context.Context, s *v1alpha1.SandboxSnapshot, commit *pipelinev1.TaskRun) error {
	cfg := config.FromContext(ctx).Snapshot
	recorder := controller.GetEventRecorder(ctx)
	policy, err := cfg.ImageDeletionPolicyOf(s.Namespace, s.Name, s.Annotations)
	if err != nil {
		recorder.Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind, "%v; the images are retained", err)
		return nil
	}
	if policy != config.ImageDeletionDelete {
		return nil
	}
	opts := registry.NameOptions(cfg.InsecureRegistry)
	own := snapshotimage.Ownership{Registry: cfg.Registry}
	if commit != nil {
		pushed, err := resources.PushedImages(commit, opts...)
		if err != nil {
			recorder.Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind, "%v; the images are retained", err)
			return nil
		}
		own.TaskRun, own.Pushed = commit.Namespace+"/"+commit.Name, pushed
	}
	records, refused, err := snapshotimage.MakeRecords(s, r.namespace, own, opts...)
	if err != nil {
		recorder.Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonImagesLeftBehind, "%v; the images are retained", err)
		return nil
	}
	for _, err := range refused {
		recorder.Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonImageDeletionRefused, "%v; it is left in the registry", err)
	}
	for _, cm := range records {
		// A pass that failed half-way made some of them.
		if _, err := r.kubeClient.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrs.IsAlreadyExists(err) {
			return fmt.Errorf("creating image deletion record %s/%s: %w", cm.Namespace, cm.Name, err)
		}
	}
	return nil
}
