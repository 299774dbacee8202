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

// Package cri names the labels and metadata containerd's CRI plugin records.
package cri

import (
	"encoding/json"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/opencontainers/go-digest"
)

// Labels on a container naming its pod and itself.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
	// LabelKind is "sandbox" on a pod's sandbox (pause) container.
	LabelKind = "io.cri-containerd.kind"
)

// LabelImage is the label on the images the CRI plugin manages.
const LabelImage = "io.cri-containerd.image"

// AnnotationImageName holds, in a container's spec, the image the pod named.
const AnnotationImageName = "io.kubernetes.cri.image-name"

// ExtensionMetadata is the container extension holding the CRI metadata.
const ExtensionMetadata = "io.cri-containerd.container.metadata"

// ImageID returns the config digest the CRI plugin recorded for info, or "".
func ImageID(info containers.Container) digest.Digest {
	ext, ok := info.Extensions[ExtensionMetadata]
	if !ok || ext == nil {
		return ""
	}
	var m struct {
		Metadata struct {
			ImageRef string
		}
	}
	if err := json.Unmarshal(ext.GetValue(), &m); err != nil {
		return ""
	}
	d, err := digest.Parse(m.Metadata.ImageRef)
	if err != nil {
		return ""
	}
	return d
}
