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
	"fmt"
	"slices"
	"sync"

	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"knative.dev/pkg/logging"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// ownWrites remembers the resource versions of each snapshot that our writes
// replaced, until the informer catches up. A pass's events queue the next pass
// at once, maybe on a replaced copy; acting on it would conflict, so that pass
// is skipped, and the informer's event for the write queues it again.
type ownWrites struct {
	mu         sync.Mutex
	superseded map[types.NamespacedName][]string
}

func newOwnWrites() *ownWrites {
	return &ownWrites{superseded: map[types.NamespacedName][]string{}}
}

// replaced records resource versions of key that a write has just replaced.
func (w *ownWrites) replaced(key types.NamespacedName, versions ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.superseded[key] = append(w.superseded[key], versions...)
}

// stale reports whether version of key was replaced; any other drops the entry.
func (w *ownWrites) stale(key types.NamespacedName, version string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	versions, ok := w.superseded[key]
	if !ok {
		return false
	}
	if slices.Contains(versions, version) {
		return true
	}
	delete(w.superseded, key)
	return false
}

// forget drops key's entry: the snapshot is gone.
func (w *ownWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.superseded, key)
}

// patchAnnotation sets s's annotation key to value, or removes it when value
// is "". s takes the patched version, for a status write that follows.
func (r *Reconciler) patchAnnotation(ctx context.Context, s *v1alpha1.SandboxSnapshot, key, value string) error {
	var v any
	if value != "" {
		v = value
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	if err != nil {
		return err
	}
	patched, err := r.sandboxClient.SandboxV1alpha1().SandboxSnapshots(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("annotating SandboxSnapshot %s/%s with %s: %w", s.Namespace, s.Name, key, err)
	}
	r.writes.replaced(types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, s.ResourceVersion)
	s.ResourceVersion = patched.ResourceVersion
	s.Annotations = patched.Annotations
	return nil
}

// updateStatus writes s's status, onto the latest version after a conflict
// unless that is terminal, gives s the version written, and reports whether
// the write made s terminal (so a resync, retry or second pass does not).
func (r *Reconciler) updateStatus(ctx context.Context, s *v1alpha1.SandboxSnapshot, before *v1alpha1.SandboxSnapshotStatus) (bool, error) {
	snapshots := r.sandboxClient.SandboxV1alpha1().SandboxSnapshots(s.Namespace)
	desired := s.Status
	current := s
	wasTerminal := before.IsTerminal()
	written := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		updated, err := snapshots.UpdateStatus(ctx, current, metav1.UpdateOptions{})
		if err == nil {
			s.ResourceVersion = updated.ResourceVersion
			written = true
			return nil
		}
		if apierrs.IsConflict(err) {
			latest, getErr := snapshots.Get(ctx, s.Name, metav1.GetOptions{})
			if getErr != nil {
				return getErr
			}
			if latest.Status.IsTerminal() && !s.Status.IsTerminal() || latest.UID != s.UID {
				logging.FromContext(ctx).Infow("Dropping a stale status write", "phase", latest.Status.Phase)
				return nil
			}
			wasTerminal = latest.Status.IsTerminal()
			latest.Status = desired
			current = latest
		}
		return fmt.Errorf("updating the status of SandboxSnapshot %s/%s: %w", s.Namespace, s.Name, err)
	})
	return written && desired.IsTerminal() && !wasTerminal, err
}
