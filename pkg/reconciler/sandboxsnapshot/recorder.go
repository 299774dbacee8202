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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	kubeclient "knative.dev/pkg/client/injection/kube/client"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
)

// finalizerUpdate is the reason of the generated reconciler's finalizer events.
const finalizerUpdate = "FinalizerUpdate"

// withEventRecorder returns ctx with its event recorder, or one like
// knative's, minus the Normal FinalizerUpdate events: they would be a third of
// a snapshot's API writes, and the finalizer shows in its metadata anyway.
func withEventRecorder(ctx context.Context) context.Context {
	rec := controller.GetEventRecorder(ctx)
	if rec == nil {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartLogging(logging.FromContext(ctx).Named("event-broadcaster").Infof)
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeclient.Get(ctx).CoreV1().Events("")})
		rec = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: AgentName})
	}
	return controller.WithEventRecorder(ctx, quietRecorder{rec})
}

// quietRecorder passes on every event but the Normal FinalizerUpdate ones.
type quietRecorder struct{ record.EventRecorder }

func quiet(eventType, reason string) bool {
	return eventType == corev1.EventTypeNormal && reason == finalizerUpdate
}

func (r quietRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	if !quiet(eventType, reason) {
		r.EventRecorder.Event(obj, eventType, reason, message)
	}
}

func (r quietRecorder) Eventf(obj runtime.Object, eventType, reason, messageFmt string, args ...any) {
	if !quiet(eventType, reason) {
		r.EventRecorder.Eventf(obj, eventType, reason, messageFmt, args...)
	}
}

func (r quietRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventType, reason, messageFmt string, args ...any) {
	if !quiet(eventType, reason) {
		r.EventRecorder.AnnotatedEventf(obj, annotations, eventType, reason, messageFmt, args...)
	}
}
