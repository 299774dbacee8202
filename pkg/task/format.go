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

package task

import (
	"fmt"
	"strings"
)

// ContainerItem renders one item of the containers param.
func ContainerItem(container, imageURI string) string {
	return container + "=" + imageURI
}

// SplitContainerItem splits one item of the containers param.
func SplitContainerItem(item string) (container, imageURI string, err error) {
	container, imageURI, ok := strings.Cut(item, "=")
	if !ok {
		return "", "", fmt.Errorf("item %q is not <container>=<image>", item)
	}
	return container, imageURI, nil
}

// FormatDigests renders the DIGESTS result: manifest digests, comma-separated,
// in the order of the containers param.
func FormatDigests(digests []string) string {
	return strings.Join(digests, ",")
}

// ParseDigests parses the DIGESTS result and checks that it holds want
// well-formed sha256 digests.
func ParseDigests(value string, want int) ([]string, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, fmt.Errorf("result %s is empty, want %d digest(s)", ResultDigests, want)
	}
	digests := strings.Split(value, ",")
	if len(digests) != want {
		return nil, fmt.Errorf("result %s holds %d digest(s), want %d", ResultDigests, len(digests), want)
	}
	for _, d := range digests {
		if !isSHA256Digest(d) {
			return nil, fmt.Errorf("result %s holds %q, which is not a sha256 digest", ResultDigests, d)
		}
	}
	return digests, nil
}

func isSHA256Digest(d string) bool {
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for _, c := range hex {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
