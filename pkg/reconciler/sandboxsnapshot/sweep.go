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

	apierrs "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
)

// goneSweeper runs sweepTaskRuns after the generated reconciler's pass, a
// no-op, on a snapshot that is gone.
type goneSweeper struct {
	controller.Reconciler
	leaderAware
	r *Reconciler
}

// leaderAware is what the generated reconciler is (reconciler.LeaderAwareFuncs).
type leaderAware interface {
	reconciler.LeaderAware
	IsLeaderFor(types.NamespacedName) bool
}

// withSweep wraps the generated reconciler in a goneSweeper.
func withSweep(generated controller.Reconciler, r *Reconciler) controller.Reconciler {
	return goneSweeper{Reconciler: generated, leaderAware: generated.(leaderAware), r: r}
}

// Promote implements reconciler.LeaderAware, also queueing the snapshot of
// each TaskRun, gone or not: events seen before the promotion were dropped.
func (g goneSweeper) Promote(b reconciler.Bucket, enq func(reconciler.Bucket, types.NamespacedName)) error {
	if err := g.leaderAware.Promote(b, enq); err != nil {
		return err
	}
	trs, err := g.r.taskRunLister().List(labels.SelectorFromSet(labels.Set{sandbox.ManagedByLabel: sandbox.ManagedByValue}))
	if err != nil {
		return err
	}
	for _, tr := range trs {
		key := types.NamespacedName{Namespace: tr.Labels[sandbox.SnapshotNamespaceLabel], Name: tr.Labels[sandbox.SnapshotNameLabel]}
		if key.Name != "" && b.Has(key) {
			enq(b, key)
		}
	}
	return nil
}

// Reconcile implements controller.Reconciler.
func (g goneSweeper) Reconcile(ctx context.Context, key string) error {
	if err := g.Reconciler.Reconcile(ctx, key); err != nil {
		return err
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil || !g.IsLeaderFor(types.NamespacedName{Namespace: ns, Name: name}) {
		return nil
	}
	if _, err := g.r.snapshotLister.SandboxSnapshots(ns).Get(name); !apierrs.IsNotFound(err) {
		return nil
	}
	return g.r.sweepTaskRuns(ctx, ns, name)
}
