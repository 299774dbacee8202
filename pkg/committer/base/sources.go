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

package base

import (
	"context"
	"sort"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/google/go-containerregistry/pkg/name"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// maxRepositories bounds Repositories, which a label of the committed image
// records.
const maxRepositories = 16

// Repositories lists the repositories img's layers can be fetched from: the
// names of image records with its target, then the distribution source labels
// containerd put on manifest mdesc when pulling.
func Repositories(ctx context.Context, c *client.Client, img images.Image, mdesc ocispec.Descriptor) []string {
	seen := map[string]bool{}
	var out []string
	add := func(ref string) {
		if strings.HasPrefix(ref, "sha256:") {
			return
		}
		r, err := name.ParseReference(ref, name.StrictValidation)
		if err != nil {
			return
		}
		n := r.Context().RegistryStr() + "/" + r.Context().RepositoryStr()
		if !seen[n] && len(out) < maxRepositories {
			seen[n] = true
			out = append(out, n)
		}
	}
	add(img.Name)
	if others, err := c.ImageService().List(ctx, "target.digest=="+img.Target.Digest.String()); err == nil {
		sort.Slice(others, func(i, j int) bool { return others[i].Name < others[j].Name })
		for _, o := range others {
			add(o.Name)
		}
	}
	if info, err := c.ContentStore().Info(ctx, mdesc.Digest); err == nil {
		keys := make([]string, 0, len(info.Labels))
		for k := range info.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if host, ok := strings.CutPrefix(k, oci.LabelDistributionSource); ok {
				for _, repo := range strings.Split(info.Labels[k], ",") {
					add(host + "/" + repo + ":latest")
				}
			}
		}
	}
	return out
}
