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

package samples

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestRunning(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "reg/app:1"},
			{Name: "sidecar", Image: "reg/side:2"},
		}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodPending,
			QOSClass:   corev1.PodQOSBestEffort,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}},
		},
	}
	running(pod, "10.88.0.1", now)

	st := pod.Status
	if st.Phase != corev1.PodRunning || st.HostIP != "10.88.0.1" || st.PodIP != podIP || !st.StartTime.Equal(&now) {
		t.Errorf("phase %s, host %s, pod IP %s, start %v", st.Phase, st.HostIP, st.PodIP, st.StartTime)
	}
	if st.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("QOSClass = %q: the API server refuses a change", st.QOSClass)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		n := 0
		for _, c := range st.Conditions {
			if c.Type == ct && c.Status == corev1.ConditionTrue {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d true %s conditions, want 1: %v", n, ct, st.Conditions)
		}
	}
	if len(st.ContainerStatuses) != 2 {
		t.Fatalf("%d container statuses, want 2", len(st.ContainerStatuses))
	}
	side := st.ContainerStatuses[1]
	wantID := fmt.Sprintf("containerd://%x", sha256.Sum256([]byte("default/demo-0/sidecar")))
	wantImageID := fmt.Sprintf("reg/side:2@sha256:%x", sha256.Sum256([]byte("reg/side:2")))
	if side.Name != "sidecar" || side.ContainerID != wantID || side.Image != "reg/side:2" || side.ImageID != wantImageID ||
		!side.Ready || side.State.Running == nil {
		t.Errorf("sidecar status %+v, want ready and running with ID %s and image ID %s", side, wantID, wantImageID)
	}
	if st.ContainerStatuses[0].ContainerID == side.ContainerID {
		t.Errorf("both containers have ID %s", side.ContainerID)
	}
}

func TestNodeStatus(t *testing.T) {
	st := nodeStatus("v1.35.0", metav1.Now())
	if len(st.Conditions) != 1 || st.Conditions[0].Type != corev1.NodeReady || st.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("conditions %v, want Ready", st.Conditions)
	}
	if st.NodeInfo.KubeletVersion != "v1.35.0" || st.Addresses[0].Address != bridgeIP {
		t.Errorf("kubelet %s at %v", st.NodeInfo.KubeletVersion, st.Addresses)
	}
	if pods := st.Allocatable[corev1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("allocatable pods %s, want 110", pods.String())
	}
}

func TestReadyTaints(t *testing.T) {
	taints := []corev1.Taint{
		{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule},
	}
	if diff := cmp.Diff(taints[1:], readyTaints(taints)); diff != "" {
		t.Errorf("readyTaints (-want +got):\n%s", diff)
	}
}

func TestObjectsOfPodSample(t *testing.T) {
	objs, err := objects(filepath.Join("..", "..", "..", "config", "samples", "pod.yaml"), strings.NewReplacer("${LOCAL_REGISTRY}", "10.88.0.1:5000"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].GetKind() != "Pod" || objs[0].GetName() != podName || objs[0].GetNamespace() != namespace {
		t.Fatalf("objects %v, want pod %s/%s", objs, namespace, podName)
	}
	containers, _, _ := unstructured.NestedSlice(objs[0].Object, "spec", "containers")
	for _, c := range containers {
		if image := c.(map[string]any)["image"]; image != "10.88.0.1:5000/busybox:latest" {
			t.Errorf("image %v, want the registry filled in", image)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Action
		err  bool
	}{
		{args: nil, want: ApplyAll},
		{args: []string{"--no-snapshot"}, want: ApplyNoSnapshot},
		{args: []string{"--delete"}, want: DeleteAll},
		{args: []string{"--delete", "--no-snapshot"}, err: true},
		{args: []string{"-x"}, err: true},
	} {
		got, err := Parse(tc.args)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v, error %t", tc.args, got, err, tc.want, tc.err)
		}
	}
}
