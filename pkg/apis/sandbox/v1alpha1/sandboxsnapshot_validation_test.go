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

package v1alpha1

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, sandbox, want string
	}{
		{"valid", "sb-1.team", ""},
		{"missing", "", "missing field(s): spec.sandboxName"},
		{"upper case", "Sandbox", "invalid value: Sandbox: spec.sandboxName"},
		{"too long", strings.Repeat("a", 254), "spec.sandboxName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &SandboxSnapshot{Spec: SandboxSnapshotSpec{SandboxName: tc.sandbox}}
			err := s.Validate(t.Context())
			if tc.want == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
