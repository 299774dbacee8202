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

package testing

import (
	"context"
	"testing"

	fakepipelineclient "github.com/tektoncd/pipeline/pkg/client/injection/client/fake"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	logtesting "knative.dev/pkg/logging/testing"
	"knative.dev/pkg/reconciler"
	rtesting "knative.dev/pkg/reconciler/testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	fakesandboxclient "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/client/fake"
)

// maxEventBufferSize bounds the events a row may record.
const maxEventBufferSize = 20

// Ctor builds the reconciler under test from fake clients in ctx.
type Ctor func(context.Context, *Listers) controller.Reconciler

// MakeFactory returns a TableTest factory for the reconciler made by ctor.
func MakeFactory(ctor Ctor) rtesting.Factory {
	return func(t *testing.T, r *rtesting.TableRow) (controller.Reconciler, rtesting.ActionRecorderList, rtesting.EventList) {
		ls := NewListers(r.Objects)

		ctx := r.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		ctx = logging.WithLogger(ctx, logtesting.TestLogger(t))
		ctx, kubeClient := fakekubeclient.With(ctx, ls.GetKubeObjects()...)
		ctx, sandboxClient := fakesandboxclient.With(ctx, ls.GetSandboxObjects()...)
		// The fake tracker guesses "batchsandboxs" as the plural of
		// BatchSandbox, so BatchSandboxes are filed under their real resource.
		for _, sb := range ls.GetBatchSandboxes() {
			if err := sandboxClient.Tracker().Create(v1alpha1.SchemeGroupVersion.WithResource("batchsandboxes"), sb, sb.Namespace); err != nil {
				t.Fatalf("adding BatchSandbox %s/%s: %v", sb.Namespace, sb.Name, err)
			}
		}
		ctx, pipelineClient := fakepipelineclient.With(ctx, ls.GetPipelineObjects()...)

		eventRecorder := record.NewFakeRecorder(maxEventBufferSize)
		ctx = controller.WithEventRecorder(ctx, eventRecorder)

		c := ctor(ctx, &ls)
		// Only the leader reconciles; without this every row skips its key.
		if la, ok := c.(reconciler.LeaderAware); ok {
			if err := la.Promote(reconciler.UniversalBucket(), func(reconciler.Bucket, types.NamespacedName) {}); err != nil {
				t.Fatalf("Promote() = %v", err)
			}
		}
		r.Ctx = ctx

		for _, reactor := range r.WithReactors {
			kubeClient.PrependReactor("*", "*", reactor)
			sandboxClient.PrependReactor("*", "*", reactor)
			pipelineClient.PrependReactor("*", "*", reactor)
		}
		return c, rtesting.ActionRecorderList{sandboxClient, pipelineClient, kubeClient}, rtesting.EventList{Recorder: eventRecorder}
	}
}
