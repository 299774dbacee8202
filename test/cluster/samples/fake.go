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
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// nodeStatus is the status of a Ready node whose kubelet would be of
// kubeletVersion, as of now.
func nodeStatus(kubeletVersion string, now metav1.Time) corev1.NodeStatus {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return corev1.NodeStatus{
		Capacity:    resources,
		Allocatable: resources,
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: bridgeIP},
			{Type: corev1.NodeHostName, Address: NodeName},
		},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "FakeNode", Message: "created by test/cmd/samples",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		NodeInfo: corev1.NodeSystemInfo{
			ContainerRuntimeVersion: "containerd://fake",
			KubeletVersion:          kubeletVersion,
			OperatingSystem:         "linux",
			Architecture:            "amd64",
		},
	}
}

// readyTaints returns taints without the not-ready taint admission puts on
// a new node.
func readyTaints(taints []corev1.Taint) []corev1.Taint {
	out := []corev1.Taint{}
	for _, t := range taints {
		if t.Key != corev1.TaintNodeNotReady {
			out = append(out, t)
		}
	}
	return out
}

// running makes pod's status that of a pod running on hostIP since now,
// every container ready, with the container and image IDs a runtime would
// report, derived from the names so that they are stable.
func running(pod *corev1.Pod, hostIP string, now metav1.Time) {
	st := &pod.Status
	st.Phase = corev1.PodRunning
	st.HostIP, st.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	st.PodIP, st.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	st.StartTime = &now
	st.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name:        c.Name,
			Ready:       true,
			Started:     ptr.To(true),
			Image:       c.Image,
			ImageID:     c.Image + "@sha256:" + sha256Hex(c.Image),
			ContainerID: "containerd://" + sha256Hex(pod.Namespace+"/"+pod.Name+"/"+c.Name),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
