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

package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// maxRepositoryLength is the longest image name (registry and path) that
// registries accept.
const maxRepositoryLength = 255

// osbSnapshotName matches the names OpenSandbox's server gives snapshots.
var osbSnapshotName = regexp.MustCompile(`^osb-snap-([0-9a-f]{32})$`)

// ImageTag returns the tag of a snapshot's images, derived as OpenSandbox does:
//   - snap-gen<generation> when the BatchSandbox is the snapshot's controller;
//   - snap-<id> when the snapshot is named osb-snap-<32 lower-hex id>;
//   - otherwise snap- and the first 32 hex characters of sha256(name).
func ImageTag(s *v1alpha1.SandboxSnapshot, sb *v1alpha1.BatchSandbox) string {
	if owner := metav1.GetControllerOf(s); owner != nil && owner.UID == sb.UID {
		return fmt.Sprintf("snap-gen%d", sb.Generation)
	}
	if m := osbSnapshotName.FindStringSubmatch(s.Name); m != nil {
		return "snap-" + m[1]
	}
	sum := sha256.Sum256([]byte(s.Name))
	return "snap-" + hex.EncodeToString(sum[:])[:32]
}

// ImageURI returns <registry>/<sandbox>-<container>:<tag>, the image a
// container is pushed to, and checks that it is a valid OCI reference.
func ImageURI(registry, sandbox, container, tag string) (string, error) {
	uri := fmt.Sprintf("%s/%s-%s:%s", registry, sandbox, container, tag)
	ref, err := name.NewTag(uri, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image %q for container %q is not a valid OCI reference: %w", uri, container, err)
	}
	if n := len(ref.Context().Name()); n > maxRepositoryLength {
		return "", fmt.Errorf("image %q for container %q is %d characters long before its tag, more than the %d registries accept",
			uri, container, n, maxRepositoryLength)
	}
	return uri, nil
}
