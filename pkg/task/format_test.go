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
	"strings"
	"testing"
)

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestDigestsRoundTrip(t *testing.T) {
	got, err := ParseDigests(FormatDigests([]string{digestA, digestB})+"\n", 2)
	if err != nil || len(got) != 2 || got[0] != digestA || got[1] != digestB {
		t.Errorf("ParseDigests(FormatDigests()) = %v, %v", got, err)
	}
}

func TestParseDigestsRejects(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int
		err   string
	}{
		{"", 1, "is empty"},
		{digestA, 2, "holds 1 digest(s), want 2"},
		{"sha256:abc", 1, "not a sha256 digest"},
		{"sha512:" + strings.Repeat("a", 64), 1, "not a sha256 digest"},
		{"sha256:" + strings.Repeat("A", 64), 1, "not a sha256 digest"},
	} {
		if _, err := ParseDigests(tc.value, tc.want); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseDigests(%q, %d) = %v, want an error containing %q", tc.value, tc.want, err, tc.err)
		}
	}
}

func TestContainerItem(t *testing.T) {
	c, img, err := SplitContainerItem(ContainerItem("app", "r.test/sb-app:t"))
	if err != nil || c != "app" || img != "r.test/sb-app:t" {
		t.Errorf("SplitContainerItem(ContainerItem()) = %q, %q, %v", c, img, err)
	}
	if _, _, err := SplitContainerItem("app"); err == nil {
		t.Error("SplitContainerItem(\"app\") succeeded, want an error")
	}
}
