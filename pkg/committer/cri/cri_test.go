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

package cri

import (
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/typeurl/v2"
	"github.com/opencontainers/go-digest"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestImageID reads the image ID from the CRI plugin's metadata extension.
func TestImageID(t *testing.T) {
	id := digest.FromString("config")
	ext := func(v string) map[string]typeurl.Any {
		return map[string]typeurl.Any{ExtensionMetadata: &anypb.Any{TypeUrl: "github.com/containerd/containerd/pkg/cri/store/container/Metadata", Value: []byte(v)}}
	}
	for _, tc := range []struct {
		name string
		info containers.Container
		want digest.Digest
	}{
		{"CRI container", containers.Container{Extensions: ext(`{"Version":"v1","Metadata":{"ID":"c1","ImageRef":"` + id.String() + `"}}`)}, id},
		{"no extension", containers.Container{}, ""},
		{"not a digest", containers.Container{Extensions: ext(`{"Version":"v1","Metadata":{"ImageRef":"busybox:latest"}}`)}, ""},
		{"not JSON", containers.Container{Extensions: ext(`\x08\x01`)}, ""},
	} {
		if got := ImageID(tc.info); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
