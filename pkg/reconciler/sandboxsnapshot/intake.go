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
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// intake holds new snapshots back from the work queue, one FIFO, lest a burst
// put each later pass of every snapshot behind it (knative's slow lane feeds
// the same FIFO). It lets one in while fewer keys than workers wait; each
// finished pass makes room. The keys it let in count as waiting until their
// pass begins: the queue's length misses a key while knative moves it from a
// lane to the queue its workers take from.
type intake struct {
	impl *controller.Impl
	room int

	mu   sync.Mutex
	keys []types.NamespacedName // FIFO
	held map[types.NamespacedName]bool
	in   map[string]bool // let in, pass not begun
	wake chan struct{}
}

// newIntake makes the intake of impl's work queue; passFilter notifies it.
func newIntake(impl *controller.Impl) *intake {
	return &intake{impl: impl, room: impl.Concurrency, held: map[types.NamespacedName]bool{}, in: map[string]bool{},
		wake: make(chan struct{}, 1)}
}

// isNew reports whether s has not been reconciled yet.
func isNew(s *v1alpha1.SandboxSnapshot) bool {
	return s.Status.Phase == "" && s.DeletionTimestamp == nil
}

// add queues s's key behind the new snapshots already waiting.
func (a *intake) add(s *v1alpha1.SandboxSnapshot) {
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	a.mu.Lock()
	if !a.held[key] {
		a.held[key] = true
		a.keys = append(a.keys, key)
	}
	a.mu.Unlock()
	a.notify()
}

func (a *intake) notify() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run lets new snapshots in whenever it is woken, until ctx is done.
func (a *intake) run(ctx context.Context) {
	for {
		select {
		case <-a.wake:
		case <-ctx.Done():
			return
		}
		for a.impl.WorkQueue().Len() < a.room {
			key, ok := a.next()
			if !ok {
				break
			}
			a.impl.EnqueueKey(key)
		}
	}
}

// next takes the longest-waiting key, if fewer keys than workers that it let
// in wait for their pass.
func (a *intake) next() (types.NamespacedName, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.in) >= a.room {
		return types.NamespacedName{}, false
	}
	if len(a.keys) == 0 {
		a.keys = nil // let the drained backing array go
		return types.NamespacedName{}, false
	}
	key := a.keys[0]
	a.keys = a.keys[1:]
	delete(a.held, key)
	a.in[key.String()] = true
	return key, true
}

// began notes that a pass of key begins.
func (a *intake) began(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.in, key)
}

// passFilter wraps the generated reconciler: it skips the passes that skip
// says to skip, and tells its observer (the intake) of each pass's beginning
// and end. It stays leader-aware.
type passFilter struct {
	controller.Reconciler
	reconciler.LeaderAware
	skip func(key string) bool
	in   passObserver
}

// passObserver is told of each pass of the work queue's keys.
type passObserver interface {
	began(key string)
	notify() // the pass ended
}

// filterPasses wraps impl's reconciler in a passFilter.
func filterPasses(impl *controller.Impl, skip func(key string) bool, in passObserver) {
	impl.Reconciler = passFilter{Reconciler: impl.Reconciler, LeaderAware: impl.Reconciler.(reconciler.LeaderAware), skip: skip, in: in}
}

func (p passFilter) Reconcile(ctx context.Context, key string) error {
	p.in.began(key)
	defer p.in.notify()
	if p.skip(key) {
		return nil
	}
	return p.Reconciler.Reconcile(ctx, key)
}
