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
	"testing"
	"time"

	fakepipelineclient "github.com/tektoncd/pipeline/pkg/client/injection/client/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	_ "knative.dev/pkg/client/injection/kube/client/fake"
	"knative.dev/pkg/configmap"
	rtesting "knative.dev/pkg/reconciler/testing"
	"knative.dev/pkg/system"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	fakesandboxclient "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/client/fake"
	_ "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/informers/sandbox/v1alpha1/sandboxsnapshot/fake"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	. "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/testing"
)

// TestNewControllerEnqueuesOnlyItsClass checks the wiring: snapshots of this
// operator's class and TaskRuns with its labels reach the work queue, while
// snapshots left to another controller never do.
func TestNewControllerEnqueuesOnlyItsClass(t *testing.T) {
	ctx, cancel, informers := rtesting.SetupFakeContextWithCancel(t)
	cmw := configmap.NewStaticWatcher(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: config.SnapshotConfigName, Namespace: system.Namespace()},
		Data:       map[string]string{config.RegistryKey: "r.test", config.DefaultClassKey: "opensandbox"},
	})
	impl := NewController(ctx, cmw)
	if err := cmw.Start(ctx.Done()); err != nil {
		t.Fatalf("starting the config watcher: %v", err)
	}
	stop, err := rtesting.RunAndSyncInformers(ctx, informers...)
	if err != nil {
		t.Fatalf("starting informers: %v", err)
	}
	defer func() {
		cancel()
		stop()
	}()

	snapshots := fakesandboxclient.Get(ctx).SandboxV1alpha1().SandboxSnapshots("team-a")
	for _, s := range []*v1alpha1.SandboxSnapshot{
		Snapshot("team-a", "unannotated", "sb"),
		Snapshot("team-a", "foreign", "sb", WithAnnotation(sandbox.ClassAnnotation, "opensandbox")),
		Snapshot("team-a", "ours", "sb", WithAnnotation(sandbox.ClassAnnotation, sandbox.TektonClass)),
	} {
		if _, err := snapshots.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitForQueue(t, impl.WorkQueue().Len, 1)
	key, _ := impl.WorkQueue().Get()
	if key != (types.NamespacedName{Namespace: "team-a", Name: "ours"}) {
		t.Errorf("enqueued %v, want team-a/ours", key)
	}
	impl.WorkQueue().Done(key)

	tr := resources.MakeTaskRun(Snapshot("team-a", "ours", "sb"), resources.Source{Pod: runningPod, Containers: committed},
		defaultCfg, system.Namespace())
	if _, err := fakepipelineclient.Get(ctx).TektonV1().TaskRuns(tr.Namespace).Create(ctx, tr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForQueue(t, impl.WorkQueue().Len, 1)
	if key, _ := impl.WorkQueue().Get(); key != (types.NamespacedName{Namespace: "team-a", Name: "ours"}) {
		t.Errorf("a TaskRun enqueued %v, want its snapshot team-a/ours", key)
	}
}

func waitForQueue(t *testing.T, length func() int, want int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		return length() == want, nil
	})
	if err != nil {
		t.Fatalf("work queue holds %d keys, want %d", length(), want)
	}
}
