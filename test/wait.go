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

package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// listerWatcher is the List and Watch of a typed client of one resource.
type listerWatcher[L runtime.Object] interface {
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// ListWatch lists and watches what client serves, narrowed by the field and
// label selectors of sel.
func ListWatch[L runtime.Object](client listerWatcher[L], sel metav1.ListOptions) *cache.ListWatch {
	narrow := func(o metav1.ListOptions) metav1.ListOptions {
		o.FieldSelector, o.LabelSelector = sel.FieldSelector, sel.LabelSelector
		return o
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.List(ctx, narrow(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.Watch(ctx, narrow(o))
		},
	}
}

// Named selects the object called name, or every object when name is empty.
func Named(name string) metav1.ListOptions {
	if name == "" {
		return metav1.ListOptions{}
	}
	return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
}

// Until runs watchtools.UntilWithSync within d and fails the test on a
// timeout, with describe's view of the last state.
func Until(ctx context.Context, t *testing.T, d time.Duration, what string, obj runtime.Object, lw cache.ListerWatcher,
	pre watchtools.PreconditionFunc, cond watchtools.ConditionFunc, describe ...func() string) *watch.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	ev, err := watchtools.UntilWithSync(ctx, lw, obj, pre, cond)
	if err != nil {
		var last string
		for _, f := range describe {
			last += f()
		}
		t.Fatalf("waiting %v for %s: %v\nlast seen:\n%s", d, what, err, last)
	}
	t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
	return ev
}

// UntilGone waits within d until lw no longer serves the object with key
// (namespace/name); obj is of its type.
func UntilGone(ctx context.Context, t *testing.T, d time.Duration, what string, obj runtime.Object, lw cache.ListerWatcher, key string) {
	t.Helper()
	Until(ctx, t, d, what, obj, lw,
		func(store cache.Store) (bool, error) {
			_, exists, err := store.GetByKey(key)
			return !exists, err
		}, func(ev watch.Event) (bool, error) { return ev.Type == watch.Deleted, nil })
}

// WaitForEvent waits within d for an event with reason, whose message
// contains text, on the object called name in ns, and returns it. The
// controller's event broadcaster writes events asynchronously.
func WaitForEvent(ctx context.Context, t *testing.T, c *Clients, ns, name, reason, text string, d time.Duration) *corev1.Event {
	t.Helper()
	sel := metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": name, "reason": reason}.String()}
	what := fmt.Sprintf("event %s on %s/%s", reason, ns, name)
	if text != "" {
		what = fmt.Sprintf("event %s %q on %s/%s", reason, text, ns, name)
	}
	ev := Until(ctx, t, d, what, &corev1.Event{}, ListWatch(c.Kube.CoreV1().Events(ns), sel), nil,
		func(ev watch.Event) (bool, error) {
			return ev.Type != watch.Deleted && strings.Contains(ev.Object.(*corev1.Event).Message, text), nil
		})
	found := ev.Object.(*corev1.Event)
	t.Logf("event %s on %s: %s", reason, name, found.Message)
	return found
}
