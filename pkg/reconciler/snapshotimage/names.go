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

package snapshotimage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// maxRepositoryLength is the longest repository registries accept.
const maxRepositoryLength = 255

// osbSnapshotName matches the names OpenSandbox's server gives snapshots.
var osbSnapshotName = regexp.MustCompile(`^osb-snap-([0-9a-f]{32})$`)

// uidTagLength is how many characters of a UID a tag carries.
const uidTagLength = 8

// Tag returns the tag of a snapshot's images, OpenSandbox's where it
// names one snapshot, with a UID part (uidTag) where it does not:
//   - snap-gen<generation>-<BatchSandbox UID> when the BatchSandbox controls
//     the snapshot, as a recreated one counts generations from 1 again;
//   - snap-<id> for a snapshot named osb-snap-<id>, a random id;
//   - otherwise snap-<32 hex of sha256(name)>-<snapshot UID>.
func Tag(s *v1alpha1.SandboxSnapshot, sb *v1alpha1.BatchSandbox) string {
	if owner := metav1.GetControllerOf(s); owner != nil && owner.UID == sb.UID {
		return fmt.Sprintf("snap-gen%d-%s", sb.Generation, uidTag(sb.UID))
	}
	if m := osbSnapshotName.FindStringSubmatch(s.Name); m != nil {
		return "snap-" + m[1]
	}
	sum := sha256.Sum256([]byte(s.Name))
	return "snap-" + hex.EncodeToString(sum[:])[:32] + "-" + uidTag(s.UID)
}

// uidTag returns the first uidTagLength letters and digits of uid.
func uidTag(uid types.UID) string {
	out := make([]rune, 0, uidTagLength)
	for _, r := range string(uid) {
		if len(out) == uidTagLength {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			out = append(out, r)
		}
	}
	return string(out)
}

// Repository returns <registry>/<namespace>/<sandbox>/<container>, the
// repository a container's images go to; names hold no '/', so none collide.
func Repository(registry, namespace, sandbox, container string) string {
	return strings.Join([]string{registry, namespace, sandbox, container}, "/")
}

// URI returns the valid OCI reference <repository>:<tag> of a container.
func URI(registry, namespace, sandbox, container, tag string) (string, error) {
	uri := Repository(registry, namespace, sandbox, container) + ":" + tag
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
